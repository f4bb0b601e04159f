"""`target.config` (issue 22 item 1): the operator's memcached.conf (Debian), sysconfig
(RHEL) or redis.conf (with includes) becomes the baseline: placement settings replaced and
said, searched knobs start from the operator's values, other safe settings fixed, unsafe
ones refused before anything runs (tests/bad-inputs/config-*.yaml)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvtune.study.loader import load_study

DEBIAN = """\
# memcached default config file (Debian)
-d
logfile /var/log/memcached.log
-m 64
-p 11211
-u memcache
-l 127.0.0.1
-c 1024
-t 2
-o hashpower=18,no_lru_crawler
-P /var/run/memcached/memcached.pid
"""

RHEL = """\
PORT="11211"
USER="memcached"
MAXCONN="2048"
CACHESIZE="128"
OPTIONS="-l 127.0.0.1,::1 -t 3"
"""


def _study(d: Path, kind: str, config: str, knobs: str) -> Path:
    p = d / "s.yaml"
    p.write_text(f"study: cfg\ntarget: {{kind: {kind}, cpus: '0', config: {config}}}\n"
                 f"load: {{mode: closed, duration: 300ms, warmup: 0, cpus: '1'}}\n"
                 f"knobs: {knobs}\nrepetitions: 1\n")
    return p


def _defaults(loaded) -> dict[str, object]:
    return {k.name: k.default for k in loaded.knobs}


def test_a_debian_memcached_conf_is_the_baseline(tmp_path: Path) -> None:
    (tmp_path / "memcached.conf").write_text(DEBIAN)
    loaded = load_study(_study(tmp_path, "memcached", "memcached.conf",
                               "[memcached.threads, memcached.lru_crawler]"))
    assert _defaults(loaded)["memcached.threads"] == 2
    assert _defaults(loaded)["memcached.lru_crawler"] is False
    # Safe settings no knob searches are fixed, as written.
    assert loaded.spec.target.args == ["-m", "64", "-c", "1024", "-o", "hashpower=18"]
    assert loaded.spec.target.config == str(tmp_path / "memcached.conf")
    notes = "\n".join(loaded.notes)
    for replaced in ("`-d` replaced", "`logfile` replaced", "`-p 11211` replaced",
                     "`-u memcache` replaced", "`-l 127.0.0.1` replaced",
                     "`-P /var/run/memcached/memcached.pid` replaced"):
        assert replaced in notes, notes
    assert "memcached.threads baseline 2 (the operator's value)" in notes


def test_a_rhel_sysconfig_is_read_too(tmp_path: Path) -> None:
    (tmp_path / "memcached").write_text(RHEL)
    loaded = load_study(_study(tmp_path, "memcached", "memcached", "[memcached.threads]"))
    assert _defaults(loaded)["memcached.threads"] == 3
    assert loaded.spec.target.args == ["-c", "2048", "-m", "128"]
    assert "`-p 11211` replaced" in "\n".join(loaded.notes)


def test_a_redis_conf_with_includes(tmp_path: Path) -> None:
    (tmp_path / "redis.conf").write_text(
        "bind 127.0.0.1 ::1\nport 6379\ndatabases 16\nappendonly yes\n"
        "include local.conf\nmaxmemory-policy allkeys-lru\n")
    (tmp_path / "local.conf").write_text("hz 25\nactiverehashing no\n")
    loaded = load_study(_study(tmp_path, "redis", "redis.conf", "[redis.hz]"))
    assert _defaults(loaded)["redis.hz"] == 25
    assert loaded.spec.target.args == ["--activerehashing", "no",
                                       "--maxmemory-policy", "allkeys-lru"]
    notes = "\n".join(loaded.notes)
    assert "`databases` left out" in notes
    assert "`appendonly` replaced: the measured server runs without persistence" in notes


def test_the_study_files_own_default_wins_and_is_said(tmp_path: Path) -> None:
    (tmp_path / "memcached.conf").write_text(DEBIAN)
    loaded = load_study(_study(tmp_path, "memcached", "memcached.conf",
                               "[{name: memcached.threads, default: 4}]"))
    assert _defaults(loaded)["memcached.threads"] == 4
    assert "default for memcached.threads wins over target.config's 2" in \
        "\n".join(loaded.notes)


def test_kvtune_check_shows_the_substitution_and_run_measures_the_operators_baseline(
        tmp_path: Path, memcached_bin: str, kvload_bin: str) -> None:
    (tmp_path / "memcached.conf").write_text(DEBIAN)
    study = _study(tmp_path, "memcached", "memcached.conf", "[memcached.threads]")
    env = {**os.environ, "KVLOAD": kvload_bin, "COLUMNS": "200"}
    chk = subprocess.run([sys.executable, "-m", "kvtune", "check", str(study)], env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    assert "`-p 11211` replaced: kvtune's own port (target.port)" in chk.stdout + chk.stderr
    run = subprocess.run([sys.executable, "-m", "kvtune", "run", str(study), "--json"],
                         env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    doc = json.loads(run.stdout)
    assert doc["config"]["memcached.threads"] == 2 and not doc.get("failed"), doc


@pytest.mark.parametrize("line", ["-e /dev/shm/mc", "-S", "-o ext_path=/tmp/x:64m"])
def test_an_unsafe_setting_is_refused_with_its_line(tmp_path: Path, line: str) -> None:
    from kvtune.errors import UserError

    (tmp_path / "memcached.conf").write_text(f"-m 64\n{line}\n")
    with pytest.raises(UserError) as e:
        load_study(_study(tmp_path, "memcached", "memcached.conf", "[]"))
    text = "\n".join(e.value.problems)
    assert "memcached.conf, line 2" in text, e.value.problems
    # The setting is named, its value never quoted (a refused line may hold a secret).
    assert line.split()[-1] not in text or line.split()[-1].startswith("-"), text


def test_a_refused_redis_line_is_named_without_its_secret(tmp_path: Path) -> None:
    from kvtune.errors import UserError

    (tmp_path / "redis.conf").write_text("requirepass s3cr3t-value\nport 6379\n"
                                         "tls-key-file-pass an0ther-secret\n")
    with pytest.raises(UserError) as e:
        load_study(_study(tmp_path, "redis", "redis.conf", "[]"))
    text = "\n".join(e.value.problems) + str(e.value)
    assert "'requirepass' is refused" in text and "s3cr3t" not in text, text
