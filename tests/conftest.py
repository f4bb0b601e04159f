"""Test fixtures: real servers on loopback, a private journal, and a guard that fails any
test leaving a managed host knob changed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from fleet_fixtures import pg_url, postgres_server  # noqa: F401 (fixtures for the fleet tests)

from kvtune.host.debugfs import debugfs_mounted
from kvtune.host.facts import collect
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import HostContext

REPO = Path(__file__).resolve().parents[1]
KVLOAD = REPO / "kvload" / "target" / "release" / "kvload"


def _host_snapshot() -> dict[str, Any]:
    ctx = HostContext(collect())
    snap: dict[str, Any] = {}
    for k in catalog.CATALOG.values():
        if k.scope == "host":
            snap[k.name] = k.applier.current(ctx)
    # A study mounts debugfs for a knob that lives there; nothing may leave it mounted.
    snap["debugfs_mounted"] = debugfs_mounted()
    cg = Path("/sys/fs/cgroup")
    snap["cgroups"] = sorted(str(p) for p in cg.glob("*/kvtune-*")) + sorted(
        str(p) for p in cg.glob("kvtune-*"))
    return snap


@pytest.fixture(autouse=True)
def host_unchanged(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every test gets its own journal file; afterwards every managed knob must read what it
    read before, no kvtune cgroup may be left, and no journal may be left behind."""
    journal = tmp_path_factory.mktemp("journal") / "journal.json"
    monkeypatch.setenv("KVTUNE_JOURNAL", str(journal))
    # The host lock and the list of open journals (kvtune.host.lock) live per test too.
    monkeypatch.setenv("KVTUNE_RUN_DIR", str(tmp_path_factory.mktemp("run")))
    # No test reads or writes the user's library of past studies (kvtune.library); the
    # library's own tests point KVTUNE_LIBRARY at a file of their own.
    monkeypatch.setenv("KVTUNE_LIBRARY", "off")
    before = _host_snapshot()
    yield journal
    after = _host_snapshot()
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert not changed, f"the test left managed host knobs changed: {changed}"
    assert not journal.exists(), f"the test left a journal at {journal} (host not restored)"


@pytest.fixture
def kvload_bin() -> str:
    if not KVLOAD.exists():
        pytest.fail(f"{KVLOAD} is missing: run `make kvload` (make test builds it)")
    return str(KVLOAD)


def _require(binary: str) -> str:
    path = shutil.which(binary)
    if not path:
        pytest.fail(f"{binary} is not installed: run `make setup` (make test installs it)")
    return path


@pytest.fixture
def memcached_bin() -> str:
    return _require("memcached")


@pytest.fixture
def redis_bin() -> str:
    return _require("redis-server")


@pytest.fixture
def valkey_bin() -> str:
    return _require("valkey-server")  # bookworm-backports (make setup adds the suite)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def is_root() -> bool:
    return os.geteuid() == 0
