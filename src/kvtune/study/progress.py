"""What the study's parts share on the terminal: the progress bar, number formatting, and
JSON-able records. (The context that opens the journal is `kvtune.host.context`.)"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kvtune.store import dumps


def progress(console: Console) -> Progress:
    """A live bar on a terminal; nothing elsewhere (a log keeps the phases' own lines, and a
    transient bar would leave blank lines in it)."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True,
                    disable=not console.is_terminal)


def jsonable(obj: Any) -> Any:
    return json.loads(dumps(obj))
