"""redis-server: directives as `--name value` arguments, INFO over RESP."""

from __future__ import annotations

import socket
from typing import Any

from kvtune.knobs.appliers.base import Launch
from kvtune.targets.base import ServerTarget


def resp_command(*args: str) -> bytes:
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


class RedisTarget(ServerTarget):
    kind = "redis"
    default_binary = "redis-server"
    protocol = "resp"
    version_args = ("--version",)

    def argv(self, launch: Launch) -> list[str]:
        argv = [self.binary, "--port", str(self.port), "--bind", self.host,
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
                *self.spec.args]
        for name, value in launch.redis_directives.items():
            argv += [f"--{name}", value]
        return argv

    def _call(self, *args: str, timeout: float = 2.0) -> bytes:
        with socket.create_connection((self.host, self.port), timeout=timeout) as s:
            s.sendall(resp_command(*args))
            buf = s.recv(65536)
            if buf.startswith(b"$"):
                header, _, rest = buf.partition(b"\r\n")
                need = int(header[1:])
                while len(rest) < need + 2 and need >= 0:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                return rest[:need]
            return buf

    def ping(self, timeout: float = 1.0) -> bool:
        try:
            return self._call("PING", timeout=timeout).startswith(b"+PONG")
        except OSError:
            return False

    def stats(self) -> dict[str, Any]:
        try:
            raw = self._call("INFO", "everything").decode(errors="replace")
        except OSError:
            return {}
        info: dict[str, Any] = {}
        for line in raw.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                try:
                    info[k] = int(v)
                except ValueError:
                    try:
                        info[k] = float(v)
                    except ValueError:
                        info[k] = v
        return {"info": info}
