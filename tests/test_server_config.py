"""`target.config` (issue 22 item 1): the operator's memcached.conf (Debian), sysconfig
(RHEL) or redis.conf (with includes) becomes the baseline: placement settings replaced and
said, searched knobs start from the operator's values, other safe settings fixed, unsafe
ones refused before anything runs (tests/bad-inputs/config-*.yaml)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.cli import kvtune as run_kvtune

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
    # The setting is named, never its value (issue 29: nothing read is echoed).
    for replaced in ("`-d` replaced", "`logfile` replaced", "`-p` replaced",
                     "`-u` replaced", "`-l` replaced", "`-P` replaced"):
        assert replaced in notes, notes
    for value in ("11211", "memcache ", "127.0.0.1", "/var/run", "/var/log"):
        assert value not in notes, notes
    assert "memcached.threads baseline 2 (the operator's value)" in notes


def test_a_rhel_sysconfig_is_read_too(tmp_path: Path) -> None:
    (tmp_path / "memcached").write_text(RHEL)
    loaded = load_study(_study(tmp_path, "memcached", "memcached", "[memcached.threads]"))
    assert _defaults(loaded)["memcached.threads"] == 3
    assert loaded.spec.target.args == ["-c", "2048", "-m", "128"]
    assert "`-p` replaced" in "\n".join(loaded.notes)


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
    chk = run_kvtune("check", str(study), cwd=tmp_path, env=env, timeout=120)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    assert "`-p` replaced: kvtune's own port (target.port)" in chk.stdout + chk.stderr, chk.stdout
    run = run_kvtune("run", str(study), "--json", cwd=tmp_path, env=env, timeout=300)
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


# -- issue 29: nothing read is echoed; includes stay home; bounded reads ---------------------

SECRET = "root:$6$s3cr3tHash:19000:0:99999:7:::"


def _refusal(tmp_path: Path, kind: str, config: str) -> str:
    from kvtune.errors import UserError

    with pytest.raises(UserError) as e:
        load_study(_study(tmp_path, kind, config, "[]"))
    return str(e.value)


@pytest.mark.parametrize("target", ["/etc/shadow", "/proc/self/environ", "../outside.conf",
                                    "link-out.conf"])
def test_an_include_outside_the_configs_tree_is_refused_unread(tmp_path: Path,
                                                               target: str) -> None:
    home = tmp_path / "conf"
    home.mkdir()
    (tmp_path / "outside.conf").write_text(f"{SECRET}\nhz 20\n")
    (home / "link-out.conf").symlink_to(tmp_path / "outside.conf")
    (home / "redis.conf").write_text(f"hz 10\ninclude {target}\n")
    text = _refusal(home, "redis", "redis.conf")
    assert "redis.conf, line 2: `include` refused: it names a file outside" in text, text
    assert "s3cr3t" not in text and target not in text, text


def test_a_config_under_proc_sys_or_dev_is_not_read(tmp_path: Path) -> None:
    for path, top in (("/proc/self/environ", "/proc"), ("/dev/zero", "/dev"),
                      ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys")):
        text = _refusal(tmp_path, "redis", path)
        assert ("not a regular file" in text or f"is under {top}" in text), text
        assert "PATH=" not in text and "madvise" not in text, text


def test_unknown_lines_are_never_echoed(tmp_path: Path) -> None:
    """A file of secrets read as a config: each line is an unknown directive or option,
    named by file and line only (`kvtune check` used to print every shadow line)."""
    (tmp_path / "shadow").write_text(f"{SECRET}\ndaemon:*:19000:0:99999:7:::\n")
    text = _refusal(tmp_path, "memcached", "shadow")
    assert "shadow, line 1: not a memcached option" in text and "s3cr3t" not in text, text
    text = _refusal(tmp_path, "redis", "shadow")
    assert "none of its lines is a Redis directive" in text and "s3cr3t" not in text, text
    (tmp_path / "mixed.conf").write_text(f"hz 10\n{SECRET} x\n-Q --bogus=\x1b[31mred\n")
    loaded = load_study(_study(tmp_path, "redis", "mixed.conf", "[]"))
    notes = "\n".join(loaded.notes)
    assert "mixed.conf, line 2: an unknown directive, left out" in notes, notes
    assert "mixed.conf, line 3: an unknown directive, left out" in notes, notes
    assert "s3cr3t" not in notes and "root:" not in notes and "bogus" not in notes, notes
    (tmp_path / "value.conf").write_text("maxmemory 1tb-[/bold]s3cr3t\n")
    text = _refusal(tmp_path, "redis", "value.conf")
    assert "value.conf, line 1: maxmemory: its value is not one kvtune passes" in text, text
    assert "s3cr3t" not in text and "[/bold]" not in text, text
    (tmp_path / "mc.conf").write_text("-m 64\n-Q s3cr3t\n-c [/bold]\n-o s3cr3t=1,hashpower=x\n")
    text = _refusal(tmp_path, "memcached", "mc.conf")
    assert "mc.conf, line 2: an unknown memcached option" in text, text
    assert "mc.conf, line 3: -c: its value is not one kvtune passes" in text, text
    assert "line 4: an unknown -o option" in text and "line 4: -o hashpower: its value" \
        in text, text
    assert "s3cr3t" not in text and "[/bold]" not in text, text


def test_every_file_of_a_config_is_read_with_a_bound_and_all_together_too(
        tmp_path: Path) -> None:
    """Eight hard links to one 1 MiB file: refused at the total bound, without reading
    (or holding) 8 MiB."""
    import time

    big = tmp_path / "big.conf"
    big.write_text(("# " + "x" * 1020 + "\n") * 1023)
    incs = []
    for i in range(8):
        os.link(big, tmp_path / f"big{i}.conf")
        incs.append(f"include big{i}.conf")
    (tmp_path / "redis.conf").write_text("\n".join(incs) + "\n")
    t0 = time.monotonic()
    text = _refusal(tmp_path, "redis", "redis.conf")
    assert "more than 4 MiB together" in text, text
    assert time.monotonic() - t0 < 10
    (tmp_path / "huge.conf").write_text("# " + "x" * (2 << 20) + "\n")
    text = _refusal(tmp_path, "redis", "huge.conf")
    assert "more than the 1 MiB" in text, text


@pytest.mark.integration  # runs kvtune check as a process
def test_markup_and_escape_sequences_in_a_config_do_not_reach_the_terminal(
        tmp_path: Path) -> None:
    """`[/bold]` in a redis.conf used to raise rich's MarkupError in `kvtune check`;
    `[link=...]` rendered a link; ESC sequences reached the terminal."""
    name = "x[bold]y[link=https:evil]z"
    (tmp_path / f"{name}.conf").write_text("hz 10\n[/bold] \x1b]8;;http://evil\x07\n"
                                           "databases 16\n")
    study = _study(tmp_path, "redis", f"'{name}.conf'", "[]")
    r = run_kvtune("check", str(study), cwd=tmp_path, env={**os.environ,
                            "TERM": "xterm", "FORCE_COLOR": "1"}, timeout=120)
    out = r.stdout + r.stderr
    assert "Traceback" not in out and r.returncode in (0, 2), out
    assert "\x1b]8" not in out and "evil\x07" not in out, repr(out)
    assert "x[bold]y[link=https:evil]z.conf" in out  # the file's name, shown as text
