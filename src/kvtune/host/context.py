"""The context a study runs the host in: it opens the journal, lets the session set the host
up, and restores everything on the way out, whatever happens (an error, Ctrl-C, SIGTERM,
SIGHUP)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from kvtune.errors import StudyInterrupted
from kvtune.host.journal import Journal

if TYPE_CHECKING:
    from kvtune.measure.session import Session


# The signals that end a study the way Ctrl-C does: a kill (SIGTERM) and a closed terminal
# or ssh session (SIGHUP). SIGKILL cannot be caught: `kvtune restore` repairs after it.
UNWINDING = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM and SIGHUP unwind the study like Ctrl-C, so the journal restores the host."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise StudyInterrupted(f"stopped by signal {signal.Signals(signum).name}")

    old = {s: signal.signal(s, handler) for s in UNWINDING}
    try:
        yield
    except KeyboardInterrupt:
        raise StudyInterrupted("interrupted (Ctrl-C)") from None
    finally:
        for s, h in old.items():
            signal.signal(s, h)


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
