"""Redis configuration directives, passed at start as `--name value` arguments.

Live-settable directives could be changed with CONFIG SET, but kvtune starts a fresh
server for every repetition, so every directive is given at start; `live` is recorded
for the export and for people (and checked against a real server by the tests).

Some directives exist only in some builds: `activedefrag` needs the jemalloc bundled with
the Redis sources, and Debian's build (linked to the system jemalloc) refuses it at start.
Such directives are probed with a dry start of the binary that cannot listen anywhere."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kvtune.knobs.appliers.base import (
    Applier,
    ApplyEnv,
    Availability,
    ExportEntry,
    HostContext,
)
from kvtune.knobs.domain import Value
from kvtune.safety import args as safe_args
from kvtune.safety import programs
from kvtune.safety.values import fmt_value

# What a build that lacks a feature prints when the directive is set at start.
_BUILD_REFUSALS = {"activedefrag": "Active defragmentation cannot be enabled"}


@lru_cache(maxsize=16)
def build_supports(binary: str, directive: str, value: str,
                   server: str = "redis-server") -> tuple[bool, str]:
    """Whether `binary` accepts `directive value` at start. The probe listens nowhere
    (port 0, no socket), so a build that accepts the directive exits right after loading
    its configuration; one that refuses it exits with a fatal config error. Only a binary
    kvtune may execute is probed (kvtune.safety.programs)."""
    args = ["--port", "0", "--save", "", "--appendonly", "no", "--daemonize", "no",
            f"--{directive}", value]
    try:
        out = programs.find(binary, f"{server} build probe").run(
            args, capture_output=True, text=True, timeout=10)
    except programs.Untrusted as e:
        return False, f"not probed: {e}"
    except (OSError, programs.TimeoutExpired) as e:
        return False, f"cannot probe {binary}: {e}"
    text = out.stdout + out.stderr
    marker = _BUILD_REFUSALS.get(directive, "FATAL CONFIG FILE ERROR")
    if marker in text or "FATAL CONFIG FILE ERROR" in text:
        line = next((ln.strip() for ln in text.splitlines() if marker in ln), marker)
        return False, f"this {server} build refuses {directive}: {line}"
    return True, ""


class RedisDirective(Applier):
    """A directive of redis-server; a kind whose server reads the same directives (Valkey)
    subclasses it with its own `target`, `server` and `family`."""

    scope = "app"
    target = "redis"
    server = "redis-server"  # the binary probed when the context names none
    family = "redis"  # the export format that takes it

    def __init__(self, directive: str, live: bool = False,
                 min_version: tuple[int, ...] | None = None, suffix: str = "",
                 probe: str | None = None) -> None:
        """`suffix` is appended to numbers ("mb"); `probe` is a value to try at start when
        the directive exists only in some builds."""
        self.directive = directive
        self.live = live
        self.min_version = min_version
        self.suffix = suffix
        self.probe = probe

    @classmethod
    def check_inline(cls, directive: str, name: str, values: list[Any], is_bool: bool,
                     target: Any) -> None:
        """An inline knob's directive on the target's allow-list, every value (yes/no for
        a bool) matching its pattern (kvtune.safety.values). Raises ValueError."""
        pattern = target.directive_pattern(directive) or ""
        for v in [*values, *([True, False] if is_bool else [])]:
            safe_args.check_value(fmt_value(v, yes_no=True), pattern, f"{name} ({directive})")

    @property
    def restart(self) -> bool:  # type: ignore[override]
        return not self.live

    def sets(self) -> tuple[str, ...]:
        return (self.directive,)

    def where(self) -> str:
        return f"{self.family}.conf {self.directive}" + (" (live)" if self.live else "")

    def check(self, ctx: HostContext) -> Availability:
        have = ctx.versions.get(self.target)
        if have and self.min_version and have < self.min_version:
            return Availability(False, f"needs {self.target} >= "
                                       f"{'.'.join(map(str, self.min_version))}")
        if self.probe is not None:
            binary = ctx.binaries.get(self.target)
            if binary is None:  # the server on PATH, only when kvtune may execute it
                found, why = programs.lookup(self.server, f"{self.server} build probe")
                if found is None:
                    return Availability(False, f"{why}, so the build cannot be probed for "
                                               f"{self.directive}")
                binary = found.path
            ok, why = build_supports(binary, self.directive, self.probe, self.server)
            if not ok:
                return Availability(False, why)
        return Availability(True)

    def format(self, value: Value) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        text = super().format(value)
        if self.suffix and isinstance(value, int):
            text += self.suffix
        return text

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.options[self.directive] = self.format(value)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry(self.family, self.directive, self.format(value), self.live)
