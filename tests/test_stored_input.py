"""What comes back from storage is input too (issue 40): the checks a results database, a
library entry or an imported file passes before it reaches an export, a report, a profile
or the host, one at a time (the whole commands are cases of tests/bad-inputs/)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from kvtune.errors import UserError
from kvtune.export import Recommendation, check_values
from kvtune.export.base import comment
from kvtune.host import journal
from kvtune.report.figures import plot_id
from kvtune.safety import storage
from kvtune.safety.files import ReadRefused, open_input
from kvtune.safety.hostpaths import refusal
from kvtune.study.stored import plain_text, stored_spec, sweep_knob

SPEC = {"study": "s", "target": {"kind": "memcached", "args": ["-m", "256"], "cpus": "0"},
        "load": {"mode": "closed", "connections": 4,
                 "workload": {"mix": "get:9,set:1", "keys": 1000, "value_size": 100}}}


# -- storage URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "sqlite:///file:x.db?uri=true", "sqlite:///file:/tmp/../etc/x.db?mode=rwc&uri=true",
    "sqlite:///x.db?uri=true"])
def test_a_sqlite_file_uri_is_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="file: URI"):
        storage.check_url(url, tmp_path)


@pytest.mark.parametrize("url", [
    "sqlite:///x.db?timeout=abc", "sqlite:///x.db?foo=bar", "sqlite:///x.db?isolation_level=x",
    "sqlite:///x.db?check_same_thread=0"])
def test_a_sqlite_url_takes_no_query(url: str, tmp_path: Path) -> None:
    """The driver's options reach sqlite3.connect unchecked: a bad one was a traceback, an
    unknown one a warning; none is accepted, whichever command the URL comes to."""
    with pytest.raises(ValueError, match="takes no query"):
        storage.check_url(url, tmp_path)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://k@127.0.0.1/db?sslrootcert=/etc/shadow",
    "postgresql+psycopg://k@127.0.0.1/db?PassFile=.pgpass",
    "postgresql+psycopg://k@127.0.0.1/db?service=x"])
def test_a_url_option_naming_a_file_the_driver_reads_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="would read as root"):
        storage.check_url(url)
    storage.check_url("postgresql+psycopg://k@127.0.0.1/db?sslmode=require")


def test_a_command_that_reads_results_never_creates_a_database(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        storage.check_url(f"sqlite:///{tmp_path}/results/x.db", tmp_path, create=False)
    assert not (tmp_path / "results").exists()


def test_a_study_creates_its_database_only_in_its_places(tmp_path: Path) -> None:
    study_dir, elsewhere = tmp_path / "study", tmp_path / "elsewhere"
    study_dir.mkdir()
    elsewhere.mkdir()
    places = (study_dir,)
    storage.check_url("sqlite:///results/deep/x.db", tmp_path, places=places)
    storage.check_url(f"sqlite:///{study_dir}/x.db", tmp_path, places=places)
    with pytest.raises(ValueError, match="results directory or beside the study file"):
        storage.check_url(f"sqlite:///{elsewhere}/x.db", tmp_path, places=places)
    with pytest.raises(ValueError, match="under /etc"):
        storage.check_url("sqlite:////etc/kvtune-test-ld.so.preload", tmp_path)


# -- check before open ----------------------------------------------------------------------


@pytest.mark.integration  # writes to the host (put back afterwards)
def test_a_fifo_and_a_device_are_refused_before_they_are_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ReadRefused, match="not a regular file"):
        open_input(fifo, "input")  # an open (even O_NONBLOCK) of a FIFO is not needed
    with pytest.raises(ReadRefused, match="under /dev"):
        open_input("/dev/null", "input")
    link = tmp_path / "link"
    link.symlink_to("/proc/self/environ")
    with pytest.raises(ReadRefused, match="under /proc"):
        open_input(link, "input")
    ok = tmp_path / "ok"
    ok.write_text("x")
    fd = open_input(ok, "input")
    try:
        assert os.read(fd, 10) == b"x"
    finally:
        os.close(fd)


# -- stored studies -------------------------------------------------------------------------


def test_a_stored_study_file_passes_the_study_files_checks() -> None:
    assert stored_spec({"spec": SPEC}, "s", "db").spec is not None
    bad_mix = {**SPEC, "load": {**SPEC["load"], "workload": {
        "mix": "get:9\n[Service]\nExecStartPre=/bin/sh"}}}
    with pytest.raises(UserError, match="stored study file"):
        stored_spec({"spec": bad_mix}, "s", "db")
    redis = {**SPEC, "target": {"kind": "redis", "args": ["--loadmodule", "/tmp/evil.so"]}}
    with pytest.raises(UserError) as e:
        stored_spec({"spec": redis}, "s", "db")
    assert any("target.args" in p for p in e.value.problems), e.value.problems
    with pytest.raises(UserError, match="workload description"):
        stored_spec({"spec": SPEC, "workload": {"text": "a\n[Service]"}}, "s", "db")
    assert plain_text("mix get:9,set:1 — 100 B", "t", "w") is not None
    with pytest.raises(UserError, match="stored sweep"):
        sweep_knob("sweep:<img src=x onerror=alert(1)>", "s", "db")
    assert sweep_knob("sweep:synthetic.x", "s", "db") == "synthetic.x"


@pytest.mark.parametrize(("attrs", "what"), [
    ({"space": "x"}, "space is not a mapping"), ({"host": ["a"]}, "host is not a mapping"),
    ({"spec": 5}, "spec is not a mapping"), ({"spec_text": {}}, "spec_text is not text"),
    ({"baseline": {"k": [1]}}, "not a single value"),
    ({"space": {"domains": {"k": 5}}}, "domains that are not mappings"),
    ({"host": {"kernel": "6.1\x1b[2J"}}, "host.kernel is not plain text")])
def test_a_study_attribute_of_the_wrong_shape_is_refused(attrs: dict[str, object],
                                                         what: str) -> None:
    from kvtune.store import check_study_attrs

    with pytest.raises(UserError, match=what):
        check_study_attrs(attrs, "study 's' in db")
    ok = {"spec": SPEC, "spec_text": "study: s\n", "host": {"kernel": "6.1", "cpus": 2},
          "baseline": {"memcached.threads": 4, "x": None}, "space": {"domains": {"k": {}}}}
    assert check_study_attrs(ok, "w") is ok


@pytest.mark.parametrize(("attrs", "what"), [
    ({"config": "x"}, "config is not a configuration"),
    ({"config": {"k": {"a": 1}}}, "config is not a configuration"),
    ({"kind": 5}, "kind is not text"), ({"stderr": "a\x1b[2J"}, "stderr is not plain text"),
    ({"eval": {"metrics": {"p99_us": [1]}}}, "not a number")])
def test_a_trial_attribute_of_the_wrong_shape_is_refused(attrs: dict[str, object],
                                                         what: str) -> None:
    from kvtune.store import check_trial_attrs

    with pytest.raises(UserError, match=what):
        check_trial_attrs(attrs, "trial 0")
    ok = {"config": {"memcached.threads": 4, "x": None}, "kind": "trial",
          "stderr": "line 1\nline 2\n", "eval": {"metrics": {"p99_us": 100.0}, "n": 3}}
    assert check_trial_attrs(ok, "w") is ok


# -- exports --------------------------------------------------------------------------------


def _rec(config: dict[str, object], base: dict[str, object],
         spec: dict[str, object] | None = None) -> Recommendation:
    return Recommendation("s", "memcached", config, base, "test",  # type: ignore[arg-type]
                          spec=spec or {"target": {"kind": "memcached"}})


def test_every_exported_value_is_checked_against_the_knob_catalog() -> None:
    base = {"memcached.threads": 4, "memcached.max_item_size": "1m"}
    check_values(_rec({**base, "memcached.threads": 2}, base))
    for bad in ({"memcached.max_item_size": "2m\n-o ext_path=/tmp/x:64m"},
                {"memcached.max_item_size": "2m -o ext_path=/tmp/x:64m"},
                {"memcached.threads": 100000}):
        with pytest.raises(UserError, match="knob catalog"):
            check_values(_rec({**base, **bad}, base))
    # A baseline outside the catalog's range is one a host had: a number, or one word.
    check_values(_rec({**base, "memcached.threads": 2}, {**base, "memcached.threads": 64}))
    with pytest.raises(UserError, match="knob catalog"):
        check_values(_rec({**base, "memcached.threads": 2},
                          {**base, "memcached.threads": "4\n-o ext_path=x"}))
    with pytest.raises(UserError, match="knob catalog"):
        check_values(_rec(base, base, spec={"target": {"kind": "memcached",
                                                       "args": ["-o", "ext_path=/x:1m"]}}))


def test_a_comment_line_stays_one_line() -> None:
    text = comment(["Tuned for: mix get:9\n[Service]\nExecStartPre=/bin/sh -c id", "ok\x1b[2J"])
    assert text.count("\n") == 2 and all(ln.startswith("# ") for ln in text.splitlines())


# -- reports --------------------------------------------------------------------------------


def test_a_plot_id_is_a_fixed_name_with_indices() -> None:
    assert plot_id("plot-timeline-0-3") == "plot-timeline-0-3"
    assert plot_id("plot-telemetry-scatter") == "plot-telemetry-scatter"
    for bad in ('plot-sweep-"><img src=x onerror=alert(1)>', "plot-sweep-synthetic.x"):
        with pytest.raises(ValueError):
            plot_id(bad)


# -- the low items --------------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    "/proc/sys/vm/mmap_rnd_bits", "/proc/sys/dev/tty/legacy_tiocsti",
    "/proc/sys/dev/tty/ldisc_autoload",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    "/sys/class/thermal/thermal_zone0/mode", "/sys/class/thermal/thermal_zone0/trip_point_0_temp",
    "/sys/block/md0/md/array_state", "/sys/devices/virtual/block/md0/md/sync_action"])
def test_the_deny_list_gaps_are_closed(path: str) -> None:
    assert refusal(path) is not None


def test_a_journal_names_no_module_kvtune_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validating a journal imports the module of a kind from kvtune's own table, never the
    `module` a journal file names (kvtune.__main__ re-entered the CLI)."""
    monkeypatch.delitem(sys.modules, "kvtune.__main__", raising=False)
    assert journal._undo_fn("no-such-kind", "kvtune.__main__") is None
    assert "kvtune.__main__" not in sys.modules
    problems = journal.check_state({"entries": [
        {"undo": "evil", "module": "kvtune.__main__", "args": {}}], "created_dirs": [],
        "processes": []})
    assert problems and "kvtune.__main__" not in sys.modules
    for kind, module in journal.UNDO_MODULES.items():  # the table is where they register
        importlib.import_module(module)
        assert kind in journal._UNDO and journal._UNDO[kind].module == module
    for module in journal.undo_modules():
        importlib.import_module(module)
    # (tests register toy undo kinds of their own, from their own modules: not kvtune's)
    assert {u.module for u in journal._UNDO.values()
            if u.module.startswith("kvtune.")} <= set(journal.undo_modules())


