"""`kvtune workload capture URL`: the live traffic of a running server, as a workload model
(kvtune.workload.model). Each server kind captures in its own way (kinds/<kind>/capture.py,
its Kind's `capture`); this module parses the URL, bounds the capture and writes the model:

- memcached: `watch fetchers mutations` (memcached >= 1.5). The watcher's lines are put
  back in order by their `gid`, then reassembled per connection (`cfd`): a set logs a
  fetch and then a store of the same key, so the fetch is dropped; consecutive fetches of
  one connection within MGET_GAP are one multiget. delete, incr and touch are logged as
  fetches by memcached 1.6 and count as gets. `skipped=N` lines (the watcher lagged and
  memcached dropped N lines) are counted. `stats` before and after give the true rate,
  hit ratio and the share of the traffic seen.
- Redis: `MONITOR` for a bounded window (5 s by default, 60 s at most): it costs the
  server much of its throughput while it runs. The values it streams are measured (length)
  and dropped. `--sample` reads no request at all: `INFO commandstats` deltas for the mix
  and rate, `SCAN` with `STRLEN` and `TTL` on a bounded number of keys for the sizes.

Keys are hashed (BLAKE2b keyed with a random salt of this capture) as soon as a line is
parsed: no key is stored or printed in clear. Only read-only commands are sent, only to
the address given. The cost to the server is measured: its CPU time per request in a
window before the capture and during it.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kvtune.errors import HarnessError, UserError
from kvtune.workload.model import ModelBuilder

MGET_GAP = 0.0  # fetches of one connection this close form one multiget (0: never)
BASELINE_S = 1.0  # the window before the capture that measures the server's own cost


@dataclass
class Target:
    kind: str  # a server kind that captures (kinds/<kind>/capture.py)
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.kind}://{host}:{self.port}"


def shown_url(url: str) -> str:
    """The URL for a message: a password (`user:secret@`) and a query replaced by ***,
    control characters dropped (the URL is echoed back to who typed it, and to logs)."""
    text = re.sub(r"[\x00-\x1f\x7f]", "", url)
    text = re.sub(r"(//[^/@:]*):[^@/]*@", r"\1:***@", text)
    return re.sub(r"\?.*$", "?***", text)


def schemes() -> list[str]:
    """The URL schemes of capture: every server kind that captures."""
    from kvtune import kind_registry as kinds

    return [k.name for k in kinds.every() if k.capture is not None]


def capturer(kind: str) -> Any:
    """The capture of a server kind (kinds/<kind>/capture.py, its CAPTURER)."""
    from kvtune import kind_registry as kinds

    where = kinds.get(kind).capture
    assert where is not None
    return kinds.load(where)


def parse_url(url: str, allow_remote: bool = False) -> Target:
    """KIND://HOST:PORT (a server kind that captures: memcached://, redis://, ...); a
    non-loopback host only when the user says so (--remote). Raises UserError (exit 2),
    never echoing a password."""
    shown = shown_url(url)
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise UserError(f"capture URL {shown!r}: {e}") from None
    known = schemes()
    if u.scheme not in known:
        raise UserError(f"capture URL {shown!r}: the scheme must be "
                        + " or ".join(f"{k}://" for k in known))
    if not u.hostname or port is None:
        from kvtune import kind_registry as kinds

        example = kinds.get(u.scheme).default_port
        raise UserError(f"capture URL {shown!r}: give the host and the port, e.g. "
                        f"{u.scheme}://127.0.0.1:{example}")
    if u.path not in ("", "/") or u.query or u.fragment or u.username or u.password:
        raise UserError(f"capture URL {shown!r}: only SCHEME://HOST:PORT is taken (no path, "
                        "user, password or query)")
    host = u.hostname
    try:
        loop = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = host == "localhost"
    if not loop and not allow_remote:
        raise UserError(f"capture URL {shown!r}: {host} is not a loopback address; name a "
                        "remote server explicitly with --remote")
    return Target(u.scheme, host, port)


def key_hasher() -> Callable[[bytes], int]:
    """A 64-bit keyed hash with a salt that lives only in this process."""
    salt = secrets.token_bytes(16)

    def h(key: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(key, digest_size=8, key=salt).digest(), "little")
    return h


@dataclass
class Bounds:
    duration: float
    max_events: int
    max_bytes: int


@dataclass
class Capture:
    builder: ModelBuilder
    window: float
    notes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    rate: float | None = None
    keyspace: int | None = None  # the items the server holds: keys a window may not touch


class Conn:
    """A socket with line reading; every failure is a HarnessError naming the server."""

    def __init__(self, t: Target, timeout: float = 3.0) -> None:
        self.t = t
        try:
            self.s = socket.create_connection((t.host, t.port), timeout=timeout)
        except OSError as e:
            raise HarnessError(f"cannot connect to {t}: {e.strerror or e}") from None
        self.buf = b""
        self.read = 0

    def send(self, data: bytes) -> None:
        try:
            self.s.sendall(data)
        except OSError as e:
            raise HarnessError(f"{self.t}: {e.strerror or e}") from None

    def fill(self) -> bool:
        try:
            chunk = self.s.recv(1 << 16)
        except TimeoutError:
            return True
        except OSError as e:
            raise HarnessError(f"{self.t}: {e.strerror or e}") from None
        if not chunk:
            raise HarnessError(f"{self.t} closed the connection")
        self.read += len(chunk)
        self.buf += chunk
        return True

    def line(self, limit: int = 1 << 20) -> bytes:
        while b"\n" not in self.buf:
            if len(self.buf) > limit:
                raise HarnessError(f"{self.t}: a line longer than {limit} bytes")
            self.fill()
        line, _, self.buf = self.buf.partition(b"\n")
        return line.rstrip(b"\r")

    def lines(self, deadline: float) -> Iterator[bytes]:
        """Complete lines until `deadline` (monotonic), a received chunk at a time."""
        while True:
            if b"\n" in self.buf:
                parts = self.buf.split(b"\n")
                self.buf = parts.pop()
                for line in parts:
                    yield line[:-1] if line.endswith(b"\r") else line
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self.s.settimeout(min(left, 0.2))
            self.fill()

    def close(self) -> None:
        self.s.close()


def read_window(conn: Conn, feed: Callable[[bytes], Any], lines: Callable[[], int],
                bounds: Bounds) -> tuple[str, float]:
    """Feed `conn`'s lines to `feed` until the window ends, `lines()` reaches
    bounds.max_events or bounds.max_bytes are read: (why it stopped, its monotonic start)."""
    t0 = time.monotonic()
    for line in conn.lines(t0 + bounds.duration):
        feed(line)
        if lines() >= bounds.max_events:
            return f"{bounds.max_events} events", t0
        if conn.read >= bounds.max_bytes:
            return f"{bounds.max_bytes} bytes", t0
    return "time", t0


def _cost(cpu_before: float, req_before: float, cpu_during: float,
          req_during: float) -> dict[str, Any]:
    """The server's CPU time per request before and during the capture."""
    out: dict[str, Any] = {"method": "server CPU seconds per request, 1 s before vs during"}
    if req_before > 0 and req_during > 0:
        before, during = cpu_before / req_before, cpu_during / req_during
        out |= {"cpu_us_per_request_before": round(before * 1e6, 3),
                "cpu_us_per_request_during": round(during * 1e6, 3)}
        if before > 0:
            out["increase_pct"] = round(100 * (during / before - 1), 1)
    else:
        out["unmeasured"] = "the server served no request before or during the capture"
    return out


