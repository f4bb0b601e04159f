"""The load generator on its own host: `load.host: ssh://user@host[:port]` (docs/fleet.md).

`SshTransport` runs the load tool on the load host through the OpenSSH client:

    ssh [-F $KVTUNE_SSH_CONFIG] -o BatchMode=yes -o ConnectTimeout=10
        -o ServerAliveInterval=2 -o ServerAliveCountMax=3 -T -p PORT user@host -- COMMAND

Key authentication only (BatchMode never prompts). COMMAND is one `shlex.join` of an argv,
so the remote login shell splits it back into exactly those words; no local shell runs. The
remote side runs a fixed `sh -c` script (below) with the binary, its expected version and
the tool's argv as positional arguments, never text built from the study file.

At preflight (`prepare`, nothing applied yet) one ssh call reads the load host's facts (name,
kernel, architecture, online CPUs, CPU model) and the version of each candidate binary:
`load.remote_binary` when the study gives one (it must be this kvtune's kvload version), else
`kvload` on the remote PATH when it is that version, else kvtune's own copy at a per-version
path (`$KVTUNE_REMOTE_CACHE`, default `.cache/kvtune` under the login directory:
`kvload-<version>-<sha256 prefix>/kvload`), copied there over the same channel (`cat`) when
absent and the architectures match. Each repetition runs the binary under `taskset -c
load.cpus`, after checking again that it is there and of that version; kvload's JSON comes
back on stdout.

Faults end the repetition as failed with a reason, within a bounded time: ssh refused or
unreachable (ConnectTimeout), the network lost mid-run (ServerAliveInterval x
ServerAliveCountMax), kvload missing or of another version on the load host, the run not
done within its window plus a margin.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shlex
import time
from pathlib import Path
from typing import Any

from kvtune.cpulist import parse_cpus
from kvtune.errors import HarnessError, TrialFailed, UserError
from kvtune.load.transport import Ran, Transport
from kvtune.safety import programs
from kvtune.safety.remote import LoadHost

CONNECT_TIMEOUT = 10  # s: TCP connect, banner and key exchange
ALIVE_INTERVAL = 2  # s between keep-alives; the link is declared lost after ALIVE_COUNT misses
ALIVE_COUNT = 3
PREPARE_TIMEOUT = 60.0  # s for one preflight call (the copy of the binary included)
DEFAULT_CACHE = ".cache/kvtune"  # relative: under the load host's login directory

# Preflight probe. $1: the configured binary or "", then candidate binaries. One
# `key<TAB>value` line per fact, one `bin<TAB>path<TAB>version` line per runnable candidate.
_PROBE = r"""
conf=$1; shift
printf 'hostname\t%s\n' "$(uname -n)"
printf 'kernel\t%s\n' "$(uname -r)"
printf 'arch\t%s\n' "$(uname -m)"
printf 'online\t%s\n' "$(cat /sys/devices/system/cpu/online 2>/dev/null)"
printf 'allowed\t%s\n' "$(nproc 2>/dev/null)"
printf 'cpu_model\t%s\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
printf 'taskset\t%s\n' "$(command -v taskset)"
for b in "$conf" "$(command -v kvload)" "$@"; do
  [ -n "$b" ] || continue
  v=$("$b" --version 2>/dev/null) && printf 'bin\t%s\t%s\n' "$b" "$v"