def test_a_journal_undo_with_args_it_does_not_take_is_a_failed_entry() -> None:
    """A registered undo kind whose args a journal file changed (a key missing, a value of
    another type) is reported as not restored, never a traceback (KeyError was one)."""
    for args in ({"feature": "NO_X"}, {"name": "TTWU_QUEUE"}, {}):  # each refused unwritten
        results = journal.restore_state({"entries": [
            {"undo": "sched-feature", "module": "kvtune.__main__", "args": args}],
            "created_dirs": [], "processes": []})
        assert len(results) == 1 and not results[0].ok, results


def test_verify_trusts_no_login_user_the_process_names_itself() -> None:
    from kvtune.verify import expected_owners

    owners = expected_owners("memcached", ["memcached", "-u", "nobody"])
    assert 65534 in owners and 0 in owners
    import pwd

    login = next((p for p in pwd.getpwall() if 1000 <= p.pw_uid < 65534), None)
    if login is not None:
        assert login.pw_uid not in expected_owners("memcached",
                                                   ["memcached", "-u", login.pw_name])


def test_the_pm_qos_undo_does_not_wait_for_a_reused_pid() -> None:
    """A live process that does not hold the PM QoS file (the recorded holder's pid, reused)
    is not answered EBUSY forever."""
    from kvtune.knobs.appliers.idle import _undo_pm_qos

    assert "released" in _undo_pm_qos({"pid": os.getppid()})
    assert "released" in _undo_pm_qos({"pid": 2**22 + 7})  # no such process


