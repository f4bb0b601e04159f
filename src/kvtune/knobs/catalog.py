"""The knob catalog: the knobs kvtune knows, their domains, units, defaults, where they live
on which version, the rules between them, and the presets.

Names are `<family>.<name>`: one family per server kind (application knobs, from
`kinds/<kind>/catalog.py`), `kernel.*`,
`sched.*`, `thp.*`, `vm.*` (kernel), `net.*` (network, named as their sysctl), and
`placement.*` (where the server runs). Defaults of application knobs are the server's
built-in defaults; host knobs take the host's value at study start as their baseline.

Tags say what a person should know before tuning a knob: `loopback:no-effect` (does
nothing for traffic on `lo`), `netns:per` / `netns:init` (per network namespace, or only
in the initial one), `idle-only` (acts only on idle connections), `build` (exists only in
some builds of the server).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from kvtune import roots
from kvtune.host.debugfs import debugfs_status, features_status
from kvtune.host.sched import SLICE_MAX_NS, SLICE_MIN_NS
from kvtune.knobs.appliers.base import HostContext
from kvtune.knobs.appliers.cgroup import (
    CpuPeriod,
    CpuQuota,
    CpusetCpus,
    ServerCpus,
    cpu_list_choices,
    host_cpus,
)
from kvtune.knobs.appliers.hostfile import HostFile, Location, Sysctl, sched_tunable
from kvtune.knobs.appliers.sched import SchedFeature, SchedNice, SchedPolicy, SchedSlice
from kvtune.knobs.domain import B, C, Domain, I
from kvtune.knobs.knob import Knob
from kvtune.knobs.rules import Values, broken

EEVDF = (6, 6)
NO_LO = "loopback:no-effect"
PER_NS = "netns:per"
INIT_NS = "netns:init"


def _kernel() -> list[Knob]:
    return [
        Knob("kernel.sched_autogroup_enabled", Domain(B),
             Sysctl("kernel.sched_autogroup_enabled"), None,
             "group tasks by session (skews CPU sharing between server and load generator)"),
        Knob("kernel.numa_balancing", Domain(C, choices=(0, 1)), Sysctl("kernel.numa_balancing"),
             None, "automatic NUMA balancing (2, memory tiering, is left out)"),
        Knob("kernel.timer_migration", Domain(B), Sysctl("kernel.timer_migration"), None,
             "migrate timers to busy CPUs"),
        Knob("kernel.sched_cfs_bandwidth_slice_us", Domain(I, 1000, 50000, log=True),
             Sysctl("kernel.sched_cfs_bandwidth_slice_us"), None,
             "runtime handed from a cgroup quota to a CPU at a time", "us"),
        Knob("sched.migration_cost_ns", Domain(I, 0, 5_000_000, step=50_000),
             sched_tunable("migration_cost_ns", "sched_migration_cost_ns"), None,
             "cache-hot threshold for load balancing (case study 000's knob)", "ns"),
        Knob("sched.nr_migrate", Domain(I, 1, 128, log=True),
             sched_tunable("nr_migrate", "sched_nr_migrate"), None, "tasks moved per balance"),
        Knob("sched.tunable_scaling", Domain(C, choices=(0, 1, 2)),
             sched_tunable("tunable_scaling", "sched_tunable_scaling"), None,
             "scale the slice/latency tunables with the CPU count: 0 none, 1 log, 2 linear"),
        Knob("sched.latency_ns", Domain(I, 1_000_000, 100_000_000, log=True),
             sched_tunable("latency_ns", "sched_latency_ns", until=EEVDF,
                           note="EEVDF (6.6+) has no scheduling period; see sched.base_slice_ns"),
             None, "CFS targeted preemption latency", "ns"),
        Knob("sched.min_granularity_ns", Domain(I, 100_000, 50_000_000, log=True),
             sched_tunable("min_granularity_ns", "sched_min_granularity_ns", until=EEVDF,
                           note="renamed sched.base_slice_ns on EEVDF (6.6+)"),
             None, "CFS minimal preemption granularity", "ns"),
        Knob("sched.wakeup_granularity_ns", Domain(I, 100_000, 100_000_000, log=True),
             sched_tunable("wakeup_granularity_ns", "sched_wakeup_granularity_ns", until=EEVDF,
                           note="EEVDF (6.6+) decides wake-up preemption by deadline; "
                                "see the sched features RUN_TO_PARITY and PREEMPT_SHORT"),
             None, "CFS wake-up preemption granularity (>= latency/2 turns preemption off)",
             "ns"),
        Knob("sched.base_slice_ns", Domain(I, 100_000, 100_000_000, log=True),
             HostFile([Location(f"{roots.DEBUGFS}/sched/base_slice_ns", EEVDF)],
                      note="CFS kernels (< 6.6) use sched.min_granularity_ns instead"),
             None, "EEVDF base time slice (below the tick it has little effect)", "ns"),
        Knob("thp.enabled", Domain(C, choices=("always", "madvise", "never")),
             HostFile([Location(f"{roots.THP}/enabled")], "bracketed"), None,
             "transparent huge pages"),
        Knob("thp.defrag", Domain(C, choices=("always", "defer", "defer+madvise", "madvise",
                                              "never")),
             HostFile([Location(f"{roots.THP}/defrag")], "bracketed"), None,
             "THP defragmentation on fault (always = compaction stalls in the fault path)"),
        Knob("thp.khugepaged_defrag", Domain(B),
             HostFile([Location(f"{roots.THP}/khugepaged/defrag")]), None,
             "khugepaged may compact memory to collapse huge pages"),
    ]


def _vm() -> list[Knob]:
    return [
        Knob("vm.swappiness", Domain(I, 0, 100), Sysctl("vm.swappiness"), None,
             "swap tendency (the kernel takes up to 200 from 5.8; caches want it low)"),
        Knob("vm.zone_reclaim_mode", Domain(C, choices=(0, 1)), Sysctl("vm.zone_reclaim_mode"),
             None, "reclaim on the local NUMA node before allocating remotely"),
        Knob("vm.watermark_scale_factor", Domain(I, 10, 1000, log=True),
             Sysctl("vm.watermark_scale_factor"), None,
             "kswapd headroom against direct reclaim, in 0.01 % of memory"),
        Knob("vm.watermark_boost_factor", Domain(I, 0, 30000, step=500),
             Sysctl("vm.watermark_boost_factor"), None,
             "temporary watermark boost after fragmentation events"),
        Knob("vm.compaction_proactiveness", Domain(I, 0, 100), Sysctl(
            "vm.compaction_proactiveness"), None, "background compaction (latency spikes)"),
        Knob("vm.stat_interval", Domain(I, 1, 10), Sysctl("vm.stat_interval"), None,
             "vmstat timer interval (a jitter source)", "s"),
        Knob("vm.dirty_ratio", Domain(I, 5, 80), Sysctl("vm.dirty_ratio"), None,
             "dirty page cache share that blocks writers (a persistent server's snapshots "
             "only)", "%"),
        Knob("vm.dirty_background_ratio", Domain(I, 1, 50), Sysctl("vm.dirty_background_ratio"),
             None, "dirty share that starts background writeback (below vm.dirty_ratio)", "%"),
    ]


def _net() -> list[Knob]:
    def s(name: str, domain: Domain, what: str, tags: tuple[str, ...], unit: str = "") -> Knob:
        return Knob(name, domain, Sysctl(name), None, what, unit, tags)

    return [
        s("net.core.somaxconn", Domain(I, 128, 65535, log=True),
          "cap on every listen backlog (the server's own backlog setting included)", (PER_NS,)),
        s("net.core.netdev_max_backlog", Domain(I, 100, 100000, log=True),
          "per-CPU input queue (the loopback path goes through it)", (INIT_NS,)),
        s("net.core.netdev_budget", Domain(I, 50, 2000, log=True),
          "packets per NET_RX softirq run (includes the loopback backlog)", (INIT_NS,)),
        s("net.core.netdev_budget_usecs", Domain(I, 8000, 40000, log=True),
          "time limit of one NET_RX softirq run (the kernel refuses less than 2 jiffies: "
          "8000 us at HZ=250, its default)", (INIT_NS,), "us"),
        s("net.core.dev_weight", Domain(I, 16, 1024, log=True),
          "packets per backlog poll (the loopback quantum)", (INIT_NS,)),
        s("net.core.rmem_max", Domain(I, 212992, 67108864, log=True),
          "cap on SO_RCVBUF", (PER_NS,), "bytes"),
        s("net.core.wmem_max", Domain(I, 212992, 67108864, log=True),
          "cap on SO_SNDBUF", (PER_NS,), "bytes"),
        s("net.core.rmem_default", Domain(I, 16384, 4194304, log=True),
          "default receive buffer of non-TCP sockets (TCP uses tcp_rmem)", (PER_NS,), "bytes"),
        s("net.core.wmem_default", Domain(I, 16384, 4194304, log=True),
          "default send buffer of non-TCP sockets (TCP uses tcp_wmem)", (PER_NS,), "bytes"),
        s("net.core.optmem_max", Domain(I, 10240, 1048576, log=True),
          "ancillary data / zerocopy limit per socket", (PER_NS,), "bytes"),
        s("net.core.busy_poll", Domain(I, 0, 200),
          "busy-poll time for poll/select (needs a NIC NAPI id)", (INIT_NS, NO_LO), "us"),
        s("net.core.busy_read", Domain(I, 0, 200),
          "busy-read time for blocking reads (needs a NIC NAPI id)", (INIT_NS, NO_LO), "us"),
        s("net.ipv4.tcp_autocorking", Domain(B),
          "coalesce small writes while the previous one is queued", (PER_NS,)),
        s("net.ipv4.tcp_slow_start_after_idle", Domain(B),
          "restart slow start after an idle period", (PER_NS,)),
        s("net.ipv4.tcp_max_syn_backlog", Domain(I, 128, 65536, log=True),
          "half-open connection queue", (PER_NS,)),
        s("net.ipv4.tcp_fin_timeout", Domain(I, 5, 120),
          "FIN_WAIT_2 lifetime (connection churn only)", (PER_NS,), "s"),
        s("net.ipv4.tcp_tw_reuse", Domain(C, choices=(0, 1, 2)),
          "reuse TIME_WAIT sockets for new outgoing connections (2 = loopback only)", (PER_NS,)),
        s("net.ipv4.tcp_keepalive_time", Domain(I, 60, 36000, log=True),
          "idle time before keepalive probes", (PER_NS, "idle-only"), "s"),
        s("net.ipv4.tcp_keepalive_intvl", Domain(I, 5, 300, log=True),
          "interval between keepalive probes", (PER_NS, "idle-only"), "s"),
        s("net.ipv4.tcp_keepalive_probes", Domain(I, 1, 127),
          "keepalive probes before dropping (the kernel refuses > 127)", (PER_NS, "idle-only")),
        s("net.ipv4.tcp_thin_linear_timeouts", Domain(B),
          "linear retransmit timeouts for thin streams (no retransmits on lo)", (PER_NS, NO_LO)),
        s("net.unix.max_dgram_qlen", Domain(I, 10, 1048576, log=True),
          "unix datagram queue (no effect on TCP servers)", (PER_NS, NO_LO)),
    ]


# Knobs of the A-Tune study and of blog posts that kvtune leaves out on purpose.
EXCLUDED: dict[str, str] = {
    "net.mtu": "an interface setting, not a sysctl; a wrong MTU cuts the host off the network",
    "net.ipv4.tcp_window_scaling": "turning it off caps every TCP window at 64 KB for new "
                                   "connections host-wide, including the ssh session",
    "net.generic-receive-offload": "an ethtool feature of a NIC, not a sysctl; lo has none "
                                   "worth tuning",
    "net.generic-segmentation-offload": "an ethtool feature of a NIC, not a sysctl",
    "net.tcp-segmentation-offload": "an ethtool feature of a NIC, not a sysctl",
    "net.ipv4.tcp_low_latency": "does nothing since Linux 4.14",
    "net.ipv4.tcp_adv_win_scale": "obsolete since Linux 6.6",
    "kernel.sched_child_runs_first": "removed in 6.12; no effect on a long-running server",
    "vm.overcommit_memory": "host-wide memory accounting for every process (1: the OOM "
                            "killer decides, 2: running services fail their allocations); "
                            "on kvtune's deny-list, and a measured server runs without "
                            "snapshots, the case for 1",
}

# Names used in the case studies and in older tools, mapped to the catalog's knob. Whether
# the knob exists on this host (and why not) is the catalog knob's availability.
ALIASES: dict[str, str] = {
    **{f"{prefix}sched_{n}": f"sched.{n}"
       for prefix in ("kernel.", "")
       for n in ("migration_cost_ns", "wakeup_granularity_ns", "latency_ns",
                 "min_granularity_ns", "nr_migrate", "tunable_scaling", "base_slice_ns")},
    "transparent_hugepage": "thp.enabled",
    "transparent_hugepages": "thp.enabled",
}


def _placement() -> list[Knob]:
    cpus = host_cpus()
    choices = cpu_list_choices(cpus)
    return [
        Knob("placement.cpu_quota_pct",
             Domain(I, 10, 100 * len(cpus), step=10, special=(-1,)), CpuQuota(), -1,
             "server CFS quota in % of one CPU (-1 = unlimited)", "%"),
        Knob("placement.cpu_period_us", Domain(I, 1000, 1_000_000, log=True), CpuPeriod(),
             100_000, "CFS bandwidth period of the server's cgroup", "us"),
        Knob("placement.cpuset", Domain(C, choices=choices), CpusetCpus(), None,
             "server cpuset (cgroup kvtune creates and removes)"),
        Knob("placement.server_cpus", Domain(C, choices=choices), ServerCpus(), None,
             "CPUs the server is pinned to"),
    ]


def _server_sched() -> list[Knob]:
    """Per-process scheduler settings of the server, applied at exec (host/sched.py);
    plus the scheduler's features where they can be written (debugfs mounted, or mountable
    for the study)."""
    knobs = [
        Knob("sched.server_policy", Domain(C, choices=("other", "batch")), SchedPolicy(),
             "other", "the server's policy: batch (SCHED_BATCH) never preempts on wake-up, "
             "the per-process form of a large sched_wakeup_granularity_ns"),
        Knob("sched.server_nice", Domain(I, -20, 19), SchedNice(), 0,
             "the server's nice (its weight against the load generator and the host)"),
        Knob("sched.server_slice_ns", Domain(I, SLICE_MIN_NS, SLICE_MAX_NS, log=True,
                                             special=(0,)),
             SchedSlice(), 0, "the server's EEVDF time slice (sched_setattr sched_runtime, "
             "Linux >= 6.12; 0 = the kernel's default, base_slice_ns scaled by CPU count); "
             "the per-task form of base_slice_ns / sched_min_granularity_ns", "ns"),
    ]
    st = debugfs_status()  # mounted now, or probed in a private mount namespace
    if st.features_writable:  # a study with one of them mounts debugfs (Session.setup_host)
        for f in st.features:
            name = f.removeprefix("NO_")
            knobs.append(Knob(f"sched.feature.{name}", Domain(B), SchedFeature(name), None,
                              f"scheduler feature {name} (debugfs sched/features)"))
    return knobs


def _idle() -> list[Knob]:
    """The idle path (knobs/appliers/idle.py): PM QoS, guest halt-polling, cpuidle states
    and governor. The states and governors offered are the host's own, read from sysfs."""
    from kvtune.knobs.appliers import idle

    states = tuple(idle.state_names()) or ("POLL",)
    govs = idle.governors() or ("menu",)
    return [
        Knob("cpu.idle_max_latency_us", Domain(I, 1, 1000, log=True,
                                               special=(0, idle.NO_REQUEST)),
             idle.PmQosLatency(), None,
             "PM QoS CPU latency request (/dev/cpu_dma_latency, held open; TuneD's "
             f"force_latency): 0 keeps CPUs polling, {idle.NO_REQUEST} is no request",
             "us"),
        Knob("cpu.halt_poll_ns", Domain(I, 10_000, 2_000_000, log=True, special=(0,)),
             idle.haltpoll_param("guest_halt_poll_ns"), None,
             "guest halt-polling: how long a vCPU polls before it halts (haltpoll driver)",
             "ns"),
        Knob("cpu.halt_poll_grow", Domain(I, 1, 10), idle.haltpoll_param("guest_halt_poll_grow"),
             None, "guest halt-polling: the poll time's growth factor on a wake-up in time"),
        Knob("cpu.halt_poll_shrink", Domain(I, 0, 10),
             idle.haltpoll_param("guest_halt_poll_shrink"), None,
             "guest halt-polling: the poll time's shrink divisor (0: reset)"),
        Knob("cpu.halt_poll_allow_shrink", Domain(B),
             idle.haltpoll_param("guest_halt_poll_allow_shrink", "yn"), None,
             "guest halt-polling: the poll time may shrink after a wake-up too late"),
        Knob("cpu.idle_disable", Domain(C, choices=("none", *states[1:])),
             idle.CpuidleDisable(), None,
             "this cpuidle state and every deeper one disabled on the study's CPUs (by the "
             "state's name; none: every state enabled)"),
        Knob("cpu.idle_governor", Domain(C, choices=govs),
             HostFile([Location(f"{roots.CPUIDLE}/current_governor")],
                      note="this kernel does not let the cpuidle governor be switched"),
             None, "the cpuidle governor"),
    ]


