"""What the study's parts share: the terminal progress bar, number formatting, and the
context that opens the journal and restores the host whatever happens."""

from __future__ import annotations

import contextlib
import json
import math
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from kvtune.errors import StudyInterrupted
from kvtune.host.journal import Journal
from kvtune.runner import Session
from kvtune.store import dumps


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM unwinds the study like Ctrl-C, so the journal restores the host."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise StudyInterrupted(f"stopped by signal {signal.Signals(signum).name}")

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except KeyboardInterrupt:
        raise StudyInterrupted("interrupted (Ctrl-C)") from None
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def on_host(session: Session, study: str) -> Iterator[None]:
    """Open the journal when the target runs on this host; restore everything on exit."""
    if not session.on_host:
        yield
        return
    with _signals(), Journal(study=study) as journal:
        session.journal = journal
        session.setup_host()
        yield


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
