"""What a study stored, read back as untrusted input: the one way an export, a report,
`show` or a prediction reads the study file kept with a study.

A results database is input like a study file (another worker's, a copied file, a
tampered one): the study file stored with the study (`spec`) passes the study file's own
schema and the registries' checks of its target and load (`target.args`, `load.extra_args`:
`kvtune.study.loader.check_stored`) before anything uses it, and the run's one-line
description of its workload is plain text of bounded length. A stored study that fails is
refused (UserError, exit 2) naming the study, the storage and the key; nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvtune.errors import UserError
from kvtune.spec import StudySpec

MAX_TEXT = 2000
_KNOB = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")  # a knob's name, as a study file's


@dataclass(frozen=True)
class StoredStudy:
    """A stored study file, checked: `data` its validated form as a document (the fields
    it set, normalised; its masked storage URL kept as stored), `spec` its validated form
    (None when the study stored none)."""

    data: dict[str, Any]
    spec: StudySpec | None
    workload_text: str | None


def plain_text(value: Any, what: str, where: str, limit: int = MAX_TEXT) -> str | None:
    """`value` when it is text without control characters (a newline included) of at most
    `limit` characters, None when absent; UserError naming `what` and `where` otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit or any(
            ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in value):
        raise UserError(f"{where}: the stored {what} is not one line of plain text (the "
                        "results database was changed?); nothing was written")
    return value


def stored_spec(attrs: Mapping[str, Any], study: str, storage: str) -> StoredStudy:
    """The study file stored in `attrs` (an Optuna study's user attributes), checked as
    a study file is (module docstring)."""
    from kvtune.study.loader import check_stored

    where = f"study {study!r} in {storage}"
    raw = attrs.get("spec")
    workload = attrs.get("workload")
    text = plain_text(workload.get("text") if isinstance(workload, Mapping) else None,
                      "workload description", where)
    if not raw:
        return StoredStudy({}, None, text)
    if not isinstance(raw, dict):
        raise UserError(f"{where}: the stored study file is not a mapping (the results "
                        "database was changed?)")
    data = {k: v for k, v in raw.items() if k != "storage"}  # kept masked: not a URL
    spec = check_stored(data, f"{where}: the stored study file")
    # What readers get is the validated form, not the stored text: the forms the schema
    # accepts and normalises (an objective as a bare name or a list, a rate of "50k", a
    # duration of "2s") arrive normalised (a mapping, 50000.0, 2.0 s), as a study file's
    # would; only the fields the study set (no defaults added).
    checked = spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(raw.get("storage"), str):
        checked["storage"] = raw["storage"]
    return StoredStudy(checked, spec, text)


def checked_spec(attrs: Mapping[str, Any], study: str, storage: str) -> dict[str, Any]:
    """`stored_spec`'s document: what the screens hand `kvtune.analysis.load` to read a
    study's stored study file with (that package sits below this one)."""
    return stored_spec(attrs, study, storage).data


def sweep_knob(key: str, study: str, storage: str) -> str:
    """The knob of a stored sweep's result key (`sweep:KNOB`), when it is a knob's name;
    UserError otherwise (a report puts it in headings and plots)."""
    knob = key.split(":", 1)[1] if ":" in key else ""
    if not _KNOB.fullmatch(knob):
        raise UserError(f"study {study!r} in {storage}: a stored sweep's knob is not a "
                        "knob's name (the results database was changed?); nothing was "
                        "written")
    return knob
