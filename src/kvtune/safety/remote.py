"""The load host a study names (`load.host: ssh://user@host[:port]`) and the address its
server listens on (`target.host`).

The network rule: a study sends traffic only to loopback or to the hosts it names. Without
`load.host` the server listens on loopback and the load comes from this host. With it, kvload
runs on the load host over ssh, and the server listens on `target.host`, an address of this
host that the load host reaches; the study names both, so no other address is ever used.

Every part of the URL lands in ssh's argv, so each is checked to be what it claims: a user
name (never an option such as `-oProxyCommand=...`), an IP literal or a DNS name, a port.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from kvtune.quantities import is_count

_URL = re.compile(r"ssh://(?P<user>[^@/?#\s]*)@(?P<host>\[[^\]/]*\]|[^:/?#@\s\[\]]*)"
                  r"(?::(?P<port>[^/?#\s]*))?")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_REMOTE_PATH = re.compile(r"/[A-Za-z0-9._+/-]{1,255}")
FORM = "ssh://user@host[:port] (host: an IP address or a DNS name)"


@dataclass(frozen=True)
class LoadHost:
    """A parsed `load.host`."""

    user: str
    host: str  # an IP literal (IPv6 without brackets) or a DNS name
    port: int = 22

    @property
    def destination(self) -> str:
        """ssh's `user@host` word (the port goes to `-p`)."""
        return f"{self.user}@{self.host}"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ssh://{self.user}@{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_load_host(text: str) -> LoadHost:
    """`load.host` as a LoadHost; ValueError (for people) when it is not one."""
    if not isinstance(text, str) or len(text) > 300:
        raise ValueError(f"give the load host as {FORM}")
    m = _URL.fullmatch(text)
    if m is None:
        raise ValueError(f"{_masked(text)!r} is not {FORM}; nothing else (a path, a query, "
                         "a password) may follow")
    user, host, port = m.group("user"), m.group("host"), m.group("port")
    if ":" in user:
        raise ValueError("a password does not belong in load.host: kvtune logs in with a key "
                         f"(ssh BatchMode), give {FORM}")
    if not _USER.fullmatch(user):
        raise ValueError(f"{user!r} is not a user name (letters, digits, _ . -; not starting "
                         "with - or a digit)")
    if port is not None and ":" in port and not host.startswith("["):
        raise ValueError("write an IPv6 address in brackets: ssh://user@[fd00::2]:22")
    return LoadHost(user, _host(host), _port(port))


def _masked(text: str) -> str:
    """The text with anything like a password (`user:secret@`) replaced by ***."""
    return re.sub(r"(//[^/@:]*):[^@]*@", r"\1:***@", text)


def _host(text: str) -> str:
    bracketed = text.startswith("[")
    literal = text[1:-1] if bracketed else text
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        if bracketed:
            raise ValueError(f"{text!r} is not an IPv6 address") from None
        return _dns_name(text)
    if isinstance(ip, ipaddress.IPv6Address) and not bracketed:
        raise ValueError(f"write the IPv6 address in brackets: ssh://user@[{ip}]:22")
    _check_unicast(ip, "the load host")
    return str(ip)


def _dns_name(text: str) -> str:
    name = text[:-1] if text.endswith(".") else text
    labels = name.split(".")
    if not name or len(name) > 253 or not all(_LABEL.fullmatch(x) for x in labels):
        raise ValueError(f"{text!r} is neither an IP address nor a DNS name")
    if is_count(labels[-1]):
        raise ValueError(f"{text!r} is not an IP address (and a DNS name does not end in a "
                         "number)")
    return name


def _port(text: str | None) -> int:
    if text is None:
        return 22
    if not is_count(text) or len(text) > 5 or not 1 <= int(text) <= 65535:
        raise ValueError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def _check_unicast(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, what: str) -> None:
    if ip.is_unspecified:
        raise ValueError(f"{ip} is the any-address, not {what}'s address")
    if ip.is_multicast or ip == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError(f"{ip} is a multicast or broadcast address, not {what}'s address")


def check_server_address(host: str) -> str:
    """`target.host`: `localhost` or an IP literal of one host (not the any-address: kvtune
    never makes the server listen on every interface)."""
    if host == "localhost":
        return host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IP address; the server listens on loopback "
                         "(127.0.0.0/8 or ::1), or with load.host on an address of this host "
                         "that the load host reaches") from None
    if ip.is_unspecified:
        raise ValueError(f"{host} would make the server listen on every interface; give "
                         "one address: loopback, or with load.host the address the load "
                         "host reaches")
    _check_unicast(ip, "this host")
    return host


def server_address_problem(host: str, load_host: LoadHost | None) -> str | None:
    """The network rule between `target.host` and `load.host`, or None when it holds."""
    loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    if load_host is None and not loopback:
        return (f"{host} is not a loopback address; kvtune sends load only to 127.0.0.0/8 or "
                "::1, unless load.host names a load host (then the server listens on "
                "target.host, an address of this host that the load host reaches)")
    if load_host is not None and loopback and not load_host.is_loopback:
        return (f"{host} is loopback, which the load host {load_host.host} cannot reach; set "
                "target.host to the address of this host that the load host reaches (the "
                "server listens there)")
    return None


def check_remote_path(path: str) -> str:
    """`load.remote_binary`: an absolute path on the load host, of plain characters."""
    if not _REMOTE_PATH.fullmatch(path) or "/../" in f"{path}/" or "//" in path:
        raise ValueError(f"{path!r} is not an absolute path of letters, digits and . _ + - /"
                         " (without ..)")
    return path
