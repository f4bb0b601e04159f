"""A "load host" on this machine, for the remote-load tests (issue 15 item 5):

- a network namespace `kvt-load-<tag>` with its own loopback;
- a veth pair joining it to the root namespace, on a /30 of 10.200.0.0/16 that overlaps no
  address or route of this host: the root side is the server's address (`server_ip`), the
  namespace side the load host's (`load_ip`); the namespace has no other route, so nothing it
  sends can leave the /30;
- Debian's sshd (`/usr/sbin/sshd -D -f <generated config>`) inside it, listening on the load
  host's address only, with a host key and a client key generated for the test (the client's
  public key is the only authorized key; the host key is pinned in a known_hosts file);
- an ssh_config for the client (`KVTUNE_SSH_CONFIG`) that uses those keys only.

`load_host()` is a context manager; leaving it (also on failure) stops sshd and everything
else in the namespace, deletes the namespace (its veth end takes the root end with it) and
removes the temporary directory. Only the addresses created here are ever used.

    with load_host() as lh:
        lh.url            # ssh://root@10.200.0.2:2222
        lh.ssh(["nproc"]) # run argv there (the same client options kvtune uses)
        lh.link(False)    # drop the link (the namespace's end of the veth goes down)
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"  # by absolute path: sshd re-executes itself


def missing() -> str | None:
    """Why this machine cannot host the fixture, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "ssh", "ssh-keygen", SSHD):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.sh installs it)"
    return None


def sh(*argv: str, ns: str | None = None, check: bool = True,
       timeout: float = 20) -> subprocess.CompletedProcess[str]:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    return subprocess.run(full, check=check, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def free_30(base: str = "10.200.0.0/16") -> ipaddress.IPv4Network:
    """The first /30 of `base` that overlaps no address or route of this host."""
    used = []
    for link in json.loads(sh("ip", "-j", "-4", "addr").stdout):
        for a in link.get("addr_info", []):
            used.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for r in json.loads(sh("ip", "-j", "-4", "route", "show", "table", "all").stdout):
        dst = r.get("dst", "")
        with contextlib.suppress(ValueError):
            if dst and dst != "default":
                used.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32",
                                                 strict=False))
    for net in ipaddress.ip_network(base).subnets(new_prefix=30):
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError(f"no free /30 in {base}")


@dataclass
class LoadHost:
    ns: str
    veth_root: str
    veth_ns: str
    server_ip: str  # this host's end of the veth: the server listens here
    load_ip: str  # the load host's address (sshd listens here)
    port: int
    tmp: Path
    sshd: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)  # for kvtune: KVTUNE_SSH_CONFIG ...

    @property
    def url(self) -> str:
        return f"ssh://root@{self.load_ip}:{self.port}"

    @property
    def ssh_config(self) -> Path:
        return self.tmp / "ssh_config"

    def ssh(self, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run argv on the load host (for the test's own set-up and checks)."""
        return subprocess.run(
            ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", "-p", str(self.port),
             f"root@{self.load_ip}", "--", shlex.join(argv)],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
            check=False)

    def link(self, up: bool) -> None:
        """Bring the load host's end of the veth up or down (down: the network is lost)."""
        sh("ip", "link", "set", self.veth_ns, "up" if up else "down", ns=self.ns)
        if up:  # forget the neighbour marked unreachable while down, and wait for sshd
            sh("ip", "neigh", "flush", "dev", self.veth_root, check=False)
            _wait_banner(self.load_ip, self.port, 10)

    def start_sshd(self) -> None:
        log = open(self.tmp / "sshd.log", "ab")  # noqa: SIM115 - Popen's; closed right after
        self.sshd = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, SSHD, "-D", "-e", "-f", str(self.tmp / "sshd_config")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        log.close()
        _wait_banner(self.load_ip, self.port, 10)

    def stop_sshd(self) -> None:
        """Stop sshd (its sessions' processes too): a new ssh is then refused."""
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.send_signal(signal.SIGTERM)
            try:
                self.sshd.wait(5)
            except subprocess.TimeoutExpired:
                self.sshd.kill()
                self.sshd.wait(5)
        self.sshd = None
        for pid in sh("ip", "netns", "pids", self.ns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _wait_banner(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), \
                socket.create_connection((host, port), timeout=1) as s:
            if s.recv(64).startswith(b"SSH-2.0-"):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"sshd on {host}:{port} did not come up")
        time.sleep(0.02)


_SSHD_CONFIG = """\
Port {port}
ListenAddress {ip}
HostKey {tmp}/host_ed25519
PidFile none
AuthorizedKeysFile {tmp}/authorized_keys
# StrictModes checks every directory up to / and refuses one under /tmp (mode 1777)
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
PrintMotd no
PrintLastLog no
LogLevel VERBOSE
"""

_SSH_CONFIG = """\
Host {ip}
  IdentityFile {tmp}/id_ed25519
  IdentitiesOnly yes
  StrictHostKeyChecking yes
  UserKnownHostsFile {tmp}/known_hosts
  GlobalKnownHostsFile /dev/null
"""


@contextlib.contextmanager
def load_host(port: int = 2222) -> Iterator[LoadHost]:
    tag = f"{os.getpid() % 100000}"
    net = free_30()
    server_ip, load_ip = (str(h) for h in net.hosts())
    tmp = Path(tempfile.mkdtemp(prefix="kvtune-lh-"))
    lh = LoadHost(f"kvt-load-{tag}", f"kvt{tag}r", f"kvt{tag}n", server_ip, load_ip, port,
                  tmp)  # interface names: at most 15 characters
    try:
        sh("ip", "netns", "add", lh.ns)
        sh("ip", "link", "add", lh.veth_root, "type", "veth", "peer", "name", lh.veth_ns,
           "netns", lh.ns)
        sh("ip", "addr", "add", f"{server_ip}/30", "dev", lh.veth_root)
        sh("ip", "link", "set", lh.veth_root, "up")
        sh("ip", "link", "set", "lo", "up", ns=lh.ns)
        sh("ip", "addr", "add", f"{load_ip}/30", "dev", lh.veth_ns, ns=lh.ns)
        sh("ip", "link", "set", lh.veth_ns, "up", ns=lh.ns)
        for key in ("host_ed25519", "id_ed25519"):
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"kvtune-test-{key}",
               "-f", str(tmp / key))
        (tmp / "authorized_keys").write_text((tmp / "id_ed25519.pub").read_text())
        host_key = " ".join((tmp / "host_ed25519.pub").read_text().split()[:2])
        (tmp / "known_hosts").write_text(f"[{load_ip}]:{port} {host_key}\n")
        (tmp / "sshd_config").write_text(_SSHD_CONFIG.format(port=port, ip=load_ip, tmp=tmp))
        lh.ssh_config.write_text(_SSH_CONFIG.format(ip=load_ip, tmp=tmp))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        sh(SSHD, "-t", "-f", str(tmp / "sshd_config"))
        lh.start_sshd()
        lh.env = {"KVTUNE_SSH_CONFIG": str(lh.ssh_config),
                  "KVTUNE_REMOTE_CACHE": str(tmp / "remote-cache")}
        yield lh
    finally:
        lh.stop_sshd()
        sh("ip", "netns", "del", lh.ns, check=False)  # its veth end takes the pair with it
        sh("ip", "link", "del", lh.veth_root, check=False)  # already gone: a no-op
        shutil.rmtree(tmp, ignore_errors=True)
