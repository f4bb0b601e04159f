"""memcached command-line flags and `-o` extended options, built structurally as argv.

Version traps handled here, not by callers:
- an option outside its version gate is never emitted (`worker_logbuf_size` before 1.6.40
  also sets `slab_sizes` to its value, which silently wrecks the slab classes);
- `slab_chunk_max` is given to kvtune in KB and emitted in the unit of the running binary
  (bytes before 1.6.24, KB from 1.6.24);
- `-L` while transparent huge pages are `never` (memcached exits at start) is the rule
  `memcached-large-pages-thp` (kinds/memcached/rules.py), checked before a configuration
  is measured.
"""

from __future__ import annotations

from typing import Any

from kvtune.errors import UserError
from kvtune.knobs.appliers.base import (
    Applier,
    ApplyEnv,
    Availability,
    ExportEntry,
    HostContext,
)
from kvtune.knobs.domain import Value
from kvtune.safety import args as safe_args
from kvtune.safety.values import check_bare, fmt_value

# memcached -I sizes kvtune searches, in KB.
ITEM_SIZES_KB = {"512k": 512, "1m": 1024, "2m": 2048, "4m": 4096, "8m": 8192}


def _v(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _version_ok(ctx: HostContext, min_version: tuple[int, ...] | None,
                max_version: tuple[int, ...] | None) -> Availability:
    have = ctx.versions.get("memcached")
    if have is None:
        return Availability(True)
    if min_version and have < min_version:
        return Availability(False, f"needs memcached >= {_v(min_version)} (this is {_v(have)})")
    if max_version and have > max_version:
        return Availability(False, f"removed after memcached {_v(max_version)} "
                                   f"(this is {_v(have)})")
    return Availability(True)


def _refuse_outside_gate(where: str, env: ApplyEnv, min_version: tuple[int, ...] | None,
                         max_version: tuple[int, ...] | None) -> None:
    gate = _version_ok(env.ctx, min_version, max_version)
    if not gate.ok:
        raise UserError(f"memcached {where}: {gate.reason}; kvtune does not emit it")


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

    @classmethod
    def check_inline(cls, flag: str, name: str, values: list[Any], is_bool: bool,
                     target: Any) -> None:
        """An inline knob's flag on the target's allow-list, every value it can take
        matching the flag's value pattern (kvtune.safety.values). Raises ValueError."""
        pattern = target.flag_pattern(flag)
        check_bare(pattern, is_bool, f"memcached {flag}")
        if pattern == "options":
            raise ValueError("memcached -o: define an inline knob with memcached_option")
        for v in values:
            safe_args.check_value(fmt_value(v), pattern or "", f"{name} ({flag})")

    def where(self) -> str:
        return self.flag

    def sets(self) -> tuple[str, ...]:
        return (self.flag,)

    def check(self, ctx: HostContext) -> Availability:
        return _version_ok(ctx, self.min_version, self.max_version)

    def argv(self, value: Value, ctx: HostContext) -> list[str]:
        """The argv words for `value` (nothing for a false boolean)."""
        if isinstance(value, bool):
            return [self.flag] if value else []
        return [self.flag, self.format(value)]

    def apply(self, value: Value, env: ApplyEnv) -> None:
        _refuse_outside_gate(self.flag, env, self.min_version, self.max_version)
        env.launch.flags += self.argv(value, env.ctx)

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        words = self.argv(value, ctx)
        return ExportEntry("memcached-flag", words[0], " ".join(words[1:])) if words else None


class MemcachedOption(Applier):
    """An extended option: all of them are joined into one `-o a=b,c` argument.
    Booleans become a bare option name when true (`-o slab_reassign`), nothing when false,
    or `negate` (`no_lru_crawler`) when false and the option has a negative form.
    `omit` is a value that means "leave the option out" (temporary_ttl 0 = no TEMP LRU)."""

    scope = "app"
    restart = True
    target = "memcached"

    def __init__(self, key: str, negate: str | None = None,
                 min_version: tuple[int, ...] | None = None,
                 max_version: tuple[int, ...] | None = None,
                 omit: Value | None = None) -> None:
        self.key = key
        self.negate = negate
        self.min_version = min_version
        self.max_version = max_version
        self.omit = omit

    @classmethod
    def check_inline(cls, key: str, name: str, values: list[Any], is_bool: bool,
                     target: Any) -> None:
        """An inline knob's `-o` option on the target's allow-list, every value matching
        its pattern (kvtune.safety.values). Raises ValueError."""
        pattern = target.option_pattern(key)
        check_bare(pattern, is_bool, f"memcached -o {key}")
        for v in values:
            safe_args.check_value(fmt_value(v), pattern or "", f"{name} (-o {key})")

    def where(self) -> str:
        return f"-o {self.key}"

    def sets(self) -> tuple[str, ...]:
        return (f"-o {self.key}",) + ((f"-o {self.negate}",) if self.negate else ())

    def check(self, ctx: HostContext) -> Availability:
        return _version_ok(ctx, self.min_version, self.max_version)

    def option(self, value: Value, ctx: HostContext) -> tuple[str, str] | None:
        """(name, value) of the option for `value`; value "" for a bare option; None to omit."""
        if self.omit is not None and value == self.omit and not isinstance(value, bool):
            return None
        if isinstance(value, bool):
            if value:
                return self.key, ""
            return (self.negate, "") if self.negate else None
        return self.key, self.format(value)

    def apply(self, value: Value, env: ApplyEnv) -> None:
        _refuse_outside_gate(f"-o {self.key}", env, self.min_version, self.max_version)
        opt = self.option(value, env.ctx)
        if opt is not None:
            env.launch.options[opt[0]] = opt[1]

    def export_entry(self, value: Value, ctx: HostContext) -> ExportEntry | None:
        opt = self.option(value, ctx)
        return None if opt is None else ExportEntry("memcached-option", *opt)


class SlabChunkMax(MemcachedOption):
    """`-o slab_chunk_max`, given in KB; emitted in bytes before 1.6.24 and in KB after.
    Without a known version it assumes the newer (KB) form."""

    KB_SINCE = (1, 6, 24)

    def __init__(self) -> None:
        super().__init__("slab_chunk_max")

    def where(self) -> str:
        return "-o slab_chunk_max (bytes before 1.6.24, KB after)"

    def option(self, value: Value, ctx: HostContext) -> tuple[str, str] | None:
        kb = int(value)
        have = ctx.versions.get("memcached")
        if have is not None and have < self.KB_SINCE:
            return self.key, str(kb * 1024)
        return self.key, str(kb)


def memcached_argv_options(options: dict[str, str]) -> list[str]:
    if not options:
        return []
    return ["-o", ",".join(k if v == "" else f"{k}={v}" for k, v in options.items())]
