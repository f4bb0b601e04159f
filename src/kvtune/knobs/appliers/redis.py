"""Redis configuration directives, passed at start as `--name value` arguments.

Live-settable directives could be changed with CONFIG SET, but kvtune starts a fresh
server for every repetition, so every directive is given at start; `live` is recorded
for the export and for people."""

from __future__ import annotations

from kvtune.knobs.appliers.base import Applier, ApplyEnv, HostContext
from kvtune.knobs.domain import Value
from kvtune.knobs.knob import Availability


class RedisDirective(Applier):
    scope = "app"
    target = "redis"

    def __init__(self, directive: str, live: bool = False,
                 min_version: tuple[int, ...] | None = None) -> None:
        self.directive = directive
        self.live = live
        self.min_version = min_version

    @property
    def restart(self) -> bool:  # type: ignore[override]
        return not self.live

    def where(self) -> str:
        return f"redis.conf {self.directive}" + (" (live)" if self.live else "")

    def check(self, ctx: HostContext) -> Availability:
        have = ctx.versions.get("redis")
        if have and self.min_version and have < self.min_version:
            return Availability(False, f"needs redis >= {'.'.join(map(str, self.min_version))}")
        return Availability(True)

    def format(self, value: Value) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        return super().format(value)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        env.launch.redis_directives[self.directive] = self.format(value)
