"""Error types. Each says what went wrong, where, and what to do; the CLI maps them to exit
codes."""

from __future__ import annotations

from typing import Any


class KvtuneError(Exception):
    """Base of all errors kvtune reports to a person (never with a stack trace)."""

    exit_code = 1


class UserError(KvtuneError):
    """Bad input: a malformed study file, an unknown knob, an out-of-range value,
    an unreachable server. Exit code 2; nothing has been applied to the host."""

    exit_code = 2

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []

    def __str__(self) -> str:
        head = super().__str__()
        if not self.problems:
            return head
        return head + "\n" + "\n".join(f"  - {p}" for p in self.problems)


class HarnessError(KvtuneError):
    """A fault of the measuring harness (kvload missing, port taken by another process,
    host write refused). It stops the study rather than poisoning results. Exit code 3
    (1 is "ran, no significant recommendation")."""

    exit_code = 3


class TrialFailed(Exception):
    """The configuration under test made the server fail (would not start, exited, hung).
    Ends that trial as failed; the study goes on."""

    def __init__(self, reason: str, stderr: str = "",
                 raw: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.stderr = stderr
        self.raw = raw or {}  # what the failed measurement recorded (a search's steps)


class StudyInterrupted(KvtuneError):
    """Ctrl-C or SIGTERM: the study unwinds, restores the host and exits."""

    exit_code = 130