def all_knobs() -> list[Knob]:
    from kvtune import kind_registry as kinds

    return ([k for kind in kinds.every() for k in kind.knobs()] + _kernel() + _vm() + _net()
            + _placement() + _server_sched() + _idle())


# The scheduler knobs of the case studies (000, 002, 003), and what does their job on a
# kernel where they are gone (EEVDF, 6.6+) or cannot be written (debugfs under lockdown).
EQUIVALENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "sched.migration_cost_ns": (
        ("placement.server_cpus", "placement.cpuset"),
        "keeps tasks cache-hot against load balancing; without debugfs, pinning the server "
        "(placement.server_cpus or a cpuset) stops the migrations it tunes"),
    "sched.wakeup_granularity_ns": (
        ("sched.server_policy",),
        "a large value stops wake-up preemption (case study 002); sched.server_policy=batch "
        "does that per process on every kernel"),
    "sched.latency_ns": (
        ("sched.server_slice_ns", "sched.server_policy"),
        "the CFS period is gone under EEVDF; the server's own slice (and batch) set how "
        "long it runs before another task may take the CPU"),
    "sched.min_granularity_ns": (
        ("sched.server_slice_ns",),
        "became base_slice_ns under EEVDF; sched.server_slice_ns is its per-task form "
        "(Linux >= 6.12)"),
    "sched.base_slice_ns": (
        ("sched.server_slice_ns",),
        "debugfs; sched.server_slice_ns sets the server's slice without it"),
    "kernel.sched_autogroup_enabled": (
        ("sched.server_nice",),
        "autogroup weighs sessions, not processes; the server's nice sets its weight directly"),
}


