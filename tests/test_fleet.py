"""A fleet of workers sharing one study on a real PostgreSQL (issue 15): storage creation
under concurrency, the driver's error, heartbeats (a killed worker, a late one), per-worker
streams, one baseline, the budget across workers, one confirmation, host fingerprints."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
from support.cli import kvtune as run_kvtune
from support.studies import fleet_study

from kvtune.errors import UserError
from kvtune.fleet.claims import (
    Fleet,
    driver_problem,
    fail_stale,
    open_storage,
    worker_seed,
    workers_of,
)
from kvtune.host.facts import collect
from kvtune.host.fingerprint import differences, fingerprint, key

# Workers of a fleet sharing one study on PostgreSQL: the e2e tier. Not `parallel`, though
# the synthetic target measures nothing here: the workers' heartbeats (1 s, stale after 3 s)
# are timing, which the unit tier's workers beside them on 2 CPUs would stretch.
pytestmark = pytest.mark.e2e


REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "bench" / "fleet" / "worker.py"
TrialState = optuna.trial.TrialState

# bench/fleet/worker.py, imported once here (and with it kvtune's study run, Optuna's RDB
# storage, SciPy): each worker is forked from this process, a process of its own that
# measures, beats and can be killed as `python bench/fleet/worker.py` would, without the
# 2 s (10 s on a loaded host) a fresh interpreter spends importing them first.
_spec = importlib.util.spec_from_file_location("kvtune_fleet_worker", WORKER)
assert _spec is not None and _spec.loader is not None
worker_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker_script)
worker_script.preload()


def _study_file(tmp: Path, url: str, trials: int = 8, name: str = "fleet",
                hosts: str | None = None) -> Path:
    # ablation_max_rounds = confirm_rounds: the confirmer's ablation runs its first look only
    # (a fixed design; its sequential looks are tested in test_ablation.py), so a confirming
    # worker's time stays bounded (30 rounds a changed knob: about 120 repetitions more).
    return fleet_study(tmp, url, name, trials, 3, hosts, confirm_top=1, confirm_rounds=5,
                       ablation_max_rounds=5)


def _env() -> dict[str, str]:
    return {**os.environ, "KVTUNE_HEARTBEAT": "1,3", "PYTHONPATH": str(REPO / "src")}


class Forked:
    """`python bench/fleet/worker.py ARGV` as a child forked from this process (its
    environment `env`, its standard output and error in files), with the parts of
    subprocess.Popen the tests use: pid, returncode, communicate."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by communicate)
        self.err = tempfile.TemporaryFile()  # noqa: SIM115
        self.returncode: int | None = None
        gc.collect()  # this process's unreferenced connections closed here, not in the child
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 70
            try:
                # Objects of this process the child never uses are never collected there
                # (a pooled connection closed by the child would end the parent's session).
                gc.freeze()
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(self.out.fileno(), 1)
                os.dup2(self.err.fileno(), 2)
                sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115
                sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
                os.environ.clear()
                os.environ.update(env)
                code = worker_script.main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        self.pid = pid

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG if deadline else 0)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(WORKER), timeout or 0)
            else:
                time.sleep(0.02)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        texts = []
        for f in (self.out, self.err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
            f.close()
        return texts[0], texts[1]

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait()


_STARTED: list[Forked] = []


@pytest.fixture(autouse=True)
def _no_worker_left() -> Iterator[None]:
    """A test that fails midway leaves no worker measuring into the next one."""
    yield
    while _STARTED:
        _STARTED.pop().kill()


def _start(study: Path, worker: str, sleep: float, *extra: str) -> Forked:
    p = Forked([str(study), worker, "--sleep", str(sleep), *extra], _env())
    _STARTED.append(p)
    return p


def _finish(p: Forked, timeout: float = 120) -> dict[str, Any]:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, (out, err[-3000:])
    return dict(json.loads(out.strip().splitlines()[-1]))


def _trials(url: str, name: str = "fleet") -> list[optuna.trial.FrozenTrial]:
    # Through open_storage's creation lock: the workers may be creating the schema now.
    storage = open_storage(url, heartbeat=False)
    try:
        return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)
    finally:
        storage.engine.dispose()


