"""`target.args`, inline application knobs and `load.extra_args` against the allow-lists
each target and the load driver declare (an allow-list, not a deny-list: a flag nobody
thought about is refused). A refused flag names the reason: it changes where the server
listens, daemonizes it, or makes it read or write files."""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _memcached() -> Any:
    from kvtune.targets.memcached import MemcachedTarget

    return MemcachedTarget


def _redis() -> Any:
    from kvtune.targets.redis import RedisTarget

    return RedisTarget


def _listing(names: Any) -> str:
    return ", ".join(sorted(names))


def memcached_flag_pattern(flag: str) -> str | None:
    """The value pattern of a safe memcached flag (None: takes no value); raises
    ValueError naming the reason for any other flag."""
    t = _memcached()
    if flag in t.SAFE_FLAGS:
        return t.SAFE_FLAGS[flag]
    if flag in t.UNSAFE_FLAGS:
        raise ValueError(f"memcached {flag} is refused: it {t.UNSAFE_FLAGS[flag]}")
    raise ValueError(f"memcached flag {flag!r} is not on kvtune's list of safe flags "
                     f"({_listing(f for f in t.SAFE_FLAGS if f.startswith('--'))} and their "
                     "short forms)")


def memcached_option_pattern(key: str) -> str | None:
    """The value pattern of a safe `-o` option (None: a bare option); ValueError else."""
    t = _memcached()
    if key in t.SAFE_OPTIONS:
        return t.SAFE_OPTIONS[key]
    for prefix, why in t.UNSAFE_OPTIONS.items():
        if key.startswith(prefix):
            raise ValueError(f"memcached -o {key} is refused: {why}")
    raise ValueError(f"memcached -o option {key!r} is not on kvtune's list of safe options "
                     f"({_listing(t.SAFE_OPTIONS)})")


def redis_directive_pattern(name: str) -> str:
    t = _redis()
    if name in t.SAFE_DIRECTIVES:
        return t.SAFE_DIRECTIVES[name]
    if name in t.UNSAFE_DIRECTIVES:
        raise ValueError(f"Redis directive {name!r} is refused: it {t.UNSAFE_DIRECTIVES[name]}")
    raise ValueError(f"Redis directive {name!r} is not on kvtune's list of safe directives "
                     f"({_listing(t.SAFE_DIRECTIVES)})")


def check_value(value: str, pattern: str, what: str) -> None:
    if not re.fullmatch(pattern, value):
        raise ValueError(f"{what}: {value!r} is not a valid value (expected {pattern}); "
                         "values may not add arguments or options")


def _word(v: Any, i: int) -> str:
    if not isinstance(v, str):
        raise ValueError(f"item {i}: {v!r} is not a string")
    if _CONTROL.search(v):
        raise ValueError(f"item {i}: {v!r} holds a control character")
    if len(v) > 4096:
        raise ValueError(f"item {i}: {len(v)} characters is too long for an argument")
    return v


def check_target_args(kind: str, args: list[str]) -> None:
    """Raises ValueError naming the first refused item of target.args."""
    if not args:
        return
    if kind == "memcached":
        _memcached_args(args)
    elif kind == "redis":
        _redis_args(args)
    else:
        raise ValueError(f"the {kind} target takes no args")


def _split_long(word: str) -> tuple[str, str | None]:
    if word.startswith("--") and "=" in word:
        flag, value = word.split("=", 1)
        return flag, value
    return word, None


def _memcached_args(args: list[str]) -> None:
    i = 0
    while i < len(args):
        word = _word(args[i], i)
        if not word.startswith("-"):
            raise ValueError(f"item {i}: {word!r} is not a flag (memcached takes no "
                             "positional arguments)")
        flag, attached = _split_long(word)
        try:
            pattern = memcached_flag_pattern(flag)
        except ValueError as e:
            raise ValueError(f"item {i}: {e}") from None
        value, i = _flag_value(args, i, flag, attached, pattern)
        if value is None or pattern is None:
            continue
        if pattern == "options":
            check_options_list(value, f"item {i - 1}: {flag}")
        else:
            check_value(value, pattern, f"item {i - 1}: {flag}")


def _flag_value(args: list[str], i: int, flag: str, attached: str | None,
                pattern: str | None) -> tuple[str | None, int]:
    """The value of the flag at `args[i]` (attached as `--flag=v`, or the next item) and the
    index after it; None for a flag that takes no value."""
    if pattern is None:
        if attached is not None:
            raise ValueError(f"item {i}: {flag} takes no value")
        return None, i + 1
    if attached is not None:
        return attached, i + 1
    if i + 1 >= len(args):
        raise ValueError(f"item {i}: {flag} needs a value")
    return _word(args[i + 1], i + 1), i + 2


def check_options_list(value: str, what: str) -> None:
    """A memcached `-o a=b,c` value: every option safe, every value its pattern."""
    for part in value.split(","):
        key, sep, v = part.partition("=")
        try:
            pattern = memcached_option_pattern(key)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        if pattern is None:
            if sep:
                raise ValueError(f"{what}: -o {key} takes no value")
        else:
            check_value(v, pattern, f"{what}: -o {key}")


def _redis_args(args: list[str]) -> None:
    i = 0
    while i < len(args):
        word = _word(args[i], i)
        if not word.startswith("--"):
            raise ValueError(f"item {i}: {word!r} is not a --directive (a configuration "
                             "file or positional argument is refused)")
        try:
            pattern = redis_directive_pattern(word[2:])
        except ValueError as e:
            raise ValueError(f"item {i}: {e}") from None
        if i + 1 >= len(args):
            raise ValueError(f"item {i}: {word} needs a value")
        check_value(_word(args[i + 1], i + 1), pattern, f"item {i + 1}: {word}")
        i += 2


def check_extra_args(args: list[str]) -> None:
    """load.extra_args against the load driver's allow-list (measurement-only flags)."""
    from kvtune.load.kvload import SAFE_EXTRA_ARGS

    i = 0
    while i < len(args):
        word = _word(args[i], i)
        flag, attached = _split_long(word)
        if flag not in SAFE_EXTRA_ARGS:
            raise ValueError(
                f"item {i}: {flag!r} is refused: load.extra_args takes only the kvload flags "
                f"that change the measurement ({_listing(SAFE_EXTRA_ARGS)}); the server, "
                "the output files and the workload come from the study file's typed keys")
        pattern = SAFE_EXTRA_ARGS[flag]
        value, i = _flag_value(args, i, flag, attached, pattern)
        if value is None or pattern is None:
            continue
        check_value(value, pattern, f"item {i - 1}: {flag}")
