"""Redis's rules (and those of a kind that reads the same directives, by its family)."""

from __future__ import annotations

from kvtune.knobs.rule import Rule
from kvtune.knobs.rule import as_int as _int


def rules(family: str = "redis") -> list[Rule]:
    """The rules of the knobs `<family>.*` (Redis's directives)."""
    return [
    Rule(f"{family}-backlog-somaxconn", (f"{family}.tcp_backlog", "net.core.somaxconn"),
         lambda v: _int(v.get(f"{family}.tcp_backlog")) > _int(v.get("net.core.somaxconn")),
         f"{family}.tcp_backlog above net.core.somaxconn is silently capped (raise somaxconn "
         "with it)", subject=(f"{family}.tcp_backlog",),
         repairs=(lambda v: {"net.core.somaxconn": _int(v.get(f"{family}.tcp_backlog"))},
                  lambda v: {f"{family}.tcp_backlog": _int(v.get("net.core.somaxconn"))})),
    Rule(f"{family}-io-threads-cpus", (f"{family}.io_threads", "placement.server_cpus",
                                   "placement.cpuset"),
         lambda v: _int(v.get(f"{family}.io_threads")) > v.server_cpus(),
         f"{family}.io_threads exceeds the server's CPUs"),
    ]