def equivalent(name: str, ctx: HostContext) -> str:
    """For a case-study scheduler knob: which working equivalent exists on this host, for
    people ("" when `name` has no entry)."""
    entry = EQUIVALENTS.get(canonical(name))
    if entry is None:
        return ""
    names, why = entry
    ok = [n for n in names if n in CATALOG and CATALOG[n].applier.check(ctx).ok]
    if not ok:
        return f"no working equivalent here ({why})"
    return f"use {' / '.join(ok)}: {why}"


def sched_features_note() -> str:
    """Whether the scheduler's features are offered as knobs here, and why not."""
    ok, reason = features_status()
    if ok:
        return "sched features: offered as sched.feature.<NAME> knobs"
    return f"sched features (RUN_TO_PARITY, PREEMPT_SHORT, ...): not offered: {reason}"


CATALOG: dict[str, Knob] = {k.name: k for k in all_knobs()}


def register(*knobs: Knob) -> None:
    """Add knobs to the catalog: how a knob family outside this module (an applier module
    and its knobs) becomes known to studies, `kvtune knobs`, rules and export. Raises
    ValueError for a name the catalog already has."""
    for k in knobs:
        if k.name in CATALOG or k.name in ALIASES:
            raise ValueError(f"knob {k.name!r} is already in the catalog")
    CATALOG.update({k.name: k for k in knobs})