def test_an_ssh_config_another_user_could_change_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KVTUNE_SSH_CONFIG (ssh -F) can name a ProxyCommand: judged like a program."""
    from kvtune.load.remote import ssh_config
    from kvtune.safety.programs import Untrusted

    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n  ProxyCommand /bin/true\n")
    cfg.chmod(0o644)
    monkeypatch.setenv("KVTUNE_SSH_CONFIG", str(cfg))
    if os.geteuid() == 0:
        assert ssh_config() == str(cfg)
        os.chown(cfg, 65534, 65534)
        with pytest.raises(Untrusted, match="ProxyCommand"):
            ssh_config()
        os.chown(cfg, 0, 0)
    cfg.chmod(0o666)
    with pytest.raises(Untrusted, match="writable by others"):
        ssh_config()
    monkeypatch.setenv("KVTUNE_SSH_CONFIG", "/dev/null")
    with pytest.raises(Untrusted, match="not a regular file"):
        ssh_config()


# -- a configuration read back from storage, before it is measured -------------------------

# A trial a results database could hold (anyone with the file could write it): memcached's
# hashpower as text that would put an extstore file where it says in the `-o` list.
EVIL = {"memcached.threads": 4, "memcached.hashpower": "16,ext_path=/etc/cron.d/x:64m"}


def _space() -> Any:
    from kvtune.knobs import catalog
    from kvtune.space import Space

    knobs = tuple(catalog.lookup(n) for n in ("memcached.threads", "memcached.hashpower"))
    return Space(knobs, {"memcached.threads": 4, "memcached.hashpower": 16})


def test_a_stored_configuration_outside_the_space_is_refused_naming_the_knob() -> None:
    space = _space()
    space.check({"memcached.threads": 2, "memcached.hashpower": 20}, "trial 1")  # fits
    for cfg, words in ((EVIL, "memcached.hashpower='16,ext_path"),
                       ({"memcached.threads": 4}, "memcached.hashpower: missing"),
                       ({**EVIL, "memcached.hashpower": 16, "x.y": 1}, "'x.y': not a knob"),
                       ({"memcached.threads": True, "memcached.hashpower": 16},
                        "memcached.threads=True is outside")):
        with pytest.raises(UserError) as e:
            space.check(cfg, "study 's' in sqlite:///r.db, stored trial 1")
        text = str(e.value) + " ".join(e.value.problems)
        assert "stored trial 1" in text and words in text, text
    with pytest.raises(UserError, match="not a mapping"):
        space.check(["memcached.threads"], "trial 1")  # type: ignore[arg-type]


def test_the_confirmation_refuses_a_stored_candidate_before_measuring_anything() -> None:
    """The confirmation picks its candidates from stored trials: each is checked against
    the study's space before the first repetition (nothing started), naming the trial."""
    import optuna

    from kvtune.spec import EvaluationSpec
    from kvtune.study.confirm import confirm

    space = _space()
    trials = [optuna.trial.create_trial(
        value=v, user_attrs={"kind": kind, "config": cfg, "violations": [0.0]})
        for kind, cfg, v in (("baseline", dict(space.baseline), 100.0),
                             ("trial", EVIL, 1e9))]
    for i, t in enumerate(trials):
        t.number = i
    measured: list[Any] = []

    def measure(config: dict[str, Any]) -> Any:
        measured.append(config)
        raise AssertionError("measured")

    with pytest.raises(UserError, match="stored trial 1: the configuration does not fit"):
        confirm(trials, dict(space.baseline), "ops_per_sec", "maximize",
                EvaluationSpec(confirm_rounds=2), 0, measure, check=space.check)
    assert not measured


