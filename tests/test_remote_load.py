"""The load generator on its own host (issue 15 items 4 and 5), with real parts on one
machine: a network namespace with its own sshd is the load host (tests/support/netns.py),
memcached runs in the root namespace on the veth's address, and kvtune drives kvload over
ssh. Checked: the results and the recorded remote placement, then the faults (sshd stopped,
kvload missing or of another version, the link dropped mid-run), each a failed repetition
with its reason within a bounded time, or a refusal at preflight before anything starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import kvtune as run_kvtune
from support.netns import LoadHost, load_host, missing

from kvtune.errors import HarnessError, UserError
from kvtune.knobs.resolve import resolve_knobs
from kvtune.load.remote import ALIVE_COUNT, ALIVE_INTERVAL
from kvtune.measure.session import Repetition, Session
from kvtune.study.loader import parse_study

# A load host: a network namespace with its own sshd, kvload run over ssh.
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(missing() is not None, reason=str(missing()))]


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)

REPO = Path(__file__).resolve().parents[1]
LOST_WITHIN = ALIVE_INTERVAL * (ALIVE_COUNT + 1) + 4  # s from the link drop to the failure


def _kvload_version() -> str:
    from kvtune.load.kvload import find_kvload

    out = subprocess.run([find_kvload(), "--version"], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def lh() -> Iterator[LoadHost]:
    with load_host() as host:
        yield host


@pytest.fixture
def env(lh: LoadHost, monkeypatch: pytest.MonkeyPatch) -> LoadHost:
    for k, v in lh.env.items():
        monkeypatch.setenv(k, v)
    return lh


def study(lh: LoadHost, duration: str = "1s", **load: str) -> str:
    extra = "".join(f", {k}: {v}" for k, v in load.items())
    return f"""\
study: remote-load
target: {{kind: memcached, cpus: "0", host: {lh.server_ip}}}
load: {{host: "{lh.url}", mode: closed, connections: 2, duration: {duration}, warmup: 200ms,
        cpus: "1", workload: {{keys: 1000}}{extra}}}
