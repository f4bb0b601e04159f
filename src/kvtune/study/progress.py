"""What the study's parts share on the terminal: the progress bar, number formatting, and
JSON-able records. (The context that opens the journal is `kvtune.host.context`.)"""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kvtune.store import dumps


def progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                    TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True)


def fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def jsonable(obj: Any) -> Any:
    return json.loads(dumps(obj))