def test_a_session_refuses_a_configuration_outside_its_space_before_applying_it() -> None:
    """The last gate before a server's argv and the kernel's files: whatever asks a session
    to start a server (a resumed study, a fleet's peer, a library's warm start) with a
    value outside its knob's domain gets UserError, and nothing is applied."""
    from kvtune.measure.session import Session
    from kvtune.spec import StudySpec

    spec = StudySpec.model_validate({
        "study": "s", "target": {"kind": "memcached"},
        "knobs": ["memcached.threads", "memcached.hashpower"]})
    session = Session(spec, list(_space().knobs), None)
    session.space = _space()
    with pytest.raises(UserError, match="does not fit the study's knob space"):
        session.prepare_start(EVIL)


@pytest.mark.parametrize("change,check", [
    ({"objective": "ops_per_sec"}, lambda d: d["objective"] == {"metric": "ops_per_sec"}),
    ({"objective": ["ops_per_sec", "p99_us"]},
     lambda d: d["objective"]["metric"] == "ops_per_sec"
     and d["objective"]["also"] == [{"metric": "p99_us"}]),
    ({"load": {"mode": "open", "rate": "50k", "duration": "2s", "connections": "8"}},
     lambda d: d["load"]["rate"] == 50_000.0 and d["load"]["duration"] == 2.0
     and d["load"]["connections"] == 8),
    ({"target": {"kind": "memcached", "port": "11211"}},
     lambda d: d["target"]["port"] == 11211),
])
def test_readers_of_a_stored_study_file_get_its_validated_form(
        change: dict[str, Any], check: Any) -> None:
    """A form the schema accepts and normalises (an objective as a name or a list, "50k")
    reaches show, export, report and verify normalised, as a study file's would: read raw,
    they ended in "'str' object has no attribute 'get'" or "Unknown format code 'g'"."""
    raw = {"study": "s", "target": {"kind": "memcached"}, "knobs": ["memcached.threads"],
           "load": {"mode": "closed"}, "objective": "ops_per_sec", **change,
           "storage": "sqlite:///r.db"}
    stored = stored_spec({"spec": raw}, "s", "sqlite:///r.db")
    assert check(stored.data), stored.data
    assert stored.data["storage"] == "sqlite:///r.db"
    assert "evaluation" not in stored.data  # no defaults added: the fields the study set


