"""memcached: argv built structurally (flags, one combined `-o`), stats over the text protocol."""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any

from kvtune.knobs.appliers.base import Launch
from kvtune.knobs.appliers.memcached import memcached_argv_options
from kvtune.targets.base import ServerTarget


class MemcachedTarget(ServerTarget):
    kind = "memcached"
    default_binary = "memcached"
    protocol = "memcache"
    version_args = ("-V",)

    def argv(self, launch: Launch) -> list[str]:
        argv = [self.binary, "-l", self.host, "-p", str(self.port), "-U", "0"]
        if os.geteuid() == 0:
            argv += ["-u", "root"]  # memcached refuses to run as root without it
        argv += list(self.spec.args)
        argv += launch.flags
        argv += memcached_argv_options(launch.memcached_options)
        return argv

    def _request(self, cmd: bytes, end: tuple[bytes, ...] = (b"END\r\n",),
                 timeout: float = 2.0) -> bytes:
        with socket.create_connection((self.host, self.port), timeout=timeout) as s:
            s.sendall(cmd)
            buf = b""
            while not buf.endswith(end):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            return buf

    def ping(self, timeout: float = 1.0) -> bool:
        try:
            return self._request(b"version\r\n", (b"\r\n",), timeout).startswith(b"VERSION")
        except OSError:
            return False

    def raw_stats(self, group: str = "") -> dict[str, str]:
        """One `stats [group]` answer as the server wrote it (values as text)."""
        cmd = f"stats {group}".strip().encode() + b"\r\n"
        out: dict[str, str] = {}
        for line in self._request(cmd).decode(errors="replace").splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for group, key in (("", "stats"), ("settings", "settings"), ("slabs", "slabs"),
                           ("items", "items")):
            with contextlib.suppress(OSError):
                out[key] = {k: _num(v) for k, v in self.raw_stats(group).items()}
        return out


def _num(v: str) -> Any:
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v