def _results(url: str, key_: str, name: str = "fleet") -> list[dict[str, Any]]:
    eng = sa.create_engine(url)
    with eng.connect() as c:
        rows = c.execute(sa.text("SELECT data FROM kvtune_results WHERE study=:s AND key=:k "
                                 "ORDER BY id"), {"s": name, "k": key_}).all()
    eng.dispose()
    return [json.loads(r[0]) for r in rows]


def _create(url: str, barrier: Any, q: Any) -> None:
    barrier.wait()
    try:
        s = open_storage(url)
        study = optuna.create_study(study_name="s", storage=s, load_if_exists=True)
        q.put(("ok", study._study_id))
    except Exception as e:  # reported to the parent
        q.put(("error", repr(e)))


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_storage_creation_is_idempotent_under_concurrency(backend: str, tmp_path: Path,
                                                          request: pytest.FixtureRequest) -> None:
    """Four processes open the storage of an empty database at once: all succeed, with one
    study (without the lock, 7 to 10 of 10 such races failed on this host)."""
    url = request.getfixturevalue("pg_url") if backend == "postgresql" \
        else f"sqlite:///{tmp_path}/race.db"
    ctx = mp.get_context("fork")
    barrier, q = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_create, args=(url, barrier, q)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert all(r[0] == "ok" for r in got), got
    assert len({r[1] for r in got}) == 1
    eng = sa.create_engine(url)
    with eng.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM studies")).scalar() == 1
        assert c.execute(sa.text("SELECT count(*) FROM version_info")).scalar() == 1
    eng.dispose()
    if backend == "sqlite":  # the creation lock leaves nothing beside the database
        assert sorted(p.name for p in tmp_path.iterdir()) == ["race.db"]


def test_missing_driver_is_named_and_password_masked(pg_url: str) -> None:
    bad = "postgresql+psycopg2://kvtune:s3cret-pw@127.0.0.1:1/x"
    msg = driver_problem(bad)
    assert msg is not None and "'psycopg2'" in msg and "s3cret-pw" not in msg and "***" in msg
    with pytest.raises(UserError) as err:
        open_storage(bad)
    assert "psycopg2" in str(err.value) and "s3cret-pw" not in str(err.value)
    # Plain postgresql:// needs no suffix (psycopg 3), and a wrong password is refused
    # without being shown.
    assert driver_problem(pg_url) is None
    password = sa.engine.make_url(pg_url).password
    assert password
    wrong = pg_url.replace(password, "wrong-pw-123")
    with pytest.raises(UserError) as err:
        open_storage(wrong)
    assert "wrong-pw-123" not in str(err.value) and "***" in str(err.value)


def test_worker_seeds_differ_and_are_stable() -> None:
    assert worker_seed(1, "a") == worker_seed(1, "a") != worker_seed(1, "b")
    assert 0 <= worker_seed(2**40, "x") < 2**32


