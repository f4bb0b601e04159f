"""Redis configuration directives, passed at start as `--name value` arguments.

Live-settable directives could be changed with CONFIG SET, but kvtune starts a fresh
server for every repetition, so every directive is given at start; `live` is recorded
for the export and for people (and checked against a real server by the tests).

Some directives exist only in some builds: `activedefrag` needs the jemalloc bundled with
the Redis sources, and Debian's build (linked to the system jemalloc) refuses it at start.
Such directives are probed with a dry start of the binary that cannot listen anywhere."""

from __future__ import annotations

from functools import lru_cache

from kvtune.knobs.appliers.base import (
    Applier,
    ApplyEnv,
    Availability,
    ExportEntry,
    HostContext,
)
from kvtune.knobs.domain import Value
from kvtune.safety import programs

# What a build that lacks a feature prints when the directive is set at start.
_BUILD_REFUSALS = {"activedefrag": "Active defragmentation cannot be enabled"}


@lru_cache(maxsize=16)
def build_supports(binary: str, directive: str, value: str) -> tuple[bool, str]:
    """Whether `binary` accepts `directive value` at start. The probe listens nowhere
    (port 0, no socket), so a build that accepts the directive exits right after loading
    its configuration; one that refuses it exits with a fatal config error. Only a binary
    kvtune may execute is probed (kvtune.safety.programs)."""
    args = ["--port", "0", "--save", "", "--appendonly", "no", "--daemonize", "no",
            f"--{directive}", value]
    try:
        out = programs.find(binary, "redis-server build probe").run(
            args, capture_output=True, text=True, timeout=10)
    except programs.Untrusted as e:
        return False, f"not probed: {e}"
    except (OSError, programs.TimeoutExpired) as e:
        return False, f"cannot probe {binary}: {e}"
    text = out.stdout + out.stderr
    marker = _BUILD_REFUSALS.get(directive, "FATAL CONFIG FILE ERROR")
    if marker in text or "FATAL CONFIG FILE ERROR" in text:
        line = next((ln.strip() for ln in text.splitlines() if marker in ln), marker)
        return False, f"this redis-server build refuses {directive}: {line}"
    return True, ""


class RedisDirective(Applier):
    scope = "app"
    target = "redis"

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

    @property
    def restart(self) -> bool:  # type: ignore[override]
        return not self.live

    def sets(self) -> tuple[str, ...]:
        return (self.directive,)

    def where(self) -> str:
        return f"redis.conf {self.directive}" + (" (live)" if self.live else "")

    def check(self, ctx: HostContext) -> Availability:
        have = ctx.versions.get("redis")
        if have and self.min_version and have < self.min_version:
            return Availability(False, f"needs redis >= {'.'.join(map(str, self.min_version))}")
        if self.probe is not None:
            binary = ctx.binaries.get("redis")
            if binary is None:  # a redis-server on PATH, only when kvtune may execute it
                found, why = programs.lookup("redis-server", "redis-server build probe")
                if found is None:
                    return Availability(False, f"{why}, so the build cannot be probed for "
                                               f"{self.directive}")
                binary = found.path
            ok, why = build_supports(binary, self.directive, self.probe)
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
        env.launch.redis_directives[self.directive] = self.format(value)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        return ExportEntry("redis", self.directive, self.format(value), self.live)
