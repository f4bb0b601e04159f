"""Text that came from outside (a config file, a trace, a server's answer, a path, an
error message quoting them) on its way to a terminal: terminal control sequences and
control characters are removed (`plain`), and rich markup is escaped (`for_markup`), so a
`[/bold]` in a redis.conf cannot break the output, a `[link=...]` cannot render as a link
and an ESC sequence cannot rewrite the screen."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console as _RichConsole
from rich.markup import escape

# ANSI/VT escape sequences (CSI, OSC with its terminator, two-byte ESC forms), then any
# other C0/C1 control character but tab and newline.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b[@-_]?"
                      r"|\x9b[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: object) -> str:
    """`text` without terminal escape sequences and control characters (tab and newline
    kept)."""
    return _CONTROL.sub("", _ESCAPES.sub("", str(text)))


def one_line(text: object) -> str:
    """`plain(text)` on one line (newlines and tabs as spaces)."""
    return " ".join(plain(text).split())


def for_markup(text: object) -> str:
    """`plain(text)` with rich markup escaped: safe inside a string rich renders."""
    return escape(plain(text))


class Console(_RichConsole):
    """rich's Console whose `print` removes terminal escape sequences and control
    characters from every string it is given, before markup is read (kvtune's own markup
    has neither). Text from outside inside a markup string still needs `for_markup`."""

    def print(self, *objects: Any, **kw: Any) -> None:
        super().print(*(plain(o) if isinstance(o, str) else o for o in objects), **kw)
