"""What kvtune's commands share on the command line: one name for one thing on every
command (an output path is `-o/--output`, a results database `--storage`, a library
`--library`, printing JSON `--json`), older spellings accepted as hidden aliases; command
lists in --help whose summaries are whole sentences; consoles as wide as the terminal
(or COLUMNS) says."""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from kvtune.errors import UserError
from kvtune.quantities import is_count
from kvtune.safety.text import Console

T = TypeVar("T")

# Canonical spellings (and `--storage`, the parameter's own name); tests/test_cli_names.py
# holds every command to them.
OUTPUT = ("-o", "--output")
LIBRARY = "--library"
JSON = "--json"

STORAGE_HELP = "the results database: a SQLAlchemy URL (default: the study file's storage, " \
               "else sqlite:///results/STUDY.db)"
LIBRARY_HELP = ("the library of past studies: a SQLite file or a database URL (default: "
                "$KVTUNE_LIBRARY, else ~/.local/share/kvtune/library.db)")

PIPED_WIDTH = 160  # a table piped to a file or a CI log, when COLUMNS does not say


def flag(*decls: str, **kw: Any) -> Any:
    """A boolean option shown as a flag in --help (no `<bool>` type column)."""
    return typer.Option(*decls, metavar="", **kw)


def json_flag(help: str = "print JSON (for scripts) instead of the text") -> Any:
    return flag(JSON, help=help)


def alias(*decls: str, **kw: Any) -> Any:
    """An older spelling of an option, still accepted, never shown in --help."""
    return typer.Option(*decls, hidden=True, **kw)


def merged(value: T | None, old: T | None, name: str, old_name: str) -> T | None:
    """An option's value given by its name or by its older spelling (`alias`); both,
    with different values, is a mistake said as one."""
    if value is not None and old is not None and value != old:
        raise UserError(f"{old_name} is another name for {name}: give one of them")
    return value if value is not None else old


def width(stream: Any) -> int | None:
    """The width a console writes at: COLUMNS when set, else the terminal's, else (piped)
    PIPED_WIDTH, so that a table stays readable in a log."""
    columns = os.environ.get("COLUMNS", "")
    if is_count(columns) and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return None  # rich asks the terminal
    except (AttributeError, ValueError):
        pass
    return PIPED_WIDTH


def sane_size_environment() -> None:
    """COLUMNS or LINES that is not a count in ASCII digits is dropped from the environment,
    as if unset: rich reads each with `isdigit()` then `int()`, and COLUMNS=\u00b2 or
    LINES=\u00b3 was a traceback before kvtune said anything."""
    for name in ("COLUMNS", "LINES"):
        if not is_count(os.environ.get(name, "0")):
            del os.environ[name]


sane_size_environment()
out = Console(width=width(sys.stdout))
err = Console(stderr=True, width=width(sys.stderr))


def fit_consoles() -> None:
    """Set the consoles up for this invocation, as consoles made now would be: its width
    (COLUMNS, the streams), colours (NO_COLOR, FORCE_COLOR, TERM) and streams. A process that
    runs `main` more than once (the tests, in process), or one forked from a process that
    imported kvtune under another environment, writes as a fresh `kvtune` would. In place:
    modules hold these two objects."""
    sane_size_environment()
    Console.__init__(out, width=width(sys.stdout))
    Console.__init__(err, stderr=True, width=width(sys.stderr))


def summary(cmd: Any) -> str:
    """A command's summary in a command list: its short help, else the first sentence of
    its help, whole."""
    if cmd.short_help:
        return inspect.cleandoc(cmd.short_help)
    text = " ".join(inspect.cleandoc(cmd.help or "").split("\n\n", 1)[0].split())
    end = re.search(r"[.?!](\s|$)", text)
    return text[:end.end()].strip() if end else text


class WithHiddenArguments(TyperCommand):
    """A command whose hidden arguments (an older spelling, such as a positional file now
    given with -o) stay out of its usage line as out of its help."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        rv = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if not getattr(param, "hidden", False):
                rv.extend(param.get_usage_pieces(ctx))
        return rv


class Commands(TyperGroup):
    """A command group whose --help lists each command with its summary whole (`summary`,
    wrapped to the terminal), never cut with '...'."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            rows.append((name, summary(cmd)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