# -- presets -------------------------------------------------------------------------------

# Preset name → (knob names, domain overrides, keep only what is available on this host):
# each server kind's (kinds/<kind>/catalog.py, PRESETS), then the placement's with every
# kind's thread knob.
Preset = tuple[list[str], dict[str, Domain], bool]


def _presets() -> dict[str, Preset]:
    from kvtune import kind_registry as kinds

    out: dict[str, Preset] = {}
    for kind in kinds.every():
        out.update(kind.presets())
    out["placement"] = (
        ["placement.cpu_quota_pct", "placement.cpu_period_us", "placement.cpuset",
         "placement.server_cpus", *(k.thread_knob for k in kinds.every() if k.thread_knob)],
        {}, True)
    return out


_PRESET_DEFS: dict[str, Preset] = _presets()
PRESET_NAMES: tuple[str, ...] = tuple(_PRESET_DEFS)


def apply_preset(preset: str, knob: Knob) -> Knob:
    """`knob` with the range `preset` gives it (A-Tune's for the memcached-app preset),
    else as it is. The one place a preset's ranges are applied."""
    domain = _PRESET_DEFS[preset][1].get(knob.name)
    return knob if domain is None else replace(knob, domain=domain)


def preset_names(name: str, ctx: HostContext, available_only: bool = True) -> list[str]:
    """The knobs of preset `name`; for the host-dependent presets only those available on
    the host of `ctx` (unless `available_only` is false)."""
    names, _, host_dependent = _PRESET_DEFS[name]
    if not host_dependent or not available_only:
        return list(names)
    return [n for n in names if CATALOG[n].applier.check(ctx).ok]


def preset_knobs(name: str, ctx: HostContext) -> list[Knob]:
    """The knobs of a preset with the preset's ranges."""
    return [apply_preset(name, CATALOG[n]) for n in preset_names(name, ctx)]


# -- lookup --------------------------------------------------------------------------------


def canonical(name: str) -> str:
    return ALIASES.get(name, name)


def lookup(name: str) -> Knob | None:
    return CATALOG.get(canonical(name))


def check_rules(config: dict[str, Any], ctx: HostContext,
                relax: Iterable[str] = ()) -> str | None:
    """The first rule between catalog knobs that `config` breaks, as a sentence, or None.
    A knob the configuration leaves out reads as its baseline value."""
    found = broken(Values(config, ctx, lookup), relax)
    return f"{found[0].message} (rule {found[0].name})" if found else None


def broken_rules(config: dict[str, Any], ctx: HostContext) -> list[str]:
    """The names of every rule `config` breaks."""
    return [r.name for r in broken(Values(config, ctx, lookup))]


def for_target(target: str | None) -> Iterable[Knob]:
    for k in CATALOG.values():
        if target is None or k.target in (None, target):
            yield k
