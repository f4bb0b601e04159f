"""`kvtune canary` on real servers (memcached, redis-server, valkey-server on loopback): kvload
replays the same traffic to canary and control alike (the same seed and arguments), and the
session judges them from the servers' own stats. The three outcomes (roll back, promote, an
A/A pair that agrees) on each kind, the export's rollback applied live and read back, a
killed session put back by `kvtune restore`, and the bad inputs refused before anything
starts.

The changes are chosen to show within seconds: a memory limit below the keyspace (the
canary evicts, its hit ratio falls) is harmful, the same limit on the control instead makes
the canary's change helpful. Sessions look every 0.25 s (5 looks after 1 warm-up look before
any decision): what is tested is the wiring and the outcome, and a change that large is told
at the first looks the verdict allows (a production look is 10 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from support.cli import cli
from support.servers import Server, mc_settings, redis_call, running
from support.studies import make_study

KEYS, VALUE = 10000, 4000  # about 40 MB: more than a 16 MB limit holds
BIG = {"memcached": ["-m", "128"], "redis": [], "valkey": []}
SMALL = {"memcached": ["-m", "16"], "redis": ["--maxmemory", "16mb", "--maxmemory-policy",
                                              "allkeys-lru"],
         "valkey": ["--maxmemory", "16mb", "--maxmemory-policy", "allkeys-lru"]}
# alpha 0.05 (the default): at a few looks the interval's degrees of freedom are few, and
# alpha 0.01 over 4-5 rules left a busy host's sessions undecided at 12 s
# and up to 45 s: a difference that drifts as the traffic runs (the evicting side's hit
# ratio moving for the first seconds) looks strongly autocorrelated, and the interval, which
# holds its level for such series (canary/sequence.py), then takes tens of looks to decide;
# most sessions decide at the 5th judged look (1.5 s at 0.25 s a look; they took 3-6 s at
# 0.5 s a look). A production look (10 s by default, its first one the warm-up) outlasts
# that drift.
FAST = ["--interval", "0.25s", "--max-time", "45s", "--alpha", "0.05"]


def _kvload(kvload_bin: str, kind: str, port: int, *args: str) -> list[str]:
    return [kvload_bin, "--server", f"127.0.0.1:{port}", "--protocol",
            "memcache" if kind == "memcached" else "resp", "--keys", str(KEYS),
            "--value-size", str(VALUE), "--warmup", "0s", "--json", "-", "--seed", "7", *args]


@contextmanager
def replayed(kvload_bin: str, kind: str, servers: list[Server], seconds: float = 50
             ) -> Iterator[None]:
    """The same traffic to each server: every key set once (kvload's pipelined preload, the
    servers at once), then get:9,set:1 at 3,000 requests/s for `seconds`, one kvload each,
    the same seed. A server without the memory limit holds every key from the first look
    (half a second of random sets left up to a quarter of them unset on a busy host, and
    its hit ratio climbed for seconds: a drift that cost the verdict tens of looks); one with
    it holds what it can."""
    preloads = [subprocess.Popen(_kvload(kvload_bin, kind, s.port, "--preload", "--mode",
                                         "closed", "--mix", "get:1", "--duration", "100ms"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                for s in servers]
    for p in preloads:
        _, err = p.communicate(timeout=30)
        # an evicting server fails kvload's check of a sample of the keys, as it says
        assert p.returncode == 0 or "sampled keys are readable" in err, err
    procs = [subprocess.Popen(_kvload(kvload_bin, kind, s.port, "--no-preload", "--rate",
                                      "3000", "--duration", f"{seconds}s", "--connections",
                                      "2"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for s in servers]
    try:
        # No wait for the traffic: the session's first look is its warm-up, never judged,
        # and its command starts after these (the traffic is on before the look begins).
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _pair(stack: ExitStack, kind: str, canary: list[str], control: list[str]
          ) -> tuple[Server, Server]:
    binary = {"memcached": "memcached", "redis": "redis-server", "valkey": "valkey-server"}
    from support.servers import require

    exe = require(binary[kind])
    c = stack.enter_context(running(kind, canary, binary=exe))
    b = stack.enter_context(running(kind, control, binary=exe))
    return c, b


def _canary(kind: str, c: Server, b: Server, tmp: Path, *args: str
            ) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp / "canary.json"
    r = cli("canary", "--kind", kind, "--canary", f"127.0.0.1:{c.port}", "--control",
            f"127.0.0.1:{b.port}", *FAST, "--json", str(out), "--report",
            str(tmp / "canary.html"), *args, cwd=tmp)
    assert r.returncode != 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return r, json.loads(out.read_text())


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_a_harmful_change_is_rolled_back(kind: str, kvload_bin: str, in_tmp: Path) -> None:
    """The canary's memory limit evicts: its hit ratio falls below the control's beyond the
    default guardrail, "roll back" (exit 1) within a few looks."""
    with ExitStack() as stack:
        c, b = _pair(stack, kind, SMALL[kind], BIG[kind])
        with replayed(kvload_bin, kind, [c, b]):
            r, rec = _canary(kind, c, b, in_tmp)
    assert r.returncode == 1 and rec["outcome"] == "roll back", r.stdout
    assert "hit_ratio" in rec["deciding"], rec["deciding"]
    print(f"\n{kind}: roll back at {rec['decided_at_s']:.1f} s, look {len(rec['looks'])}")
    assert rec["decided_at_s"] < 45
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("look ")]
    assert len(lines) >= 6 and "interval after more looks" in lines[1], r.stdout
    assert "roll back" in lines[-1] and "hit_ratio" in lines[-1]
    assert "not rolled back by kvtune (no --rollback-on-breach)" in r.stdout
    page = (in_tmp / "canary.html").read_text()
    assert "roll back" in page and "<svg" in page and "hit_ratio not worse than 0.01" in page


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_a_helpful_change_is_promoted(kind: str, kvload_bin: str, in_tmp: Path) -> None:
    """The control evicts and the canary does not: the goal "hit_ratio better" is met and
    the guardrails the operator gave hold: promote (exit 0)."""
    with ExitStack() as stack:
        c, b = _pair(stack, kind, BIG[kind], SMALL[kind])
        with replayed(kvload_bin, kind, [c, b]):
            r, rec = _canary(kind, c, b, in_tmp, "--goal", "hit_ratio better",
                             "--guardrail", "errors not worse than 1", "--guardrail",
                             "refused not worse than 1")
    assert r.returncode == 0 and rec["outcome"] == "promote", r.stdout
    goal = rec["rules_final"][0]
    assert goal["metric"] == "hit_ratio" and goal["state"] == "met" and goal["low"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_an_a_a_pair_agrees(kind: str, kvload_bin: str, in_tmp: Path) -> None:
    """The same configuration on both sides, the same traffic: no rule decided at any look
    over 2.25 s, 7 judged looks of 0.25 s (alpha 0.01 here, so that the test itself fails in
    at most 1% of runs).
    memcached, without latency figures of its own, is probed (kvload at 200 requests/s on
    keys of its own): its p99 per look on both sides, and its share of the requests said."""
    probe = ["--probe-rate", "200"] if kind == "memcached" else []
    with ExitStack() as stack:
        c, b = _pair(stack, kind, BIG[kind], BIG[kind])
        with replayed(kvload_bin, kind, [c, b], seconds=7):
            r, rec = _canary(kind, c, b, in_tmp, "--aa", "--max-time", "2.25s", "--alpha",
                             "0.01", *probe)
    assert rec["outcome"] == "A/A: the pair agrees" and r.returncode == 0, r.stdout
    assert len(rec["looks"]) >= 5
    if probe:
        assert all(lk[side]["probe_p99"] > 0 for lk in rec["looks"]
                   for side in ("canary", "control")), rec["looks"]
        assert "probe_p99 not worse than +10%" in rec["rules"]
        assert 0 < rec["probe_share"] < 0.2 and "the probe sent 200 requests/s" in r.stdout
    names = set(rec["looks"][-1]["canary"])
    assert {"cpu_per_request", "hit_ratio", "evictions", "errors", "refused"} <= names
    if kind != "memcached":  # the server's own latency figures
        assert rec["looks"][-1]["canary"]["p99"] > 0
        assert any(s["metric"] == "p99" for s in rec["rules_final"])


def _redis_study(tmp: Path, kind: str, canary: dict | None = None) -> tuple[str, Path]:
    """A stored study recommending a 16 MB memory limit with LRU eviction (with `canary`,
    its study file's canary: section), and its export."""
    p = kind + "."
    base = {p + "maxmemory_mb": 0, p + "maxmemory_policy": "noeviction"}
    rec = {p + "maxmemory_mb": 16, p + "maxmemory_policy": "allkeys-lru"}
    url = make_study(tmp, "mem", kind, base, rec, confirmed=True, cpus=None)
    if canary is not None:
        import optuna

        from kvtune.store import Store

        study = optuna.load_study(study_name="mem", storage=Store(url).storage)
        study.set_user_attr("spec", {**study.user_attrs["spec"], "canary": canary})
    r = cli("export", "mem", "--storage", url, "--format", kind, "-o", str(tmp / "exp"),
            cwd=tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    return url, tmp / "exp"


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_rollback_on_breach_applies_the_exports_rollback_and_reads_it_back(
        kind: str, kvload_bin: str, in_tmp: Path) -> None:
    """The canary runs the study's recommendation (checked by `kvtune verify` first), it
    breaches, and --rollback-on-breach puts each directive back to the rollback file's value
    (CONFIG SET), read back; the journal is left empty. The rules are the study's own
    (its canary: section)."""
    rules = ["hit_ratio not worse than 0.01", "errors not worse than 1"]
    url, exp = _redis_study(in_tmp, kind, {"goal": None, "guardrails": rules})
    with ExitStack() as stack:
        c, b = _pair(stack, kind, SMALL[kind], BIG[kind])
        with replayed(kvload_bin, kind, [c, b]):
            r, rec = _canary(kind, c, b, in_tmp, "--study", "mem", "--storage", url,
                             "--export", str(exp), "--rollback-on-breach")
        assert r.returncode == 1 and rec["outcome"] == "roll back", r.stdout
        assert rec["rules"] == rules
        assert any(f"ok      {kind} maxmemory: recommended 16mb" in ln
                   for ln in rec["verified"]), rec["verified"]
        assert rec["rollback"]["ok"] and "rolled back" in r.stdout, r.stdout
        check = rec["rollback"]["verify"]
        assert check["ok"] and "verify: the old configuration is back" in r.stdout, check
        assert any(f"ok      {kind} maxmemory: old configuration" in ln
                   for ln in check["lines"]), check
        assert "16777216" not in redis_call(c.port, "CONFIG", "GET", "maxmemory")
        assert "noeviction" in redis_call(c.port, "CONFIG", "GET", "maxmemory-policy")
        assert "allkeys-lru" in redis_call(b.port, "CONFIG", "GET", "maxmemory-policy") or \
            "noeviction" in redis_call(b.port, "CONFIG", "GET", "maxmemory-policy")
    assert not Path(os.environ["KVTUNE_JOURNAL"]).exists()


@pytest.mark.integration
def test_a_canary_not_running_the_change_is_not_watched(redis_bin: str, in_tmp: Path) -> None:
    url, _ = _redis_study(in_tmp, "redis")
    with running("redis", [], binary=redis_bin) as c, \
            running("redis", [], binary=redis_bin) as b:
        r = cli("canary", "--kind", "redis", "--canary", str(c.port), "--control",
                str(b.port), "--study", "mem", "--storage", url, *FAST, cwd=in_tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIFFERS redis maxmemory: recommended 16mb, found 0" in r.stdout, r.stdout
    assert "not watched" in r.stdout and "look 1" not in r.stdout


CONFIGS = {  # the operator's own files: the canary's (the change) and the control's
    "memcached": ("-m 16\n-p 11311\n-c 1024\n", "-m 128\n-p 11211\n-c 1024\n"),
    "redis": ("port 6380\nmaxmemory 16mb\nmaxmemory-policy allkeys-lru\n",
              "port 6379\nmaxmemory 0\nmaxmemory-policy noeviction\n"),
}
CONFIGS["valkey"] = CONFIGS["redis"]


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_the_operators_config_file_is_the_change_rolled_back_and_verified(
        kind: str, kvload_bin: str, in_tmp: Path) -> None:
    """The change from the operator's own config files (--config the canary's, --current-
    config the control's; their ports differ and are not a change): read back from the
    canary before watching, it breaches, --rollback-on-breach puts each changed setting
    back to the current file's value (journalled), and the old configuration is read back
    from the server; the journal is left empty."""
    new, old = in_tmp / f"canary-{kind}.conf", in_tmp / f"current-{kind}.conf"
    new.write_text(CONFIGS[kind][0])
    old.write_text(CONFIGS[kind][1])
    with ExitStack() as stack:
        c, b = _pair(stack, kind, SMALL[kind], BIG[kind])
        with replayed(kvload_bin, kind, [c, b]):
            r, rec = _canary(kind, c, b, in_tmp, "--config", str(new), "--current-config",
                             str(old), "--rollback-on-breach")
        assert r.returncode == 1 and rec["outcome"] == "roll back", r.stdout + r.stderr
        setting = "-m" if kind == "memcached" else "maxmemory"
        assert sorted(rec["change"]["settings"]) == (
            ["-m"] if kind == "memcached" else ["maxmemory", "maxmemory-policy"])
        assert any(f"ok      {kind} {setting}: in {new.name}" in ln
                   for ln in rec["verified"]), rec["verified"]
        assert rec["rollback"]["ok"] and rec["rollback"]["verify"]["ok"], r.stdout
        assert any(f"ok      {kind} {setting}: in {old.name}" in ln
                   for ln in rec["rollback"]["verify"]["lines"]), rec["rollback"]
        assert "verify: the old configuration is back on the canary" in r.stdout
        if kind == "memcached":
            assert mc_settings(c.port)["maxbytes"] == str(128 << 20)
        else:
            assert "noeviction" in redis_call(c.port, "CONFIG", "GET", "maxmemory-policy")
            assert "\n0\r" in redis_call(c.port, "CONFIG", "GET", "maxmemory")
    assert not Path(os.environ["KVTUNE_JOURNAL"]).exists()


@pytest.mark.integration
def test_a_canary_not_running_the_config_file_is_not_watched(redis_bin: str,
                                                            in_tmp: Path) -> None:
    new = in_tmp / "canary.conf"
    new.write_text(CONFIGS["redis"][0])
    with running("redis", [], binary=redis_bin) as c, \
            running("redis", [], binary=redis_bin) as b:
        r = cli("canary", "--kind", "redis", "--canary", str(c.port), "--control",
                str(b.port), "--config", str(new), *FAST, cwd=in_tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "DIFFERS redis maxmemory: in canary.conf 16mb, found 0" in r.stdout, r.stdout
    assert "not watched" in r.stdout and "look 1" not in r.stdout


CHILD = """
import json, sys, time
from pathlib import Path
from kvtune.canary import session as ses, watch
port, kind, settings = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
reader = watch.reader_of(kind)
class Slow:
    latency = reader.latency
    live_settings = reader.live_settings
    undo_kind = reader.undo_kind
    def settings(self, conn, names): return reader.settings(conn, names)
    def same(self, a, b): return reader.same(a, b)
    def set_setting(self, conn, name, value):
        reader.set_setting(conn, name, value)
        print("set", name, flush=True)
        time.sleep(60)
plan = ses.Plan(kind, [watch.parse_server(str(port), "canary")], [], [],
                rollback=ses.Rollback(Path("c"), Path("r"), settings),
                rollback_on_breach=True)
ses.apply_rollback(plan, Slow(), print)
"""
ROLLBACK = {"memcached": {"-m": "64"},
            "redis": {"maxmemory": "0", "maxmemory-policy": "noeviction"}}
ROLLBACK["valkey"] = ROLLBACK["redis"]


def _memory(kind: str, port: int) -> str:
    if kind == "memcached":
        return str(int(mc_settings(port)["maxbytes"]) >> 20)
    return redis_call(port, "CONFIG", "GET", "maxmemory").split()[-1]


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_a_rollback_killed_midway_is_put_back_by_kvtune_restore(kind: str,
                                                                in_tmp: Path) -> None:
    """SIGKILL after the first setting of the rollback was set: the journal holds the
    value the canary had, and `kvtune restore` puts it back (nothing applied that restore
    does not undo)."""
    from support.servers import require

    exe = require({"memcached": "memcached", "redis": "redis-server",
                   "valkey": "valkey-server"}[kind])
    first = next(iter(ROLLBACK[kind]))
    with running(kind, SMALL[kind], binary=exe) as c:
        before = _memory(kind, c.port)
        child = subprocess.Popen([sys.executable, "-I", "-c", CHILD, str(c.port), kind,
                                  json.dumps(ROLLBACK[kind])],
                                 cwd=in_tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
        try:
            assert child.stdout is not None
            lines = [child.stdout.readline() for _ in range(2)]
            assert lines[0].startswith("rolling back 1 canary"), lines
            assert lines[1].startswith(f"set {first}"), lines
            assert _memory(kind, c.port) != before  # the rollback's value is in
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        journal = json.loads(Path(os.environ["KVTUNE_JOURNAL"]).read_text())
        assert journal["entries"][0]["undo"] == watch_undo(kind)
        r = cli("restore", cwd=in_tmp)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _memory(kind, c.port) == before
    assert not Path(os.environ["KVTUNE_JOURNAL"]).exists()


def watch_undo(kind: str) -> str:
    from kvtune.canary import watch

    return watch.reader_of(kind).undo_kind


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["memcached", "redis", "valkey"])
def test_a_session_killed_while_watching_leaves_nothing_to_restore(
        kind: str, in_tmp: Path) -> None:
    from support.servers import require

    exe = require({"memcached": "memcached", "redis": "redis-server",
                   "valkey": "valkey-server"}[kind])
    with running(kind, [], binary=exe) as c, running(kind, [], binary=exe) as b:
        p = subprocess.Popen([sys.executable, "-I", "-m", "kvtune", "canary", "--kind", kind,
                              "--canary", str(c.port), "--control", str(b.port),
                              "--interval", "0.2s"], cwd=in_tmp,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert p.stdout is not None
        for _ in range(5):
            if p.stdout.readline().startswith("look 1"):
                break
        else:
            raise AssertionError("no look 1 in the session's first lines")
        p.send_signal(signal.SIGKILL)
        p.wait()
    r = cli("restore", cwd=in_tmp)  # in process, as after a rollback killed midway
    assert r.returncode == 0 and "Nothing to restore" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--canary", "10.0.0.1:11211", "--control", "11212"], "not a loopback address"),
    # digits int() refuses ("²") or reads as others ("\u0661\u0661\u0662\u0661\u0661")
    (["--canary", "127.0.0.1:\u00b2", "--control", "11212"], "is not a TCP port"),
    (["--canary", "11211", "--control", "\u0661\u0661\u0662\u0661\u0662"], "is not a TCP port"),
    (["--canary", "11211", "--control", "11211"], "named twice"),
    (["--canary", "11211", "--canary", "11213", "--control", "11212"], "pair up"),
    (["--canary", "11211", "--control", "11212", "--guardrail", "p99 worse"], "write METRIC"),
    (["--canary", "11211", "--control", "11212", "--guardrail", "p99 not worse"],
     "unknown metric 'p99'"),  # memcached has no latency figures of its own
    (["--canary", "11211", "--control", "11212", "--interval", "1x"], "--interval"),
    (["--canary", "11211", "--control", "11212", "--max-time", "1s"], "at least two"),
    (["--canary", "11211", "--control", "11212", "--rollback-on-breach"], "needs --export"),
    (["--canary", "11211", "--control", "11212", "--export", "nowhere"], "not a directory"),
    (["--canary", "11211", "--control", "11212", "--alpha", "2"], "--alpha"),
    (["--canary", "11211", "--control", "11212", "--probe-rate", "0"], "--probe-rate"),
    (["--canary", "11211", "--control", "11212", "--aa", "--study", "x"], "--study with --aa"),
    (["--canary", "11211", "--control", "11212", "--current-config", "a.conf"],
     "needs --config"),
    (["--canary", "11211", "--control", "11212", "--config", "nowhere.conf"],
     "nowhere.conf"),
    (["--canary", "11211", "--control", "11212", "--config", "same.conf", "--current-config",
      "same.conf"], "sets nothing differently"),
    (["--canary", "11211", "--control", "11212", "--config", "same.conf",
      "--rollback-on-breach"], "needs --current-config"),
    (["--canary", "11211", "--control", "11212", "--config", "same.conf", "--export", "x"],
     "one source"),
    (["--canary", "11211", "--control", "11212", "--config", "threads.conf",
      "--current-config", "same.conf", "--rollback-on-breach"], "need a restart"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything(in_tmp: Path, args: list[str],
                                                          says: str) -> None:
    (in_tmp / "same.conf").write_text("-m 64\n-p 11211\n-t 4\n")
    (in_tmp / "threads.conf").write_text("-m 64\n-t 2\n")
    r = cli("canary", "--kind", "memcached", *args, cwd=in_tmp)
    assert r.returncode == 2, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "look" not in r.stdout


def test_an_unknown_kind_is_refused(in_tmp: Path) -> None:
    r = cli("canary", "--kind", "nginx", "--canary", "1", "--control", "2", cwd=in_tmp)
    assert r.returncode == 2 and "unknown server kind 'nginx'" in r.stderr, r.stderr


def test_a_memcached_export_cannot_be_rolled_back_live(in_tmp: Path) -> None:
    """memcached's options but -m need a restart: --rollback-on-breach with an export that
    changes its threads is refused before watching, saying how its rollback is installed."""
    url = make_study(in_tmp, "mc", "memcached", {"memcached.threads": 4},
                     {"memcached.threads": 2}, confirmed=True, cpus=None)
    assert cli("export", "mc", "--storage", url, "--format", "memcached", "-o",
               str(in_tmp / "exp"), cwd=in_tmp).returncode == 0
    r = cli("canary", "--kind", "memcached", "--canary", "11211", "--control", "11212",
            "--export", str(in_tmp / "exp"), "--rollback-on-breach", cwd=in_tmp)
    assert r.returncode == 2 and "memcached -t: options that need a restart" in r.stderr, \
        r.stderr


def test_the_studys_canary_rules_are_checked_naming_the_study(in_tmp: Path) -> None:
    url, _ = _redis_study(in_tmp, "redis", {"goal": "p99 better",
                                             "guardrails": ["p99 not worse than 5"]})
    r = cli("canary", "--kind", "redis", "--canary", "6380", "--control", "6379", "--study",
            "mem", "--storage", url, cwd=in_tmp)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "mem: canary.guardrails 'p99 not worse than 5': the margin of p99 is a " \
        "percentage" in r.stderr, r.stderr


@pytest.mark.integration
def test_a_verified_memcached_canary_is_watched_until_the_time_limit(
        memcached_bin: str, in_tmp: Path) -> None:
    """`kvtune verify` passes on a memcached canary started with the recommended flags (its
    command line), the session watches, and without traffic nothing can be decided:
    inconclusive at the time limit (exit 1), each look saying it keeps watching."""
    url = make_study(in_tmp, "mc", "memcached", {"memcached.threads": 4},
                     {"memcached.threads": 2}, confirmed=True, cpus=None)
    with running("memcached", ["-t", "2"], binary=memcached_bin) as c, \
            running("memcached", ["-t", "4"], binary=memcached_bin) as b:
        r = cli("canary", "--kind", "memcached", "--canary", str(c.port), "--control",
                str(b.port), "--study", "mc", "--storage", url, "--interval", "0.2s",
                "--max-time", "1s", "--warmup", "0", cwd=in_tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ok      memcached -t: recommended 2" in r.stdout, r.stdout
    looks = [ln for ln in r.stdout.splitlines() if ln.startswith("look ")]
    assert looks and all("keep watching" in ln for ln in looks[:-1]), r.stdout
    assert "inconclusive" in looks[-1] and "\ninconclusive: " in r.stdout, r.stdout


@pytest.mark.integration
def test_a_server_that_dies_mid_session_ends_it_in_one_line(redis_bin: str,
                                                            in_tmp: Path) -> None:
    import threading

    with running("redis", [], binary=redis_bin) as c, \
            running("redis", [], binary=redis_bin) as b:
        timer = threading.Timer(1.0, c.proc.kill)
        timer.start()
        try:
            r = cli("canary", "--kind", "redis", "--canary", str(c.port), "--control",
                    str(b.port), "--interval", "0.2s", "--max-time", "10s", cwd=in_tmp)
        finally:
            timer.cancel()
    assert r.returncode == 3, r.stdout + r.stderr
    assert "stopped answering" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2, r.stderr


def test_a_port_with_no_server_is_refused(in_tmp: Path) -> None:
    from kvtune.targets.base import free_port

    a, b = free_port(), free_port()
    r = cli("canary", "--kind", "memcached", "--canary", str(a), "--control", str(b),
            "--interval", "0.2s", "--max-time", "1s", cwd=in_tmp)
    assert r.returncode == 2 and "cannot connect" in r.stderr, r.stdout + r.stderr


@pytest.mark.integration
def test_a_memcached_memory_limit_is_rolled_back_live(kvload_bin: str, in_tmp: Path) -> None:
    """A study recommending -m 16 (checked on the canary's command line by kvtune verify),
    the canary evicts and breaches, and --rollback-on-breach puts back the export's
    rollback (Debian's service lines: memcached's own 64 MB) with cache_memlimit, read back
    from `stats settings`; the journal is left empty."""
    url = make_study(in_tmp, "mcm", "memcached", {"memcached.memory_mb": 64},
                     {"memcached.memory_mb": 16}, confirmed=True, cpus=None)
    assert cli("export", "mcm", "--storage", url, "--format", "memcached", "-o",
               str(in_tmp / "exp"), cwd=in_tmp).returncode == 0
    with ExitStack() as stack:
        c, b = _pair(stack, "memcached", SMALL["memcached"], BIG["memcached"])
        with replayed(kvload_bin, "memcached", [c, b]):
            r, rec = _canary("memcached", c, b, in_tmp, "--study", "mcm", "--storage", url,
                             "--export", str(in_tmp / "exp"), "--rollback-on-breach")
        assert r.returncode == 1 and rec["outcome"] == "roll back", r.stdout
        assert any("ok      memcached -m: recommended 16" in ln for ln in rec["verified"]), \
            rec["verified"]
        assert rec["rollback"]["ok"], r.stdout
        assert rec["rollback"]["servers"][0]["before"] == {"-m": "16"}
        check = rec["rollback"]["verify"]
        assert check["ok"] and any("ok      memcached -m: in memcached.conf 64, found 64" in ln
                                   for ln in check["lines"]), check
        assert mc_settings(c.port)["maxbytes"] == str(64 << 20)
        assert mc_settings(b.port)["maxbytes"] == str(128 << 20)
    assert not Path(os.environ["KVTUNE_JOURNAL"]).exists()


@pytest.mark.integration
def test_kvtune_restore_puts_back_a_memcached_memory_limit(memcached_bin: str,
                                                           in_tmp: Path) -> None:
    """The journal entry a memcached rollback writes before cache_memlimit, left by a killed
    session (the journal closed without restoring), is undone by `kvtune restore`."""
    from kvtune.canary import watch
    from kvtune.host.journal import Journal

    reader = watch.reader_of("memcached")
    with running("memcached", ["-m", "16"], binary=memcached_bin) as c:
        journal = Journal(study="killed canary")
        journal.open()
        journal.record_undo(reader.undo_kind, {"port": c.port, "directive": "-m",
                                               "value": "16"})
        conn = watch.Server("canary", "127.0.0.1", c.port).connect()
        reader.set_setting(conn, "-m", "64")
        conn.close()
        journal.close()  # as a SIGKILL leaves it: the entry on disk, nothing restored
        assert mc_settings(c.port)["maxbytes"] == str(64 << 20)
        r = cli("restore", cwd=in_tmp)
        assert r.returncode == 0 and "-m 16 put back" in r.stdout, r.stdout + r.stderr
        assert mc_settings(c.port)["maxbytes"] == str(16 << 20)
    assert not Path(os.environ["KVTUNE_JOURNAL"]).exists()
