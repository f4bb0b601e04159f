"""memcached command-line flags and `-o` extended options, built structurally as argv."""

from __future__ import annotations

from kvtune.knobs.appliers.base import Applier, ApplyEnv, HostContext
from kvtune.knobs.domain import Value
from kvtune.knobs.knob import Availability


def _version_ok(ctx: HostContext, min_version: tuple[int, ...] | None,
                max_version: tuple[int, ...] | None) -> Availability:
    have = ctx.versions.get("memcached")
    if have is None:
        return Availability(True)
    v = ".".join(map(str, have))
    if min_version and have < min_version:
        return Availability(False, f"needs memcached >= {'.'.join(map(str, min_version))} "
                                   f"(this is {v})")
    if max_version and have > max_version:
        return Availability(False, f"removed after memcached {'.'.join(map(str, max_version))} "
                                   f"(this is {v})")
    return Availability(True)


class MemcachedFlag(Applier):
    """A flag such as `-t 4`. Booleans (`-L`) are emitted bare when true."""

    scope = "app"
    restart = True
    target = "memcached"

    def __init__(self, flag: str, min_version: tuple[int, ...] | None = None,
                 max_version: tuple[int, ...] | None = None) -> None:
        self.flag = flag
        self.min_version = min_version
        self.max_version = max_version

    def where(self) -> str:
        return self.flag

    def check(self, ctx: HostContext) -> Availability:
        return _version_ok(ctx, self.min_version, self.max_version)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        if isinstance(value, bool):
            if value:
                env.launch.flags.append(self.flag)
            return
        env.launch.flags += [self.flag, self.format(value)]


class MemcachedOption(Applier):
    """An extended option: all of them are joined into one `-o a=b,c` argument.
    Booleans become a bare option name when true (`-o slab_reassign`), nothing when false,
    or `no_<name>` when `negate` says the default is on."""

    scope = "app"
    restart = True
    target = "memcached"

    def __init__(self, key: str, negate: str | None = None,
                 min_version: tuple[int, ...] | None = None,
                 max_version: tuple[int, ...] | None = None) -> None:
        self.key = key
        self.negate = negate
        self.min_version = min_version
        self.max_version = max_version

    def where(self) -> str:
        return f"-o {self.key}"

    def check(self, ctx: HostContext) -> Availability:
        return _version_ok(ctx, self.min_version, self.max_version)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        opts = env.launch.memcached_options
        if isinstance(value, bool):
            if value:
                opts[self.key] = ""
            elif self.negate:
                opts[self.negate] = ""
            return
        opts[self.key] = self.format(value)


def memcached_argv_options(options: dict[str, str]) -> list[str]:
    if not options:
        return []
    return ["-o", ",".join(k if v == "" else f"{k}={v}" for k, v in options.items())]