def test_two_workers_share_one_study(pg_url: str, tmp_path: Path) -> None:
    """Two workers started together: one baseline and noise floor, exactly the budget of
    search trials, no repeated configuration, exactly one confirmation by one worker (the
    other ends saying who), every trial tagged with its worker and host fingerprint."""
    study = _study_file(tmp_path, pg_url, trials=10)
    # 0.15 s a repetition: the two workers' search trials overlap; 0.02 s from the
    # confirmation on (the confirmer's alone: the other ends when it is claimed).
    ps = [_start(study, w, 0.15, "--confirm-sleep", "0.02") for w in ("w1", "w2")]
    outs = {o["worker"]: o for o in (_finish(p) for p in ps)}
    trials = _trials(pg_url)
    kinds = Counter(t.user_attrs.get("kind") for t in trials if t.state.is_finished())
    assert kinds["baseline"] == 1 and kinds["trial"] == 10, kinds
    # A trial fails only in the surface's failure region, never for a fleet reason.
    for t in trials:
        assert t.state == TrialState.COMPLETE or "refuses to start" in t.user_attrs["failed"]
    search = [t for t in trials if t.user_attrs.get("kind") == "trial"]
    assert {t.user_attrs["worker"] for t in search} == {"w1", "w2"}
    assert len({t.user_attrs["fingerprint"] for t in trials}) == 1
    configs = [json.dumps(t.params, sort_keys=True) for t in search]
    assert len(set(configs)) == len(configs), "two workers measured the same configuration"
    assert len(_results(pg_url, "noise_floor")) == 1
    confirmations = _results(pg_url, "confirmation")
    confirmers = {c["confirmed_by"] for c in confirmations if c.get("confirmed_by")}
    assert len(confirmers) == 1, confirmations
    confirmer = confirmers.pop()
    other = ({"w1", "w2"} - {confirmer}).pop()
    assert outs[other]["confirmed_by"] == confirmer and outs[other]["result"] is None
    assert outs[confirmer]["confirmed_by"] == confirmer
    assert outs[confirmer]["result"]["confirmed_by"] == confirmer
    assert outs[confirmer]["result"]["candidates"], outs[confirmer]
    # The confirmer, and only it, ran the ablation after the confirmation.
    assert len(_results(pg_url, "ablation")) == 1
    eng = sa.create_engine(pg_url)
    ws = {w["worker"]: w for w in workers_of(eng, "fleet")}
    eng.dispose()
    assert set(ws) == {"w1", "w2"} and {w["state"] for w in ws.values()} == {"finished"}
    # `kvtune show` lists every worker, its host and its trials, and who confirmed.
    shown = run_kvtune("show", "fleet", "--storage", pg_url, "--json", env=_env(), timeout=120)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    by = {w["worker"]: w for w in data["workers"]}
    assert set(by) == {"w1", "w2"}
    assert sorted(by["w1"]["trials"] + by["w2"]["trials"]) == sorted(t.number for t in trials)
    assert data["confirmation"]["confirmed_by"] == confirmer
    text = run_kvtune("show", "fleet", "--storage", pg_url, env=_env(), timeout=120)
    assert "Workers" in text.stdout and "w1" in text.stdout and "w2" in text.stdout
    assert sa.engine.make_url(pg_url).password not in text.stdout + text.stderr
    # Each repetition records its worker and host fingerprint.
    eng = sa.create_engine(pg_url)
    with eng.connect() as c:
        raws = [json.loads(r[0]) for r in c.execute(sa.text(
            "SELECT raw FROM kvtune_repetitions WHERE study='fleet'"))]
    eng.dispose()
    assert raws and all(r["fleet"]["fingerprint"] == ws["w1"]["fingerprint_key"]
                        for r in raws)


