"""The context a study runs the host in: it opens the journal, lets the session set the host
up, and restores everything on the way out, whatever happens (an error, Ctrl-C, SIGTERM,
SIGHUP)."""

from __future__ import annotations

import contextlib
import os
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
    with _signals(), Journal(study=study) as journal, _beside_the_load(session):
        session.journal = journal
        session.setup_host()
        yield


@contextlib.contextmanager
def _beside_the_load(session: Session) -> Iterator[None]:
    """kvtune's own threads (telemetry, the server's stats sampler) run on the load's CPUs
    while the study measures, not on the server's: there they would be the other task that
    disturbs the server's windows. The process's affinity is put back afterwards."""
    load = session.spec.load
    # Only when the server is pinned too (target.cpus): a server started without taskset
    # inherits kvtune's affinity.
    pinned = bool(session.spec.target.cpus)
    cpus = load.cpus if load is not None and not load.host and pinned else None
    before: set[int] | None = None
    if cpus:
        from kvtune.cpulist import parse_cpus

        try:
            before = os.sched_getaffinity(0)
            os.sched_setaffinity(0, set(parse_cpus(cpus)))
        except (OSError, ValueError):
            before = None
    try:
        yield
    finally:
        if before is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, before)