def check_output(path: str) -> str:
    """The model's file: a new or regular file in an existing directory, not a link and not
    one of the run's inputs however it is spelled (kvtune.safety.files, by device and
    inode). Checked before anything connects or is read; written once, at the end,
    atomically."""
    from kvtune.safety.files import is_input

    if not path or "\x00" in path:
        raise UserError("-o: not a file name")
    p = os.path.abspath(path)
    parent = os.path.dirname(p)
    if not os.path.isdir(parent):
        raise UserError(f"-o {path}: the directory {parent} does not exist")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise UserError(f"-o {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"-o {path} is a symbolic link; name the file itself")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"-o {path} exists and is not a regular file")
    source = is_input(st)
    if source is not None:
        raise UserError(f"-o {path} is {source}, an input of this run: kvtune never "
                        "overwrites what it reads (name another file)")
    return p


def _same_file(a: str, b: str) -> bool:
    """Whether two output names are one file: the same device and inode when both exist,
    else the same resolved directory and name."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except OSError:
        pass
    return (os.path.realpath(os.path.dirname(a)), os.path.basename(a)) == \
        (os.path.realpath(os.path.dirname(b)), os.path.basename(b))


def check_trace_output(keep_trace: str | None, model_path: str) -> str | None:
    """--keep-trace's file: as the model's, and not the model itself."""
    if keep_trace is None:
        return None
    try:
        p = check_output(keep_trace)
    except UserError as e:
        raise UserError(str(e).replace("-o ", "--keep-trace ", 1)) from None
    if _same_file(p, model_path):
        raise UserError("--keep-trace names the model's own file (-o)")
    return p


def write_model(path: str, doc: dict[str, Any]) -> None:
    """The model, written atomically without following a link (kvtune.safety.files)."""
    import json

    from kvtune.safety.files import write_file

    write_file(path, json.dumps(doc, indent=1) + "\n", what="-o")


def capture(url: str, duration: float | None, out: str, *, max_events: int,
            max_bytes: int, sample: bool, allow_remote: bool, mget_gap: float = MGET_GAP,
            keep_trace: str | None = None,
            say: Callable[[str], None]) -> tuple[dict[str, Any], Capture]:
    t = parse_url(url, allow_remote)
    path = check_output(out)
    trace_path = check_trace_output(keep_trace, path)
    if trace_path and sample:
        raise UserError("--keep-trace needs the requests themselves: not with --sample")
    how = capturer(t.kind)
    if sample and not getattr(how, "sample_ok", False):
        with_sample = [k for k in schemes() if getattr(capturer(k), "sample_ok", False)]
        raise UserError(f"--sample is for {', '.join(with_sample)} (the {t.kind} "
                        f"capture's {how.method} costs little)")
    if duration is None:
        duration = how.default_s
    top = 3600.0 if sample else how.max_s
    if not 0.1 <= duration <= top:
        raise UserError(f"--duration {duration:g}: between 0.1 and {top:g} seconds"
                        + (how.max_note if top == how.max_s else ""))
    if not 0 <= mget_gap <= 0.01:
        raise UserError(f"--mget-gap {mget_gap * 1e6:g} µs: between 0 and 10000")
    if max_events < 1 or max_bytes < 1024:
        raise UserError("--max-events must be at least 1 and --max-bytes at least 1024")
    bounds = Bounds(duration, max_events, max_bytes)
    from kvtune.workload.trace import TraceWriter

    writer = TraceWriter(trace_path) if trace_path else None
    try:
        cap = how.run(t, bounds, say, sample=sample, mget_gap=mget_gap, writer=writer)
        if cap.builder.requests == 0:
            raise HarnessError(f"{t} served no request kvload can replay during the "
                               f"{cap.window:.1f} s capture; nothing written")
    except BaseException:
        if writer:
            writer.abandon()
        raise
    if writer:
        cap.facts["trace"] = writer.close()
    about = {"captured": {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                          "method": "sample" if sample else how.method,
                          **cap.facts}, "notes": cap.notes}
    doc = cap.builder.build(duration=cap.window, rate=cap.rate, about=about)
    if doc["arrival"] != "poisson":
        # A server stamps a request when it serves it: its threads' turns on the CPU and its
        # event-loop batches bunch the stamps whatever the arrivals. The dispersion stays
        # in about.arrival; the model assumes independent clients.
        doc["about"]["arrival"]["chosen"] = "poisson"
        doc["about"]["notes"].append(
            f"the server's timestamps suggest '{doc['arrival']}' arrivals, but they are "
            "service times; the model uses Poisson arrivals")
        doc["arrival"] = "poisson"
    if cap.keyspace and cap.keyspace > doc["keys"]:
        # The server holds keys the window did not request: the replay preloads them too
        # (a table gains a bucket of them with no requests; a Zipf spreads over them all).
        doc["about"]["keyspace"] = {"keys_seen_estimate": doc["keys"],
                                    "server_items": cap.keyspace}
        if doc["popularity"].startswith("table:"):
            held = sum(int(b.split(":")[0]) for b in doc["popularity"][6:].split(","))
            if cap.keyspace > held:
                doc["popularity"] += f",{cap.keyspace - held}:0"
                from kvtune.workload.model import extend_key_buckets

                extend_key_buckets(doc, cap.keyspace - held)
        doc["keys"] = cap.keyspace
    doc["protocol"] = how.protocol
    write_model(path, doc)
    return doc, cap