def test_killed_worker_and_late_joiner(pg_url: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Three workers: w1 and w2 start; w1 is killed with SIGKILL while it measures; w3
    joins late. The joiner fails nothing that runs (no 'already finished' crash); w1's
    trial is failed by its stale heartbeat and measured again; the budget is exactly met."""
    study = _study_file(tmp_path, pg_url, trials=10)
    w1 = _start(study, "w1", 0.5, "--no-confirm")
    w2 = _start(study, "w2", 0.5, "--no-confirm")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until w1 measures a search trial
        try:
            ts = _trials(pg_url)
        except KeyError:  # the study does not exist yet
            ts = []
        names = set(ts[0].params) if ts and ts[0].state.is_finished() else None
        # ... with every parameter suggested (a worker killed between ask and suggest
        # leaves a partial trial, whose retry cannot know the rest).
        if names and any(t.state == TrialState.RUNNING and t.user_attrs.get("worker") == "w1"
                         and t.user_attrs.get("kind") is None and t.number > 0
                         and set(t.params) == names for t in ts):
            break
        time.sleep(0.1)
    else:
        pytest.fail("w1 never measured a search trial")
    os.kill(w1.pid, signal.SIGKILL)
    killed = time.monotonic()
    w1.communicate()
    w3 = _start(study, "w3", 0.5, "--no-confirm")
    _finish(w2)
    _finish(w3)
    trials = _trials(pg_url)
    failed = [t for t in trials if t.state == TrialState.FAIL and "failed" not in t.user_attrs]
    assert len(failed) == 1 and failed[0].user_attrs["worker"] == "w1", failed
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == failed[0].number]
    assert len(retried) == 1 and retried[0].state.is_finished()
    # Measured again (it may lie in the surface's failure region: a real failure then).
    assert retried[0].state == TrialState.COMPLETE or \
        "refuses to start" in retried[0].user_attrs["failed"]
    # ... with its original parameters (the retry is a WAITING trial carrying them).
    assert retried[0].params == failed[0].params
    assert retried[0].user_attrs["worker"] in ("w2", "w3")
    done = [t for t in trials if t.state.is_finished() and t.user_attrs.get("kind") == "trial"]
    assert len(done) == 10
    assert "w3" in {t.user_attrs["worker"] for t in done}
    monkeypatch.setenv("KVTUNE_HEARTBEAT", "1,3")  # as the workers ran: 'lost' after 3 s
    # w1 beat last before its kill: 3 s after the kill it is lost, however fast w2 and w3
    # ended (forked workers can end the budget within 3 s of it).
    time.sleep(max(0.0, killed + 3.2 - time.monotonic()))
    eng = sa.create_engine(pg_url)
    states = {w["worker"]: w["state"] for w in workers_of(eng, "fleet")}
    eng.dispose()
    assert states == {"w1": "lost", "w2": "finished", "w3": "finished"}


def test_hosts_with_other_fingerprints_are_refused(pg_url: str, tmp_path: Path) -> None:
    """A worker whose host differs (here: another kernel) is refused, naming the difference."""
    facts = collect()
    mine = fingerprint(facts, "synthetic", None)
    other = {**mine, "kernel": "5.10.0-other"}
    assert key(mine) != key(other) and differences(mine, other) == [
        f"kernel: {facts.kernel} vs 5.10.0-other"]
    storage = open_storage(pg_url)
    Fleet(storage.engine, "fleet", "elsewhere").register(other, key(other))
    study = _study_file(tmp_path, pg_url, trials=2)
    p = _start(study, "here", 0.0)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, (out, err)
    msg = json.loads(out.strip().splitlines()[-1])["error"]
    assert "elsewhere" in msg and "5.10.0-other" in msg and "never compared" in msg


def test_cli_workers_on_sqlite(tmp_path: Path) -> None:
    """`kvtune tune --worker NAME` twice at once on one SQLite file (workers on one machine):
    both end, one baseline, the budget met, one confirmation."""
    url = f"sqlite:///{tmp_path}/fleet.db"
    study = _study_file(tmp_path, url, trials=6)
    ps = [subprocess.Popen([sys.executable, "-m", "kvtune", "tune", str(study), "--worker", w,
                            "--no-ablation"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=_env()) for w in ("a", "b")]
    for p in ps:
        _out, err = p.communicate(timeout=120)
        assert p.returncode in (0, 1), err[-3000:]  # 1: ran, nothing significant to recommend
    trials = _trials(url)
    kinds = Counter(t.user_attrs.get("kind") for t in trials if t.state.is_finished())
    assert kinds["baseline"] == 1 and kinds["trial"] == 6, kinds
    assert len({c["confirmed_by"] for c in _results(url, "confirmation")
                if c.get("confirmed_by")}) == 1


def test_heartbeat_tells_a_live_trial_from_a_dead_one(pg_url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A RUNNING trial of a worker on another host is left alone while its heartbeat is
    fresh, however long it runs; once the heartbeat is older than the grace period it is
    failed and queued again once with the same parameters."""
    monkeypatch.setenv("KVTUNE_HEARTBEAT", "1,2")
    storage = open_storage(pg_url)
    study = optuna.create_study(study_name="hb", storage=storage)
    Fleet(storage.engine, "hb", "remote").register({"kernel": "k"}, "fp")
    with storage.engine.begin() as c:  # the worker runs on another host: no pid to look at
        c.execute(sa.text("UPDATE kvtune_workers SET host='elsewhere' WHERE worker='remote'"))
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    trial.set_user_attr("worker", "remote")
    me = Fleet(storage.engine, "hb", "here")
    for _ in range(3):  # 3 s of heartbeats: the trial lives, RUNNING all along
        storage.record_heartbeat(trial._trial_id)
        fail_stale(study, me)
        assert study.trials[trial.number].state == TrialState.RUNNING
        time.sleep(1)
    time.sleep(2.5)  # no heartbeat for longer than the grace period: dead
    fail_stale(study, me)
    ts = study.get_trials(deepcopy=False)
    assert ts[trial.number].state == TrialState.FAIL
    retry = [t for t in ts if t.system_attrs.get("failed_trial") == trial.number]
    assert len(retry) == 1 and retry[0].state == TrialState.WAITING
    assert retry[0].params == ts[trial.number].params


def _wait_running(url: str, worker: str, name: str = "fleet") -> optuna.trial.FrozenTrial:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ts = _trials(url, name)
        except KeyError:
            ts = []
        names = set(ts[0].params) if ts and ts[0].state.is_finished() else None
        for t in ts:
            if names and t.state == TrialState.RUNNING and t.number > 0 and \
                    t.user_attrs.get("worker") == worker and set(t.params) == names:
                return t
        time.sleep(0.05)
    pytest.fail(f"{worker} never measured a search trial")


def test_plain_tune_twice_at_once_is_refused_and_resume_retries_the_dead(
        pg_url: str, tmp_path: Path) -> None:
    """Plain `kvtune tune` (no --worker): a second one of the same study while the first
    measures is refused naming it, and fails none of its trials; a fleet worker is refused
    likewise. After the first is killed (SIGKILL), a plain resume fails only that trial and
    measures it again with its original parameters."""
    study = _study_file(tmp_path, pg_url, trials=6)
    # plain-a must still be measuring after the two refused starts, which took more than
    # its 6 trials of 1 s on a loaded host (CI 2026-11-25): 60 s a search trial (it is
    # killed in its first), its baseline's 2 repetitions (the noise floor) without a sleep.
    a = _start(study, "plain-a", 60.0, "--plain", "--no-confirm", "--fast-first", "2")
    _wait_running(pg_url, "plain-a")
    for extra in (("--plain",), ()):
        b = _start(study, "plain-b", 0.0, "--no-confirm", *extra)
        out, err = b.communicate(timeout=60)
        assert b.returncode == 2, (out, err[-2000:])
        msg = json.loads(out.strip().splitlines()[-1])["error"]
        assert "plain-a" in msg and f"pid {a.pid}" in msg and "refused" in msg.lower()
        assert "--worker" in msg
    running = _wait_running(pg_url, "plain-a")
    os.kill(a.pid, signal.SIGKILL)
    a.communicate()
    _finish(_start(study, "plain-c", 0.0, "--plain", "--no-confirm"))
    trials = _trials(pg_url)
    failed = [t for t in trials if t.state == TrialState.FAIL and "failed" not in t.user_attrs]
    assert [t.number for t in failed] == [running.number], failed
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == running.number]
    assert len(retried) == 1 and retried[0].user_attrs["worker"] == "plain-c"
    assert retried[0].params == running.params and retried[0].state.is_finished()
    assert sum(1 for t in trials if t.user_attrs.get("kind") == "trial"
               and t.state.is_finished()) == 6
    assert sum(1 for t in trials if t.user_attrs.get("kind") == "baseline") == 1