@pytest.mark.parametrize("domain,words", [
    ({}, "has no known type"),
    ({"type": "zzz"}, "has no known type"),
    ({"type": "int", "low": 5, "high": 1}, "low 5 is above high 1"),
    ({"type": "int", "low": "a", "high": "b"}, "has a low that is not a finite number"),
    ({"type": "categorical", "choices": 5}, "has choices that are not a list"),
    ({"type": "categorical", "choices": [[1]]}, "has choices that are not a list"),
    ("int", "is not a mapping"),
])
def test_a_stored_domain_that_is_not_one_is_refused_naming_the_knob(domain: Any,
                                                                     words: str) -> None:
    """The stored space (each knob's searched domain) is read by export's checks and the
    report: a tampered one is refused naming the knob, never a KeyError or TypeError."""
    from kvtune.space import stored_domains

    good = {"type": "int", "low": 1, "high": 4}
    assert stored_domains({"domains": {"memcached.threads": good}}, "study 's'")[
        "memcached.threads"].contains(2)
    with pytest.raises(UserError) as e:
        stored_domains({"domains": {"memcached.threads": domain}}, "study 's' in r.db")
    assert "study 's' in r.db" in str(e.value) and "'memcached.threads'" in str(e.value)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("knee", [-4, 0, "x", float("inf"), True, 1e12])
def test_a_resumed_studys_stored_knee_is_a_rate_or_refused(knee: Any) -> None:
    """A resumed capacity study takes back the knee its warm start stored, which sets its
    searches' rates (kvload's --search-range): one that is not a request rate is refused
    naming the study and the storage, before anything is measured."""
    from types import SimpleNamespace

    import optuna

    from kvtune.library.warm import WarmStart

    class Store:
        url = "sqlite:///r.db"

        def last_result(self, study: str, key: str) -> Any:
            return {"mode": "warm", "knee": knee}

    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=1.0))  # resumed: a finished trial
    run = SimpleNamespace(spec=SimpleNamespace(study="s"), store=Store())
    warm = WarmStart(run)  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"study 's' in sqlite:///r.db: the stored warm "
                                        r"start: its knee .* is not a request rate"):
        warm.prepare(study)
    good = WarmStart(SimpleNamespace(spec=SimpleNamespace(study="s"), store=type(
        "S", (), {"url": "u", "last_result": lambda self, s, k: {"knee": 52_000}})()))  # type: ignore[arg-type]
    good.prepare(study)
    assert good.knee == 52_000.0


def test_one_line_values_keep_to_one_line() -> None:
    """`$` also matches before a final newline: every one-line check is a full match, so a
    value read back from storage cannot carry a line break into a file kvtune writes (a
    CPU list into a systemd drop-in's CPUAffinity=, a word into a rollback, a study's name
    into an export's paths)."""
    from kvtune.cpulist import parse_cpus
    from kvtune.export import _fits
    from kvtune.knobs import catalog

    assert parse_cpus("0, 2-3") == [0, 2, 3]
    assert parse_cpus("0-1\n") == [0, 1]  # a line read from a file: around the list only
    for text in ("0,\n1", "1\n-2", "0,\r1", "0\n,1"):
        with pytest.raises(ValueError):
            parse_cpus(text)
    knob = catalog.lookup("memcached.threads")  # a baseline word a host could have had
    assert _fits(knob, "never", False) and not _fits(knob, "never\n", False)
    assert refusal("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable") is None
    assert refusal("/sys/devices/system/cpu/cpu0/cpuidle/state1/disable\n") is not None
