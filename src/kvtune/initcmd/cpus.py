"""Where `kvtune init` puts the server and the load: on the CPUs the server runs on in
production, the load on others.

A study measures the server where it runs: its own CPUs (its affinity, /proc/PID/status
Cpus_allowed_list) on its own NUMA node, with the load generator on CPUs the server does not
use, so that the client never competes with the server (DESIGN.md, measurement rule 1).
Hyperthread siblings stay together: a server CPU's sibling is never a load CPU.

- The server is pinned (its affinity is a part of the host): the study keeps that placement,
  and the load goes to other CPUs of the same node first (as a client close to the NIC
  would), then to other nodes.
- The server runs unpinned on a host with several nodes: the study pins it to the node it
  runs on now (its memory is there) and the load to another node.
- Unpinned on one node: the cores are split, the first half for the server, the rest for
  the load; the comment in the study says that production runs it on every CPU.

Everything here is a pure function of the topology (`Topology`), read once by
`read_topology`, so the choice is tested without a host."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kvtune import roots
from kvtune.cpulist import parse_cpus
from kvtune.quantities import is_count


@dataclass(frozen=True)
class Topology:
    """The host's online CPUs, its NUMA nodes (node -> CPUs) and each CPU's core (the CPUs
    sharing it: hyperthread siblings)."""

    online: tuple[int, ...]
    nodes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    siblings: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def node_of(self, cpu: int) -> int:
        for node, cpus in self.nodes.items():
            if cpu in cpus:
                return node
        return 0

    def core(self, cpu: int) -> tuple[int, ...]:
        return self.siblings.get(cpu, (cpu,))


@dataclass(frozen=True)
class Placement:
    """The study's CPUs: the server's, the load's, and why, in words for the study file's
    comment (one line each)."""

    server: tuple[int, ...]
    load: tuple[int, ...]
    why: tuple[str, ...]


def cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the kernel's form)."""
    out: list[str] = []
    ordered = sorted(cpus)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_topology(sys_root: str = roots.SYS) -> Topology:
    """This host's topology from sysfs (a missing file: one node, no siblings)."""
    cpu_dir = Path(sys_root, "devices", "system", "cpu")
    text = _read(cpu_dir / "online")
    online = tuple(parse_cpus(text.strip())) if text else tuple(range(os.cpu_count() or 1))
    nodes: dict[int, tuple[int, ...]] = {}
    node_dir = Path(sys_root, "devices", "system", "node")
    try:
        names = sorted(os.listdir(node_dir))
    except OSError:
        names = []
    for name in names:
        if name.startswith("node") and is_count(name[4:]):
            text = _read(node_dir / name / "cpulist")
            if text and text.strip():
                nodes[int(name[4:])] = tuple(c for c in parse_cpus(text.strip()) if c in online)
    siblings: dict[int, tuple[int, ...]] = {}
    for cpu in online:
        text = _read(cpu_dir / f"cpu{cpu}" / "topology" / "thread_siblings_list")
        if text and text.strip():
            siblings[cpu] = tuple(c for c in parse_cpus(text.strip()) if c in online)
    return Topology(online, nodes or {0: online}, siblings)


def process_cpus(status_text: str) -> tuple[int, ...] | None:
    """The CPUs a process may run on, from the text of its /proc/PID/status
    (Cpus_allowed_list), or None when the line is missing or malformed."""
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        if key == "Cpus_allowed_list":
            try:
                return tuple(parse_cpus(value.strip()))
            except ValueError:
                return None
    return None


def _cores(top: Topology, cpus: list[int]) -> list[tuple[int, ...]]:
    """`cpus` grouped by core, in CPU order; a core's siblings outside `cpus` left out."""
    seen: set[int] = set()
    out = []
    for c in sorted(cpus):
        if c in seen:
            continue
        core = tuple(x for x in top.core(c) if x in cpus) or (c,)
        seen.update(core)
        out.append(core)
    return out


def _flat(cores: list[tuple[int, ...]]) -> tuple[int, ...]:
    return tuple(sorted(c for core in cores for c in core))


def choose(top: Topology, allowed: tuple[int, ...] | None = None,
           running_on: int | None = None) -> Placement:
    """The server's and the load's CPUs on `top`: `allowed` is the server's affinity (None:
    no running server, or it may run anywhere), `running_on` the CPU it last ran on (its
    node decides where an unpinned server is pinned on a host of several nodes).
    ValueError when the host leaves no CPU for the load."""
    online = list(top.online)
    mine = [c for c in (allowed or online) if c in online] or online
    pinned = set(mine) != set(online)
    if pinned:
        server = tuple(mine)
        taken = {x for c in server for x in top.core(c)}
        nodes = {top.node_of(c) for c in server}
        rest = [c for c in online if c not in taken]
        near = [c for c in rest if top.node_of(c) in nodes]
        far = [c for c in rest if top.node_of(c) not in nodes]
        load = tuple(sorted((near + far)[:max(1, len(server))])) if rest else ()
        why = [f"the server runs pinned to CPUs {cpu_list(server)} (its affinity): the study "
               "keeps that placement",
               "the load runs on other CPUs, "
               + ("on the server's NUMA node" if near else "on another NUMA node")
               + (", never a hyperthread sibling of a server CPU" if any(
                   len(top.core(c)) > 1 for c in server) else "")]
    elif len(top.nodes) > 1:
        node = top.node_of(running_on if running_on is not None else online[0])
        server = tuple(c for c in top.nodes[node] if c in online)
        other = [c for n, cpus in sorted(top.nodes.items()) if n != node for c in cpus]
        load = tuple(sorted(other[:len(server)]))
        why = [f"the server runs unpinned; the study pins it to NUMA node {node} "
               f"(CPUs {cpu_list(server)}), where it runs now and its memory is",
               "the load runs on another node's CPUs: production's clients are not on the "
               "server's CPUs either"]
    else:
        cores = _cores(top, online)
        half = (len(cores) + 1) // 2
        server, load = _flat(cores[:half]), _flat(cores[half:])
        why = [f"the server runs unpinned on all {len(online)} CPUs; the study gives it "
               f"CPUs {cpu_list(server)} and the load the other cores, so that the client "
               "never competes with the server",
               "on the production host the server also has the other CPUs: pin it there "
               "(the export's systemd drop-in) or tune on a host of the same size"]
    if not load:
        raise ValueError(f"no CPU is left for the load beside the server's CPUs "
                         f"({cpu_list(server)}) and their hyperthread siblings, of "
                         f"{len(online)} CPU(s): give the server fewer CPUs, or run the load "
                         "from its own host (load.host)")
    return Placement(server, load, tuple(why))