knobs: [memcached.threads]
repetitions: 1
"""


def session(text: str) -> Session:
    spec, lines = parse_study(text, "remote.yaml")
    return Session(spec, resolve_knobs(spec, lines), None)


def measured(s: Session) -> tuple[Repetition, float]:
    t0 = time.monotonic()
    rep = s.measure(s.baseline)
    return rep, time.monotonic() - t0


def test_kvload_runs_on_the_load_host_against_the_server_here(env: LoadHost) -> None:
    s = session(study(env))
    s.preflight()  # reads the load host, copies kvtune's kvload to a per-version path
    rep, _ = measured(s)
    assert rep.status in ("ok", "flagged"), rep.reason
    assert all(f.startswith("steal") for f in rep.flags), rep.flags  # host noise only
    m = rep.metrics
    assert m["ops_per_sec"] > 100 and m["errors"] == 0 and m["verdict"] == "ok"
    assert m["p99_us"] >= m["p50_us"] > 0
    # The server listened on the address the load host reaches, not on every interface,
    # and the requests it counted are kvload's.
    argv = rep.raw["argv"]
    assert argv[argv.index("-l") + 1] == env.server_ip
    doc = rep.raw["load"]
    assert doc["tool"] == "kvload"
    assert doc["config"]["server"].startswith(f"{env.server_ip}:")
    assert rep.raw["server_stats"]["stats"]["cmd_get"] >= doc["requests"]["completed"] * 0.5
    # What was recorded about the load host and the placement there.
    remote = doc["remote"]
    assert remote["host"] == env.url
    facts = remote["facts"]
    assert facts["online"] == Path("/sys/devices/system/cpu/online").read_text().strip()
    assert facts["kernel"] == os.uname().release and facts["arch"] == os.uname().machine
    assert facts["hostname"] == os.uname().nodename
    assert remote["placement"]["taskset"] == "1"
    assert remote["placement"]["kvload"] == {"cpus": [1], "threads": 1, "pinned": True}
    binary = remote["binary"]
    assert binary["version"] == _kvload_version()
    assert binary["source"] == "copied"  # kvload is on no PATH here: kvtune's own copy
    assert binary["path"].startswith(env.env["KVTUNE_REMOTE_CACHE"] + "/kvload-")
    assert Path(binary["path"]).is_file()
    # The argv went through the remote shell intact: the command kvload ran is the argv.
    assert doc["argv"][doc["argv"].index("--server") + 1] == doc["config"]["server"]
    # kvload's timeline is on this host's clock (the namespace shares it, so the
    # translation's offset is the drain plus one trip back: small and positive).
    assert 0 <= remote["clock_offset_ns"] < 2e9
    assert doc["timeline"]["window_end_ns"] - doc["timeline"]["window_start_ns"] == \
        doc["remote_timeline"]["window_end_ns"] - doc["remote_timeline"]["window_start_ns"]

    # A second session finds the copy there and does not copy again.
    s2 = session(study(env))
    before = Path(binary["path"]).stat().st_mtime_ns
    s2.preflight()
    rep2, _ = measured(s2)
    assert rep2.status in ("ok", "flagged"), rep2.reason
    assert rep2.raw["load"]["remote"]["binary"]["path"] == binary["path"]
    assert Path(binary["path"]).stat().st_mtime_ns == before


def test_kvtune_run_end_to_end(env: LoadHost, tmp_path: Path) -> None:
    f = tmp_path / "remote.yaml"
    f.write_text(study(env))
    out = run_kvtune("run", str(f), "--repetitions", "2", "--json", cwd=tmp_path,
                     env={**os.environ, **env.env,
                          "KVTUNE_JOURNAL": str(tmp_path / "journal.json")}, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout[out.stdout.index("{"):])
    assert doc["n"] == 2 and not doc["failed"]
    assert doc["metrics"]["ops_per_sec"] > 100


def test_workload_file_is_copied_to_the_load_host(env: LoadHost, tmp_path: Path) -> None:
    w = tmp_path / "w.json"
    w.write_text(json.dumps({"value_size": 300}))  # the study does not set it: the file wins
    s = session(study(env, workload_file=str(w)))
    s.preflight()
    rep, _ = measured(s)
    assert rep.status in ("ok", "flagged"), rep.reason
    doc = rep.raw["load"]
    staged = doc["argv"][doc["argv"].index("--workload") + 1]
    assert staged.startswith(env.env["KVTUNE_REMOTE_CACHE"] + "/workload-")
    assert Path(staged).read_text() == w.read_text()
    assert str(doc["config"]["value_size"]) == "300"


def test_sshd_stopped_refuses_before_the_study_and_fails_a_repetition(env: LoadHost) -> None:
    s = session(study(env))
    s.preflight()
    env.stop_sshd()
    try:
        rep, seconds = measured(s)
        assert rep.status == "failed"
        assert f"load host {env.url}: ssh failed" in rep.reason
        assert "Connection refused" in rep.reason and "sshd" in rep.reason
        assert seconds < 10
        with pytest.raises(HarnessError, match="Connection refused"):
            session(study(env)).preflight()  # nothing applied, nothing started
    finally:
        env.start_sshd()


def test_remote_kvload_missing_or_of_another_version(env: LoadHost, tmp_path: Path) -> None:
    want = _kvload_version()
    # A configured path that is not there, or holds another version: refused at preflight.
    with pytest.raises(HarnessError, match="/nonexistent/kvload is missing or not runnable"):
        session(study(env, remote_binary="/nonexistent/kvload")).preflight()
    other = tmp_path / "kvload"
    other.write_text("#!/bin/sh\necho 'kvload 0.0.1'\n")
    other.chmod(0o755)
    with pytest.raises(HarnessError, match=rf"is 'kvload 0.0.1'; this kvtune runs '{want}'"):
        session(study(env, remote_binary=str(other))).preflight()

    # Between repetitions the binary disappears, then is replaced by another version: each
    # repetition checks before it runs, and fails with the reason.
    s = session(study(env))
    s.preflight()
    path = Path(s.load_driver.binary)  # type: ignore[union-attr]
    saved = path.read_bytes()
    try:
        path.unlink()
        rep, seconds = measured(s)
        assert rep.status == "failed" and seconds < 10
        assert f"{path} is missing on the load host" in rep.reason
        path.write_text(other.read_text())
        path.chmod(0o755)
        rep, _ = measured(s)
        assert rep.status == "failed"
        assert f"is 'kvload 0.0.1' on the load host, not '{want}'" in rep.reason
    finally:
        path.write_bytes(saved)
        path.chmod(0o755)
    rep, _ = measured(s)
    assert rep.status in ("ok", "flagged"), rep.reason


def test_link_dropped_mid_run_fails_the_repetition_in_bounded_time(env: LoadHost) -> None:
    s = session(study(env, duration="20s"))
    s.preflight()
    dropped: list[float] = []

    def drop() -> None:
        time.sleep(2.5)  # server started, kvload preloaded and measuring
        dropped.append(time.monotonic())
        env.link(False)

    t = threading.Thread(target=drop)
    t.start()
    try:
        rep, _ = measured(s)
        ended = time.monotonic()
    finally:
        t.join()
        env.link(True)
    assert rep.status == "failed"
    assert f"load host {env.url}: ssh failed" in rep.reason
    assert "network to the load host was lost" in rep.reason, rep.reason
    assert ended - dropped[0] < LOST_WITHIN, f"{ended - dropped[0]:.1f}s"
    assert ended - dropped[0] < 20  # long before kvload's own window would have ended


def test_load_cpus_are_checked_on_the_load_host(env: LoadHost) -> None:
    n = len(Path("/sys/devices/system/cpu/online").read_text())  # > any CPU index here
    with pytest.raises(UserError, match=r"load.cpus: CPU list '.*' names CPUs the load host"):
        session(study(env).replace('cpus: "1"', f'cpus: "{n + 64}"')).preflight()


def test_redis_listens_on_the_named_address_for_the_load_host(env: LoadHost) -> None:
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    text = study(env).replace("kind: memcached", "kind: redis").replace(
        "knobs: [memcached.threads]", "knobs: []")
    s = session(text)
    s.preflight()
    rep, _ = measured(s)
    assert rep.status in ("ok", "flagged"), rep.reason
    argv = rep.raw["argv"]
    assert argv[argv.index("--bind") + 1] == env.server_ip
    assert rep.metrics["ops_per_sec"] > 100 and rep.metrics["errors"] == 0
    assert rep.raw["placement"]["load_host"] == env.url


@pytest.mark.parallel  # refused before anything starts: no load host, nothing measured
def test_a_peer_load_tool_is_refused_with_a_load_host(tmp_path: Path) -> None:
    """`kvtune run --load-tool redis-benchmark` would run the peer here, not on the load host:
    refused before anything starts (the addresses are never contacted)."""
    f = tmp_path / "s.yaml"
    f.write_text("study: peer\ntarget: {kind: memcached, cpus: \"0\", host: 10.200.255.1}\n"
                 "load: {host: \"ssh://root@10.200.255.2\", mode: closed, cpus: \"1\"}\n")
    out = run_kvtune("run", str(f), "--load-tool", "redis-benchmark", cwd=tmp_path, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    # Checked by the loader as a file's load.tool is (issue 32), the option named.
    assert "(with --load-tool redis-benchmark)" in out.stderr, out.stderr
    assert "redis-benchmark cannot run on a load host" in out.stderr, out.stderr
