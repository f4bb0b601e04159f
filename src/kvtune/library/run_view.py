"""What the library reads of a running study: the attributes of `kvtune.study.run.StudyRun`
that the warm start and the library's record use, as a Protocol, so that the library
names no module above it (the run imports the library, never the other way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import optuna
    from rich.console import Console

    from kvtune.measure.evaluator import Evaluation, Evaluator
    from kvtune.measure.session import Session
    from kvtune.metrics import Direction
    from kvtune.space import Space
    from kvtune.spec import StudySpec
    from kvtune.store import Store


class WarmRecord(Protocol):
    """What the record reads of the run's warm start: what it did (`WarmStart.record`)."""

    record: dict[str, Any]


class Run(Protocol):
    """A study being run, as the library sees it."""

    spec: StudySpec
    console: Console
    session: Session
    space: Space | None
    store: Store
    direction: Direction
    metric: str
    evaluator: Evaluator
    study: optuna.Study | None
    baseline_eval: Evaluation | None
    fingerprint: dict[str, Any]
    fp_key: str

    @property
    def warm(self) -> WarmRecord:
        """The run's warm start (the record reads what it did)."""
        ...

    @property
    def exclusive(self) -> bool:
        """Whether this process has the study to itself (no fleet)."""
        ...