done
exit 0
"""

# One repetition. $1: the binary, $2: its expected `--version` line, then the argv to exec.
_RUN = r"""
b=$1 want=$2; shift 2
v=$("$b" --version 2>/dev/null) || { echo "kvtune: $b is missing on the load host" >&2; exit 97; }
[ "$v" = "$want" ] || { echo "kvtune: $b is '$v' on the load host, not '$want'" >&2; exit 98; }
exec "$@"
"""

# A copy of a local file (kvtune's binary, a workload file): $1 the directory, $2 the file
# name, stdin the bytes. Written aside and renamed, so a reader never sees half a file.
_COPY = r"""
set -e
mkdir -p "$1"
cat > "$1/.$2.$$"
chmod 755 "$1/.$2.$$"
mv -f "$1/.$2.$$" "$1/$2"
"""

_SSH_HINTS = (
    ("Connection refused", "nothing listens on that port: is sshd running there?"),
    ("Permission denied", "key authentication failed (BatchMode never asks for a password): "
                          "add this host's key to the load host's authorized_keys"),
    ("Host key verification failed", "the load host's key is not in known_hosts (ssh to it "
                                     "once by hand to check and add it)"),
    ("not responding", "the network to the load host was lost"),
    ("Broken pipe", "the network to the load host was lost"),
    ("Connection reset", "the connection to the load host was reset"),
    ("timed out", "the load host did not answer in time"),
    ("No route to host", "the load host is unreachable"),
    ("Could not resolve", "the load host's name does not resolve"),
)


def ssh_argv(host: LoadHost, argv: list[str]) -> list[str]:
    """The ssh command line that runs `argv` on `host` (its words joined for the remote
    login shell with shlex.join)."""
    config = ssh_config()
    return ["ssh", *(["-F", config] if config else []),
            "-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT}",
            "-o", f"ServerAliveInterval={ALIVE_INTERVAL}",
            "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
            "-T", "-p", str(host.port), host.destination, "--", shlex.join(argv)]


def ssh_config() -> str | None:
    """$KVTUNE_SSH_CONFIG when set, judged like a program kvtune runs (its ProxyCommand,
    LocalCommand and `Match exec` lines run as the user kvtune runs as): a regular file and
    its directory owned by root (or that user), writable by nobody else (a sticky
    directory excepted). programs.Untrusted (exit 2) otherwise; ssh itself checks a -F
    file's owner and mode not at all."""
    import stat

    config = os.environ.get("KVTUNE_SSH_CONFIG")
    if not config:
        return None
    what = "KVTUNE_SSH_CONFIG"
    try:
        st, dst = os.stat(config), os.stat(os.path.dirname(os.path.abspath(config)))
    except OSError as e:
        raise programs.Untrusted(f"{what}: {config}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise programs.Untrusted(f"{what}: {config} is not a regular file")
    for kind, s_ in (("file", st), ("directory", dst)):
        sticky = kind == "directory" and s_.st_mode & stat.S_ISVTX
        if s_.st_uid not in programs.trusted_uids() or (
                s_.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky):
            raise programs.Untrusted(f"{what}: the {kind} of {config} is owned by uid "
                                     f"{s_.st_uid} or writable by others: another user "
                                     "could make ssh run a command (ProxyCommand)")
    return config


def ssh_reason(stderr: str) -> str:
    """ssh's own complaint (its last line) with what it means, for people."""
    lines = [x.strip() for x in stderr.strip().splitlines() if x.strip()]
    last = lines[-1] if lines else "ssh failed without a message"
    for needle, hint in _SSH_HINTS:
        if needle.lower() in last.lower():
            return f"{last} ({hint})"
    return last


class SshTransport(Transport):
    """The load tool on a load host, over the OpenSSH client."""

    def __init__(self, host: LoadHost, configured: str | None = None) -> None:
        self.host = host
        self.where = host.url
        self.configured = configured
        self.binary: str | None = None  # the path on the load host
        self.version = ""  # its expected `--version` line
        self.source = ""  # "configured", "path" or "copied"
        self.facts: dict[str, Any] = {}
        self.cpus: str | None = None

    # -- ssh ---------------------------------------------------------------------------------

    def _ssh(self, argv: list[str], timeout: float, stdin: Any = None) -> Ran:
        if programs.which("ssh") is None:
            raise HarnessError("load.host: the OpenSSH client (ssh) is not installed here "
                               "(apt-get install openssh-client)")
        try:  # ssh, checked before every call (kvtune.safety.programs)
            out = programs.run(ssh_argv(self.host, argv), "load.host: ssh",
                               capture_output=True, text=True, timeout=timeout,
                               stdin=stdin if stdin is not None else programs.DEVNULL)
        except programs.TimeoutExpired:
            raise TrialFailed(f"load host {self.where}: no answer within {timeout:g}s "
                              "(ssh killed)") from None
        return Ran(out.returncode, out.stdout, out.stderr, time.monotonic_ns())

    def _prepare_call(self, argv: list[str], what: str, stdin: Any = None) -> Ran:
        try:
            ran = self._ssh(argv, PREPARE_TIMEOUT, stdin)
        except TrialFailed as e:
            raise HarnessError(f"{what}: {e.reason}") from None
        if ran.returncode == 255:
            raise HarnessError(f"{what}: ssh to {self.where} failed: {ssh_reason(ran.stderr)}")
        if ran.returncode != 0:
            raise HarnessError(f"{what} on {self.where} failed (exit {ran.returncode}): "
                               f"{ssh_reason(ran.stderr)}")
        return ran

    # -- preflight ---------------------------------------------------------------------------

    def prepare(self, tool: str, binary: str, cpus: str | None) -> str:
        version = _local_version(binary)
        cached = f"{_cache_dir()}/{tool}-{version.split()[-1]}-{_digest(binary)}"
        probe = self._prepare_call(["sh", "-c", _PROBE, "kvtune-probe", self.configured or "",
                                    f"{cached}/{tool}"], "load.host: reading the load host")
        facts: dict[str, Any] = {}
        found: dict[str, str] = {}
        for line in probe.stdout.splitlines():
            key, _, value = line.partition("\t")
            if key == "bin":
                path, _, v = value.partition("\t")
                found.setdefault(path, v.strip())
            elif key:
                facts[key] = value.strip()
        self.facts = facts
        self._check_cpus(cpus, facts)
        self.cpus = cpus
        if self.configured:
            got = found.get(self.configured)
            if got is None:
                raise HarnessError(f"load.remote_binary: {self.configured} is missing or not "
                                   f"runnable on the load host {self.where}")
            if got != version:
                raise HarnessError(f"load.remote_binary: {self.configured} on {self.where} "
                                   f"is {got!r}; this kvtune runs {version!r} (install that "
                                   "version there, or drop load.remote_binary and kvtune "
                                   "copies its own)")
            return self._use(self.configured, version, "configured")
        for path, v in found.items():
            if v == version and path != f"{cached}/{tool}":
                return self._use(path, version, "path")
        if found.get(f"{cached}/{tool}") == version:
            return self._use(f"{cached}/{tool}", version, "copied")
        arch = platform.machine()
        if facts.get("arch") != arch:
            raise HarnessError(f"load.host: {tool} {version!r} is not on the load host "
                               f"{self.where} and this host's binary ({arch}) cannot run there "
                               f"({facts.get('arch') or 'unknown architecture'}): install "
                               "it there and name it with load.remote_binary")
        with open(binary, "rb") as f:
            self._prepare_call(["sh", "-c", _COPY, "kvtune-copy", cached, tool],
                               f"load.host: copying {tool} to {cached}", stdin=f)
        return self._use(f"{cached}/{tool}", version, "copied")

    def _use(self, path: str, version: str, source: str) -> str:
        self.binary, self.version, self.source = path, version, source
        return path

    def _check_cpus(self, cpus: str | None, facts: dict[str, Any]) -> None:
        if not cpus:
            return
        if not facts.get("taskset"):
            raise HarnessError(f"load.cpus: taskset is not installed on the load host "
                               f"{self.where} (Debian: util-linux)")
        try:
            online = set(parse_cpus(str(facts.get("online") or "")))
        except ValueError:
            return  # no online list to check against (taskset will say)
        missing = sorted(set(parse_cpus(cpus)) - online)
        if missing:
            raise UserError(f"load.cpus: CPU list {cpus!r} names CPUs the load host "
                            f"{self.where} lacks (its online CPUs: {facts.get('online')})")

    def stage(self, path: str) -> str:
        directory = f"{_cache_dir()}/workload-{_digest(path)}"
        name = "workload" + "".join(Path(path).suffixes[-1:])  # kvload reads .json or .toml
        with open(path, "rb") as f:
            self._prepare_call(["sh", "-c", _COPY, "kvtune-copy", directory, name],
                               f"load.workload_file: copying {path} to the load host", stdin=f)
        return f"{directory}/{name}"

    # -- one repetition ----------------------------------------------------------------------

    def run(self, argv: list[str], timeout: float, cpus: str | None) -> Ran:
        if self.binary is None:
            raise HarnessError("SshTransport.run before prepare")
        pinned = ["taskset", "-c", cpus] if cpus else []
        ran = self._ssh(["sh", "-c", _RUN, "kvtune-load", self.binary, self.version,
                         *pinned, self.binary, *argv[1:]], timeout)
        if ran.returncode == 255:
            raise TrialFailed(f"load host {self.where}: ssh failed: {ssh_reason(ran.stderr)}",
                              ran.stderr[-4000:])
        if ran.returncode in (97, 98, 126, 127):
            raise TrialFailed(f"load host {self.where}: {ssh_reason(ran.stderr)}",
                              ran.stderr[-4000:])
        return ran

    def finish(self, doc: dict[str, Any], ran: Ran) -> None:
        doc["remote"] = {"host": self.where, "facts": self.facts,
                         "binary": {"path": self.binary, "version": self.version,
                                    "source": self.source},
                         "placement": {"taskset": self.cpus, "kvload": doc.get("placement")}}
        to_local_clock(doc, ran.end_ns)


def to_local_clock(doc: dict[str, Any], end_ns: int) -> None:
    """Translate kvload's `timeline` (the load host's CLOCK_MONOTONIC) to this host's, so
    that samples taken here line up with the window: the window ended when the run came
    back, less the drain, the JSON output and one network trip (the translated window is
    late by that much). The load host's own timeline is kept as `remote_timeline`."""
    tl = doc.get("timeline")
    if not isinstance(tl, dict) or not isinstance(tl.get("window_end_ns"), int):
        return
    offset = end_ns - tl["window_end_ns"]
    doc["remote_timeline"] = dict(tl)
    for key in ("start_ns", "window_start_ns", "window_end_ns"):
        if isinstance(tl.get(key), int):
            tl[key] += offset
    tl["clock"] = "monotonic (this host's; translated from the load host's at the run's end)"
    doc["remote"]["clock_offset_ns"] = offset


def _cache_dir() -> str:
    from kvtune.safety.remote import check_remote_path

    d = os.environ.get("KVTUNE_REMOTE_CACHE", DEFAULT_CACHE).rstrip("/")
    if d != DEFAULT_CACHE:
        check_remote_path(d)
    return d


def _local_version(binary: str) -> str:
    try:
        out = programs.run([binary, "--version"], "kvload", capture_output=True, text=True,
                           timeout=10)
    except (OSError, programs.TimeoutExpired) as e:
        raise HarnessError(f"cannot run {binary} --version: {e}") from None
    line = out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""
    if out.returncode != 0 or not line:
        raise HarnessError(f"{binary} --version gave no version (exit {out.returncode})")
    return line


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]
