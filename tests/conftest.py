"""Test fixtures and the three tiers.

Tiers (README "Tests"; `make test-unit`, `make test-integration`, `make test-e2e`):
- unit: no process started, no server binary; the CLI is called in process (support.cli).
  Runs in parallel (pytest-xdist).
- integration: real servers, kvload, PostgreSQL, sshd in a network namespace, a fresh
  `python -m kvtune`. One at a time (servers and load are pinned to CPUs).
- e2e: whole studies, capacity searches, a fleet, the walk-through. One at a time.

A test's tier comes from what it touches: the fixtures of tests/support (a server, kvload,
PostgreSQL, a load host) put it in the integration tier, a module or test marked `e2e` is in
that tier, and everything else is a unit test. An audit hook watches every test: a unit test
that starts a process fails, naming what it started, so a test cannot sit in the wrong tier.

The host guard: every managed host knob, kvtune's cgroups and debugfs's mount must read after
a test what they read before it, and no journal may be left. The knobs are read again after a
test only when the test could have changed them (it started a process, or wrote, created or
removed a file under /proc or /sys, or called into libc through ctypes, as the debugfs mount
does); each module ends with a full comparison too.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support.postgres import pg_url, postgres_server  # noqa: F401 (fixtures)
from support.servers import (  # noqa: F401 (fixtures)
    KVLOAD,
    kvload_bin,
    memcached_bin,
    redis_bin,
    shared_memcached,
    valkey_bin,
)

from kvtune.host.debugfs import debugfs_mounted
from kvtune.host.facts import collect
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import HostContext
from kvtune.targets import host_context

REPO = Path(__file__).resolve().parents[1]
TIERS = ("unit", "integration", "e2e")

# Fixtures that start or need a real process: a test using one is in the integration tier.
INTEGRATION_FIXTURES = frozenset({
    "kvload_bin", "memcached_bin", "redis_bin", "valkey_bin", "shared_memcached",
    "postgres_server", "pg_url", "load_host",
})


def _warm() -> None:
    """What the session itself starts before any test runs, once per process: the catalog's
    read-only debugfs probe, the version probes of the server binaries on PATH (host_context
    is cached), their banner checks (kvtune.safety.binary remembers an unchanged file) and
    the build probes behind the knobs' availability (cached per binary), so that no unit
    test is the first to start them."""
    from kvtune.errors import UserError
    from kvtune.safety.binary import find_server
    from kvtune.targets import kinds, target_class
    from kvtune.targets.base import ServerTarget

    host_context()
    for kind in kinds():
        cls = target_class(kind)
        if issubclass(cls, ServerTarget):
            with contextlib.suppress(UserError):  # not installed: the tests that need it say so
                find_server(cls.default_binary, kind, cls.default_binary, cls.version_args,
                            cls.version_banner)
    ctx = host_context()
    for knob in catalog.CATALOG.values():  # and each knob's availability (a build's probe)
        with contextlib.suppress(Exception):  # a knob that cannot say is its tests' to find
            knob.applier.check(ctx)


_warm()


# -- tiers -------------------------------------------------------------------------------


def tier_of(item: pytest.Item) -> str:
    marked = [t for t in TIERS if item.get_closest_marker(t) is not None]
    if "e2e" in marked:
        return "e2e"
    if "integration" in marked or INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "integration"
    return "unit"


PARALLEL = ("parallel: an integration or e2e test that measures nothing on this host and "
            "changes no host knob (a synthetic target, stored studies): `make test` runs it "
            "beside the unit tier, in parallel, the tests of its module in one worker")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", PARALLEL)
    # Given by pytest_collection_modifyitems below; pytest-xdist declares it, and a run
    # without xdist (`-p no:xdist`, for a profiler) must not fail --strict-markers on it.
    config.addinivalue_line("markers", "xdist_group(name): the tests pytest-xdist's "
                            "--dist loadgroup sends to one worker")
    _sqlite_without_fsync()


def _sqlite_without_fsync() -> None:
    """The SQLite databases this test process opens (the unit tier's in-process studies and
    their readers) are written without fsync (PRAGMA synchronous=OFF): what a test reads
    back is the same, only a power cut could lose it, and no test here is about that. A
    40-trial synthetic study commits about 1,200 times: a third of its time went to fsync.
    Processes a test starts (`python -m kvtune`, a worker killed and resumed) keep SQLite's
    default, as users run it. The setting is per connection: nothing is stored with it."""
    import sqlalchemy as sa
    from sqlalchemy import event

    @event.listens_for(sa.engine.Engine, "connect")
    def _no_fsync(dbapi_connection: Any, _record: Any) -> None:
        if type(dbapi_connection).__module__ == "sqlite3":
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA synchronous=OFF")
            cur.close()


# First among the plugins: pytest-xdist's worker reads the `xdist_group` marks in its own
# pytest_collection_modifyitems (it appends "@group" to each node id, which is what
# --dist loadgroup schedules by). Were ours to run after it, the marks given here would
# be read by nobody, and every test of a parallel module would be scheduled alone: each
# worker would then set up the module's fixtures (the bad-inputs corpus ran twice, on both
# workers, 90 s each).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        item.stash[TIER] = tier
        if item.get_closest_marker(tier) is None:
            item.add_marker(getattr(pytest.mark, tier))
        item.user_properties.append(("tier", tier))  # in the JUnit file (scripts/slowest.py)
        if tier != "unit" and item.get_closest_marker("parallel") is not None:
            # One worker runs a module's parallel tests (pytest-xdist's --dist loadgroup): its
            # module-scoped servers start once, and its tests do not run beside each other.
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module
                                                    else item.nodeid))
    # The long parallel groups first, so that the unit tests fill the other workers around
    # them instead of waiting at the end for the last group.
    items.sort(key=lambda it: it.stash[TIER] == "unit"
               or it.get_closest_marker("parallel") is None)


TIER = pytest.StashKey[str]()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """On a pytest-xdist worker scheduling by group, a test given an `xdist_group` above
    carries its group in its node id, or it fails: the group would not have been scheduled
    as one (each worker would set up the module's fixtures and run its tests beside each
    other's)."""
    if getattr(item.config.option, "loadgroup", False) \
            and item.get_closest_marker("xdist_group") is not None \
            and "@" not in item.nodeid.rsplit("]", 1)[-1]:
        pytest.fail("pytest-xdist did not group this test (its xdist_group mark came too late, "
                    "or this pytest and pytest-xdist do not agree on node ids, "
                    "pytest-dev/pytest-xdist#1386): its module's tests may run on two workers",
                    pytrace=False)


# -- the audit hook: what a test starts and what it may have written -----------------------

_HOST_ROOTS = ("/proc", "/sys")
_STARTS = {"subprocess.Popen": 1, "os.exec": 1, "os.posix_spawn": 1, "os.spawn": 2,
           "os.system": 0, "os.fork": None, "os.forkpty": None}
_FS_EVENTS = {"os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.symlink", "os.chmod",
              "os.chown", "os.truncate", "shutil.rmtree", "shutil.move", "shutil.copyfile"}


class _Watch:
    """What the running test did, as the audit hook saw it (this process only)."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.host_touched = False
        self.host_written = False  # by this process itself (not through a process it started)
        self.armed = False

    def reset(self) -> None:
        self.started.clear()
        self.host_touched = False
        self.host_written = False


WATCH = _Watch()


def _under_host(path: object) -> bool:
    try:
        p = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
    except (TypeError, ValueError):
        return False
    if not p:
        return False
    p = os.path.abspath(p)
    return any(p == r or p.startswith(r + "/") for r in _HOST_ROOTS)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not WATCH.armed:
        return
    try:
        if event in _STARTS:
            WATCH.host_touched = True
            i = _STARTS[event]
            argv = args[i] if i is not None and len(args) > i else event
            words = [os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple)) \
                else [os.fsdecode(argv) if isinstance(argv, (str, bytes)) else str(argv)]
            WATCH.started.append(" ".join(words)[:300])
        elif event == "open":
            mode, flags = (args[1] if len(args) > 1 else None), (args[2] if len(args) > 2 else 0)
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                bool(isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
            if writes and _under_host(args[0]):
                WATCH.host_touched = WATCH.host_written = True
        elif event in _FS_EVENTS:
            if any(_under_host(a) for a in args[:2]):
                WATCH.host_touched = WATCH.host_written = True
        elif event == "ctypes.call_function":  # kvtune's mount(2) and unshare(2) calls
            WATCH.host_touched = WATCH.host_written = True
    except Exception:  # the hook must never break the code under test
        WATCH.host_touched = WATCH.host_written = True


sys.addaudithook(_audit)


# Programs that change the host whatever a test asks of them (their arguments say how).
_HOST_CHANGERS = {"sysctl": ("-w", "-p", "--write", "--load", "--system"),
                  "tuned-adm": ("profile", "off"), "mount": (), "umount": (),
                  "cpupower": ("frequency-set", "idle-set", "set")}


def _changes_host(command: str) -> bool:
    """Whether a started command line (as the audit hook records it) changes the host."""
    words = command.split()
    if not words:
        return False
    name = os.path.basename(words[0])
    if name not in _HOST_CHANGERS:
        return False
    verbs, args = _HOST_CHANGERS[name], words[1:]
    if not verbs:  # mount, umount: any operand (alone they list)
        return any(not w.startswith("-") for w in args)
    return any(w in verbs or (name == "sysctl" and "=" in w) for w in args)


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


def _unchanged(before: dict[str, Any], after: dict[str, Any], what: str) -> None:
    changed = {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}
    assert not changed, f"{what} left managed host knobs changed: {changed}"


@pytest.fixture(scope="module")
def _module_host() -> Any:
    """The host as the module found it; compared again when the module is done."""
    state = {"snap": _host_snapshot()}
    yield state
    WATCH.armed = False
    _unchanged(state["snap"], _host_snapshot(), "a test of this module")


@pytest.fixture(autouse=True)
def host_unchanged(request: pytest.FixtureRequest, _module_host: dict[str, Any],
                   tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every test gets its own journal file; afterwards every managed knob must read what it
    read before, no kvtune cgroup may be left, and no journal may be left behind; a unit test
    must not have started a process."""
    journal = tmp_path_factory.mktemp("journal") / "journal.json"
    monkeypatch.setenv("KVTUNE_JOURNAL", str(journal))
    # The host lock and the list of open journals (kvtune.host.lock) live per test too.
    monkeypatch.setenv("KVTUNE_RUN_DIR", str(tmp_path_factory.mktemp("run")))
    # No test reads or writes the user's library of past studies (kvtune.library); the
    # library's own tests point KVTUNE_LIBRARY at a file of their own.
    monkeypatch.setenv("KVTUNE_LIBRARY", "off")
    WATCH.reset()
    WATCH.armed = True
    yield journal
    WATCH.armed = False
    tier = request.node.stash.get(TIER, "unit")
    started, touched = list(WATCH.started), WATCH.host_touched
    written = WATCH.host_written
    WATCH.reset()
    if touched:
        after = _host_snapshot()
        before, _module_host["snap"] = _module_host["snap"], after
        _unchanged(before, after, "the test")
    assert not journal.exists(), f"the test left a journal at {journal} (host not restored)"
    if tier != "unit" and request.node.get_closest_marker("parallel") is not None:
        # A parallel test runs beside others: a host write, even one put back, would be
        # seen half-way by their host guard (and blamed on them).
        changers = [c for c in started if _changes_host(c)]
        assert not written and not changers, (
            "a test marked `parallel` changed the host "
            + (f"(started {changers[0]!r})" if changers else "(wrote under /proc or /sys, "
               "or called libc)") + ": it runs one at a time, not `parallel`")
    if tier != "unit" or not (started or touched):
        return
    what = (f"started {len(started)} process(es), first: {started[0]!r}" if started else
            "wrote to the host (under /proc or /sys, or through libc)")
    if os.environ.get("KVTUNE_TEST_TIER_LOG"):  # finding the tier of many tests at once
        with open(os.environ["KVTUNE_TEST_TIER_LOG"], "a") as log:
            log.write(f"{request.node.nodeid}\t{what}\n")
        return
    # The unit tier runs in parallel: a test that changes the host, even one that puts it
    # back, would be seen half-way by the host guard of a test running beside it.
    pytest.fail(f"a unit test {what}: use a fixture of tests/support (which puts it in the "
                "integration tier) or mark it `integration` (run one at a time)", pytrace=False)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def is_root() -> bool:
    return os.geteuid() == 0
