"""Generic scanners for argument lists that come from untrusted input: `target.args`, inline
application knobs and `load.extra_args`. Each target and each load driver owns its
allow-list and calls these (an allow-list, not a deny-list: a flag nobody thought about is
refused). A refused flag names the reason: it changes where the server listens, daemonizes
it, or makes it read or write files."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def listing(names: Any) -> str:
    return ", ".join(sorted(names))



def check_value(value: str, pattern: str, what: str) -> None:
    # ASCII: `\d` or `\w` in a pattern would take any script's digits and letters, which
    # no server or kvload reads as such.
    if not re.fullmatch(pattern, value, flags=re.ASCII):
        raise ValueError(f"{what}: {value!r} is not a valid value (expected {pattern}); "
                         "values may not add arguments or options")


def word(v: Any, i: int) -> str:
    if not isinstance(v, str):
        raise ValueError(f"item {i}: {v!r} is not a string")
    if _CONTROL.search(v):
        raise ValueError(f"item {i}: {v!r} holds a control character")
    if len(v) > 4096:
        raise ValueError(f"item {i}: {len(v)} characters is too long for an argument")
    return v


def split_long(word: str) -> tuple[str, str | None]:
    if word.startswith("--") and "=" in word:
        flag, value = word.split("=", 1)
        return flag, value
    return word, None


def flag_value(args: list[str], i: int, flag: str, attached: str | None,
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
    return word(args[i + 1], i + 1), i + 2




def check_flag_list(args: list[str], pattern_of: Callable[[str], str | None],
                    check_special: Callable[[str, str, str], bool] | None = None,
                    positional: str = "no positional arguments") -> None:
    """`--flag value` / `--flag=value` / bare-flag lists: every flag on the allow-list that
    `pattern_of` consults (it raises ValueError naming the reason), every value its pattern
    (`check_special(value, pattern, what)` may handle a pattern of its own and return
    True). Raises ValueError naming the first refused item."""
    i = 0
    while i < len(args):
        w = word(args[i], i)
        if not w.startswith("-"):
            raise ValueError(f"item {i}: {w!r} is not a flag ({positional})")
        flag, attached = split_long(w)
        try:
            pattern = pattern_of(flag)
        except ValueError as e:
            raise ValueError(f"item {i}: {e}") from None
        value, i = flag_value(args, i, flag, attached, pattern)
        if value is None or pattern is None:
            continue
        if check_special is not None and check_special(value, pattern, f"item {i - 1}: {flag}"):
            continue
        check_value(value, pattern, f"item {i - 1}: {flag}")