def test_heterogeneous_hosts_get_their_own_baseline_and_confirmation(
        pg_url: str, tmp_path: Path) -> None:
    """`hosts: heterogeneous`: two workers with different host fingerprints (one reports
    another kernel) share the search; each fingerprint has one baseline, one noise floor
    and one confirmation, run by its own worker on its own trials; show lists both hosts.
    Without the key the second worker is refused naming the difference."""
    study = _study_file(tmp_path, pg_url, trials=10, hosts="heterogeneous")
    # The two confirmations (and ablations) still overlap at 0.02 s a repetition.
    ps = [_start(study, "w1", 0.1, "--confirm-sleep", "0.02"),
          _start(study, "w2", 0.1, "--confirm-sleep", "0.02", "--fingerprint",
                 "kernel=5.10.0-other")]
    outs = {o["worker"]: o for o in (_finish(p) for p in ps)}
    trials = _trials(pg_url)
    fps = {t.user_attrs["worker"]: t.user_attrs["fingerprint"] for t in trials
           if t.user_attrs.get("kind") == "baseline"}
    assert set(fps) == {"w1", "w2"} and fps["w1"] != fps["w2"], fps
    assert sum(1 for t in trials if t.user_attrs.get("kind") == "trial"
               and t.state.is_finished()) == 10
    floors = _results(pg_url, "noise_floor")
    assert sorted(f["fingerprint"] for f in floors) == sorted(fps.values())
    confs = [c for c in _results(pg_url, "confirmation") if c.get("confirmed_by")]
    assert {c["confirmed_by"]: c["fingerprint"] for c in confs} == fps
    by_number = {t.number: t for t in trials}
    for c in confs:  # each confirmation's candidates are its own host's trials
        assert c["candidates"], c
        for cand in c["candidates"]:
            assert by_number[cand["trial"]].user_attrs["fingerprint"] == c["fingerprint"]
    for w, o in outs.items():
        assert o["confirmed_by"] == o["result"]["confirmed_by"] == w
    # Each host's confirmer ran its own ablation.
    assert len(_results(pg_url, "ablation")) == 2
    shown = run_kvtune("show", "fleet", "--storage", pg_url, "--json", env=_env(), timeout=120)
    assert shown.returncode == 0, shown.stderr
    hosts = {h["fingerprint"]: h for h in json.loads(shown.stdout)["hosts"]}
    assert set(hosts) == set(fps.values())
    for w, fp in fps.items():
        assert hosts[fp]["workers"] == [w]
        assert hosts[fp]["confirmation"]["confirmed_by"] == w
        assert hosts[fp]["baseline"]["value"] is not None
    text = run_kvtune("show", "fleet", "--storage", pg_url, env=_env(), timeout=120)
    assert "Hosts" in text.stdout and "5.10.0-other" in text.stdout
    # `kvtune report`: every worker, its host and its trials, and the hosts' table.
    page = tmp_path / "fleet.html"
    rep = run_kvtune("report", "fleet", "--storage", pg_url, "-o", str(page), env=_env(),
                     timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    body = page.read_text()
    section = body[body.index("<h2 id=workers>"):]
    assert "<td>w1</td>" in section and "<td>w2</td>" in section
    assert "<h3>Hosts</h3>" in section and "5.10.0-other" in section
    for w in ("w1", "w2"):
        numbers = sorted(t.number for t in trials if t.user_attrs.get("worker") == w)
        assert f"{len(numbers)}: {', '.join(map(str, numbers))}" in section
    # The same two hosts without `hosts: heterogeneous`: refused, naming the difference.
    plain = _study_file(tmp_path, pg_url, trials=2, name="same")
    _finish(_start(plain, "w1", 0.0, "--no-confirm"))
    p = _start(plain, "w2", 0.0, "--fingerprint", "kernel=5.10.0-other")
    out, _err = p.communicate(timeout=60)
    assert p.returncode == 2
    msg = json.loads(out.strip().splitlines()[-1])["error"]
    assert "5.10.0-other" in msg and "hosts: heterogeneous" in msg


def test_the_baseline_is_asked_at_the_defaults_whoever_asks_meanwhile(
        tmp_path: Path) -> None:
    """Optuna's queue of waiting trials is the study's: another worker's search asking
    between the baseline's enqueue and its ask took the defaults (and the baseline got a
    sampled configuration). A fleet worker's asks take its storage's lock, and the
    baseline's enqueue and ask happen under it (`TrackedStudy.ask_at`): another worker's
    ask meanwhile waits, then gets a trial of its own."""
    import threading

    from kvtune.fleet.claims import creation_lock
    from kvtune.study.tracked import TrackedStudy

    url = f"sqlite:///{tmp_path}/q.db"
    storage = open_storage(url, heartbeat=False)
    optuna.create_study(study_name="q", storage=storage)

    def worker() -> TrackedStudy:
        return TrackedStudy(optuna.load_study(study_name="q", storage=storage), storage,
                            lambda _t: None, lambda _n: None,
                            queue_lock=lambda: creation_lock(url, timeout_s=30))

    mine, other = worker(), worker()
    dist = optuna.distributions.FloatDistribution(0, 1)
    theirs: dict[str, Any] = {}
    enqueue = mine.enqueue_trial

    def enqueue_then_the_other_asks(params: dict[str, Any], **kw: Any) -> None:
        enqueue(params, **kw)  # the defaults wait in the queue; a search asks now
        t = threading.Thread(target=lambda: theirs.update(
            trial=other.ask(fixed_distributions={"x": dist})))
        t.start()
        t.join(0.5)
        theirs["waited"], theirs["thread"] = t.is_alive(), t

    mine.enqueue_trial = enqueue_then_the_other_asks  # type: ignore[method-assign]
    trial = mine.ask_at({"x": 0.25})
    theirs["thread"].join(30)
    assert theirs["waited"], "the other worker's ask did not wait for the queue lock"
    assert trial.suggest_float("x", 0, 1) == 0.25
    assert theirs["trial"].number != trial.number
    assert not mine.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    # A plain run (no lock) asks through Optuna's queue as before.
    plain = TrackedStudy(optuna.load_study(study_name="q", storage=storage), storage,
                         lambda _t: None, lambda _n: None)
    assert plain.ask_at({"x": 0.5}).suggest_float("x", 0, 1) == 0.5
    assert not plain.get_trials(deepcopy=False, states=(TrialState.WAITING,))
