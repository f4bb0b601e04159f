"""The trial runner: one repetition of one configuration.

Each repetition starts the server fresh with the configuration's application knobs,
pinned to its CPUs and inside kvtune's cgroup; applies host knobs through the journal;
waits until the server accepts connections; runs kvload pinned to the client CPUs (kvload
preloads, warms up and measures); reads the server's stats and the host's noise counters;
stops the server and waits until its port is free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvtune import load, present, telemetry
from kvtune.cpulist import parse_cpus
from kvtune.errors import TrialFailed, UserError
from kvtune.host.cgroup import ServerCgroup
from kvtune.host.journal import Journal
from kvtune.host.plan import plan_for
from kvtune.host.sched import describe as sched_describe
from kvtune.knobs.appliers.base import ApplyEnv, Launch
from kvtune.knobs.knob import Knob
from kvtune.measure import preflight as checks
from kvtune.measure.hostprofile import HostProfile
from kvtune.space import Config, Space, build_space
from kvtune.spec import StudySpec
from kvtune.targets import context_for, make_target
from kvtune.targets.base import ServerTarget, SimulatedTarget, Target
from kvtune.telemetry.sampler import ServerSampler
from kvtune.telemetry.sampler import supported as sampler_supported

__all__ = ["Config", "Repetition", "Session"]


@dataclass
class Repetition:
    status: str  # "ok", "flagged" (client-bound, saturated, steal) or "failed"
    metrics: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    reason: str = ""


class Session:
    """What a study holds open while it measures: the spec, the target, the host context,
    the journal and the server's cgroup; after `preflight`, the study's `space`."""

    def __init__(self, spec: StudySpec, knobs: list[Knob], journal: Journal | None) -> None:
        self.spec = spec
        self.knobs = list(knobs)  # as resolved from the study file; `space` has the final ones
        self.journal = journal
        self.target: Target = make_target(spec.target)
        bind = getattr(self.target, "bind_study", None)  # a target that reads the study
        if bind is not None:
            bind(spec)
        self.ctx = context_for(self.target)
        cpus = [c for part in (spec.target.cpus, spec.load.cpus if spec.load else None)
                if part and not (spec.load and part == spec.load.cpus and spec.load.host)
                for c in parse_cpus(part)]
        if cpus:  # per-CPU knobs (the cpuidle states) act on the study's CPUs only
            self.ctx = dataclasses.replace(self.ctx, cpus=tuple(sorted(set(cpus))))
        self.facts = self.ctx.facts
        self.cgroup: ServerCgroup | None = None
        self.load_driver: load.LoadDriver | None = None
        self.rng = np.random.default_rng(spec.seed)
        self._rep_counter = 0
        self.space: Space | None = None

    @property
    def on_host(self) -> bool:
        """True when repetitions start a server on this host (journal, placement, load)."""
        return self.target.runs_server

    @property
    def baseline(self) -> Config:
        """The baseline configuration (a copy); needs `preflight`."""
        return self._space().baseline_config()

    def _space(self) -> Space:
        if self.space is None:
            raise RuntimeError("Session.preflight() has not run")
        return self.space

    # -- before anything is applied ---------------------------------------------------------

    def preflight(self) -> Space:
        """Check every knob (exists, readable, writable, version) and the harness, and build
        the study's space (the baseline and the final domains). Raises UserError listing
        every problem; nothing is applied."""
        problems = checks.problems(self.spec, self.knobs, self.ctx, self.on_host)
        if problems:
            raise UserError(f"{len(problems)} problem(s) before the study could start "
                            "(nothing was applied)", problems)
        if self.spec.load is not None and self.on_host:
            self.load_driver = load.driver_for(self.spec.load, self.spec.capacity)
            self.load_driver.prepare()
        self.space = build_space(self.knobs, self.ctx, self.spec.target.cpus)
        return self.space

    def setup_host(self) -> None:
        """Create the server cgroup when cgroup knobs are in the study, mount debugfs when a
        knob lives there and it is not mounted, and probe that every host knob is writable
        by writing back its current value (all through the journal)."""
        assert self.journal is not None
        space = self._space()
        journal = self.journal

        def make_cgroup(controllers: frozenset[str]) -> None:
            self.cgroup = ServerCgroup(journal, set(controllers), mode=self.facts.cgroup)
            self.cgroup.create()

        try:  # the plan `kvtune check` printed: debugfs (unmounted on restore), the cgroup
            plan_for(space.knobs, self.ctx).carry_out(journal, make_cgroup)
        except OSError as e:
            raise UserError(f"debugfs: {e.strerror or e}") from None
        for k in space.knobs:
            if k.scope == "host":
                try:
                    k.applier.apply(space.baseline[k.name], ApplyEnv(self.journal, Launch(),
                                                                     self.ctx))
                except (OSError, ValueError) as e:
                    raise UserError(f"knob {k.name}: not writable on this host: "
                                    f"{getattr(e, 'strerror', None) or e}") from None

    # -- one repetition --------------------------------------------------------------------

    def launch_for(self, config: Config) -> Launch:
        launch = Launch(params=dict(config))
        env = ApplyEnv(self.journal, launch, self.ctx)
        for k in self._space().knobs:
            if k.scope != "host":
                k.applier.apply(config[k.name], env)
        return launch

    def apply_host(self, config: Config) -> None:
        env = ApplyEnv(self.journal, Launch(), self.ctx)
        for k in self._space().knobs:
            if k.scope == "host":
                try:
                    k.applier.apply(config[k.name], env)
                except OSError as e:
                    raise TrialFailed(f"knob {k.name}: the kernel refused {config[k.name]!r}: "
                                      f"{e.strerror}") from None
                except ValueError as e:
                    raise TrialFailed(f"knob {k.name}: the write did not take: {e}") from None

    def prepare_start(self, config: Config) -> Launch:
        """Apply `config`'s host knobs and cgroup files; the launch its server starts with.
        A configuration that does not fit the study's space (one read back from storage)
        is refused before anything is applied (UserError)."""
        self._space().check(config, "the configuration to measure")
        self.apply_host(config)
        launch = self.launch_for(config)
        if self.cgroup is not None:
            for (controller, filename), value in launch.cgroup_files.items():
                try:
                    self.cgroup.write(controller, filename, value)
                except (OSError, ValueError) as e:
                    raise TrialFailed(f"cgroup {controller}/{filename}={value}: "
                                      f"{getattr(e, 'strerror', None) or e}") from None
        return launch

    def profile(self, config: Config) -> HostProfile | None:
        """The host profile of a capacity study (kvtune.measure.hostprofile) on a fresh
        server at `config`; None when there is nothing to profile here (no capacity
        objective, a simulated target, a load tool that cannot search). Raises TrialFailed
        when the server or kvload failed."""
        from kvtune.load import kvload

        cap = self.spec.capacity
        if (cap is None or not self.on_host or self.spec.load is None
                or not isinstance(self.load_driver, kvload.KvloadDriver)):
            return None
        assert isinstance(self.target, ServerTarget)
        target, driver = self.target, self.load_driver
        if driver.binary is None:
            driver.prepare()
        assert driver.binary is not None
        launch = self.prepare_start(config)
        dirs = self.cgroup.unique_dirs() if self.cgroup else []
        server = target.start(launch, self.journal, dirs)
        cpus = launch.server_cpus or self.spec.target.cpus
        local = isinstance(driver.transport, kvload.LocalTransport)
        try:
            doc = kvload.profile(self.spec.load, cap, target.address, target.protocol,
                                 self.spec.seed, driver.binary, driver.transport,
                                 driver.workload_path,
                                 (server.pid, cpus) if cpus and local else None)
        finally:
            target.stop(server, self.journal)
        return HostProfile(doc)

    def measure(self, config: Config) -> Repetition:
        self._rep_counter += 1
        seed = self.spec.seed * 1_000_003 + self._rep_counter
        if isinstance(self.target, SimulatedTarget):
            try:
                m, raw = self.target.repetition(config, self.rng, self.spec.capacity)
            except TrialFailed as e:
                return Repetition("failed", reason=e.reason,
                                  raw={"stderr": e.stderr, "config": config, **e.raw})
            return Repetition("ok", m, {"config": config, "seed": seed, **raw},
                              reason=str(m.get("verdict_reason") or ""))
        try:
            return self._measure_real(config, seed)
        except TrialFailed as e:
            return Repetition("failed", reason=e.reason, raw={"stderr": e.stderr,
                                                              "config": config, **e.raw})

    def _measure_real(self, config: Config, seed: int) -> Repetition:
        assert isinstance(self.target, ServerTarget) and self.spec.load is not None
        target = self.target
        launch = self.prepare_start(config)
        dirs = self.cgroup.unique_dirs() if self.cgroup else []
        server = target.start(launch, self.journal, dirs)
        raw: dict[str, Any] = {"config": config, "argv": server.argv, "seed": seed,
                               "host": self.facts.as_dict(),
                               "placement": {"server_cpus": launch.server_cpus
                                             or self.spec.target.cpus,
                                             "client_cpus": self.spec.load.cpus}}
        if self.spec.load.host:  # client_cpus are the load host's (raw["load"]["remote"])
            raw["placement"]["load_host"] = self.spec.load.host
        if launch.sched:  # each thread's policy, nice and slice as read back at start
            raw["sched"] = sched_describe(server.pid)
        probe = telemetry.Probe(server.pid, self.cgroup)
        sampler = (ServerSampler(target.kind, target.host, target.port)
                   if sampler_supported(target.kind) else None)
        try:
            probe.start()
            if sampler is not None:  # server stats every second (telemetry/sampler.py)
                sampler.start()
            if self.load_driver is None:
                self.load_driver = load.driver_for(self.spec.load, self.spec.capacity)
            server_cpus = launch.server_cpus or self.spec.target.cpus
            if hasattr(self.load_driver, "watch"):
                # kvload watches the server's CPUs for other tasks and steal, window by
                # window (docs/kvload.md, "How a capacity search copes with noise").
                self.load_driver.watch = (server.pid, server_cpus) if server_cpus else None
            result = self.load_driver.run(target.address, target.protocol, seed)
            tele = probe.stop()
            if sampler is not None:
                tele.raw["samples"] = sampler.stop(result.raw)
            if server.proc.poll() is not None:
                raise TrialFailed(f"{target.kind} exited during the load (code "
                                  f"{server.proc.returncode})", server.stderr_text())
            stats = target.stats()
        except TrialFailed as e:
            probe.close()
            if sampler is not None:
                sampler.close()
            e.stderr = e.stderr or server.stderr_text()
            target.stop(server, self.journal)
            raise
        except BaseException:
            probe.close()
            if sampler is not None:
                sampler.close()
            target.stop(server, self.journal)
            raise
        rc = target.stop(server, self.journal)
        server_m, server_raw = telemetry.server_digest(target.kind, stats)
        from kvtune.mrc.model import configured_memory

        memory = configured_memory(target.kind, stats)  # the `memory` metric
        if memory is not None:
            server_m = {**server_m, "memory": memory}
        metrics = {**result.metrics, "verdict": result.verdict, "verdict_reason": result.reason,
                   **tele.metrics, **server_m}
        raw.update(load={**result.raw, "tool": self.load_driver.tool}, server_stats=stats,
                   server_exit=rc, telemetry={**tele.raw, "server": server_raw})
        flags = [] if result.verdict == "ok" else [result.verdict]
        steal = metrics.get("steal")  # the share of CPU time stolen (telemetry's `sys`)
        if steal is not None and steal > self.spec.evaluation.steal_threshold:
            flags.append(f"steal {present.share(steal, 1)}")
        return Repetition("flagged" if flags else "ok", metrics, raw, flags, result.reason)

