"""`kvtune init` (issue 41): the server's CPUs and NUMA node decide the study's placement, its
configuration file (Debian's memcached.conf, RHEL's sysconfig, a redis.conf or valkey.conf)
is judged as target.config is, a running memcached's argv becomes its configuration, and the
file written is commented, parses, and is never written over without --force. Unit tests:
nothing is started (the running-server path is the README's test, tests/test_readme.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.cli import cli

from kvtune.initcmd.cpus import Topology, choose, cpu_list, process_cpus, read_topology
from kvtune.kinds.memcached.init import INIT as MEMCACHED
from kvtune.kinds.valkey.init import INIT as VALKEY

DEBIAN = """\
# /etc/memcached.conf as Debian ships it, with the operator's own settings
-d
logfile /var/log/memcached.log
-m 64
-p 11211
-u memcache
-l 127.0.0.1
-c 1024
-t 4
-P /var/run/memcached/memcached.pid
"""
SYSCONFIG = 'PORT="11211"\nUSER="memcached"\nMAXCONN="1024"\nCACHESIZE="64"\n' \
            'OPTIONS="-l 127.0.0.1 -t 4"\n'
VALKEY_CONF = "port 6379\nbind 127.0.0.1\ndaemonize no\nlogfile /var/log/valkey/valkey.log\n" \
              "dir /var/lib/valkey\nmaxmemory 64mb\nmaxclients 1024\nio-threads 2\n"


# -- CPUs -------------------------------------------------------------------------------------


def big_host() -> Topology:
    """2 nodes of 16 cores, 2 threads each: CPU n and n+32 are siblings."""
    nodes: dict[int, tuple[int, ...]] = {0: (*range(0, 16), *range(32, 48)),
                                         1: (*range(16, 32), *range(48, 64))}
    siblings: dict[int, tuple[int, ...]] = {c: (c % 32, c % 32 + 32) for c in range(64)}
    return Topology(tuple(range(64)), nodes, siblings)


def test_two_cpus_unpinned_give_the_server_one_and_the_load_the_other() -> None:
    p = choose(Topology((0, 1), {0: (0, 1)}), allowed=(0, 1))
    assert (p.server, p.load) == ((0,), (1,))
    assert "unpinned" in p.why[0] and "other cores" in p.why[0]


def test_a_pinned_server_keeps_its_cpus_and_the_load_avoids_their_siblings() -> None:
    p = choose(big_host(), allowed=(0, 1, 2, 3))
    assert p.server == (0, 1, 2, 3)
    assert not set(p.load) & {0, 1, 2, 3, 32, 33, 34, 35}  # no sibling of a server CPU
    assert len(p.load) == 4 and all(c in big_host().nodes[0] for c in p.load)  # its node
    assert "pinned to CPUs 0-3" in p.why[0] and "sibling" in p.why[1]


def test_an_unpinned_server_on_two_nodes_gets_its_node_and_the_load_the_other() -> None:
    p = choose(big_host(), allowed=tuple(range(64)), running_on=20)
    assert set(p.server) == set(big_host().nodes[1])
    assert set(p.load) <= set(big_host().nodes[0]) and len(p.load) == 32
    assert "NUMA node 1" in p.why[0]


def test_one_node_unpinned_splits_by_core() -> None:
    top = Topology((0, 1, 2, 3), {0: (0, 1, 2, 3)}, {0: (0, 2), 2: (0, 2), 1: (1, 3),
                                                     3: (1, 3)})
    p = choose(top)
    assert (p.server, p.load) == ((0, 2), (1, 3))  # siblings stay together


def test_a_host_with_no_cpu_for_the_load_is_refused() -> None:
    with pytest.raises(ValueError, match="no CPU is left for the load"):
        choose(Topology((0,), {0: (0,)}))
    with pytest.raises(ValueError, match=r"siblings.*load\.host"):
        choose(Topology((0, 1), {0: (0, 1)}, {0: (0, 1), 1: (0, 1)}), allowed=(0,))


def test_cpu_lists_and_status_lines() -> None:
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert process_cpus("Name:\tmemcached\nCpus_allowed_list:\t0-3,8\n") == (0, 1, 2, 3, 8)
    assert process_cpus("Cpus_allowed_list:\t0-99999999\n") is None  # beyond any CPU
    assert process_cpus("Name: x\n") is None


def test_the_topology_of_a_sysfs_tree(tmp_path: Path) -> None:
    cpu = tmp_path / "devices/system/cpu"
    for c in range(4):
        (cpu / f"cpu{c}/topology").mkdir(parents=True)
        (cpu / f"cpu{c}/topology/thread_siblings_list").write_text(f"{c % 2},{c % 2 + 2}\n")
    (cpu / "online").write_text("0-3\n")
    for n, cpus in ((0, "0,2"), (1, "1,3")):
        (tmp_path / f"devices/system/node/node{n}").mkdir(parents=True)
        (tmp_path / f"devices/system/node/node{n}/cpulist").write_text(cpus + "\n")
    top = read_topology(str(tmp_path))
    assert top.online == (0, 1, 2, 3) and top.nodes == {0: (0, 2), 1: (1, 3)}
    assert top.core(2) == (0, 2)
    assert read_topology(str(tmp_path / "none")).nodes  # no sysfs: one node, every CPU


# -- the kinds' parts ---------------------------------------------------------------------------


def test_a_memcached_argv_becomes_its_configuration() -> None:
    argv = ["/usr/bin/memcached", "-m", "64", "-p", "11211", "-u", "memcache", "-l",
            "127.0.0.1", "-c", "1024", "-t", "4", "-o", "modern,lru_maintainer", "-R", "20"]
    text = MEMCACHED.argv_config(argv)
    assert text.splitlines() == ["-m 64", "-p 11211", "-u memcache", "-l 127.0.0.1",
                                 "-c 1024", "-t 4", "-o modern,lru_maintainer", "-R 20"]
    assert MEMCACHED.recognizes(text) and MEMCACHED.recognizes(DEBIAN)
    assert MEMCACHED.recognizes(SYSCONFIG) and not MEMCACHED.recognizes(VALKEY_CONF)
    assert VALKEY.recognizes(VALKEY_CONF) and not VALKEY.recognizes(DEBIAN)
    assert VALKEY.config_path_in_argv(["valkey-server", "/etc/valkey/valkey.conf"]) \
        == "/etc/valkey/valkey.conf"
    assert VALKEY.config_path_in_argv(["valkey-server 127.0.0.1:6379"]) is None


def test_the_threads_range_holds_the_operators_value() -> None:
    assert "range: [1, 4]" in MEMCACHED.knobs({"-t": "4"}, 1)[0]
    assert "range: [1, 12]" in MEMCACHED.knobs({"-t": "12"}, 2)[0]
    assert "range: [1, 16]" in MEMCACHED.knobs({}, 32)[0]
    assert not any("io_threads" in k for k in VALKEY.knobs({}, 1))  # one CPU: no I/O threads
    assert "range: [1, 4]" in VALKEY.knobs({"io-threads": "4"}, 1)[0]


# -- the command ------------------------------------------------------------------------------


def _init(tmp: Path, *args: str) -> tuple[int, str, str]:
    r = cli("init", *args, cwd=tmp)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize(("name", "text", "kind", "baseline"), [
    ("memcached.conf", DEBIAN, "memcached", "-t"),
    ("memcached", SYSCONFIG, "memcached", "-t"),
    ("valkey.conf", VALKEY_CONF, "valkey", "io-threads"),
])
def test_a_study_from_a_configuration_file(tmp_path: Path, name: str, text: str, kind: str,
                                           baseline: str) -> None:
    (tmp_path / name).write_text(text)
    code, out, err = _init(tmp_path, "--config", name, "--slo", "p99_us <= 1ms")
    assert code == 0, err
    study = (tmp_path / "study.yaml").read_text()
    doc = yaml.safe_load(study)
    assert doc["target"]["kind"] == kind
    assert doc["target"]["config"] == str(tmp_path / name)
    assert doc["objective"] == {"metric": "capacity", "slo": "p99_us <= 1000",
                                "precision": 0.03}
    assert doc["target"]["cpus"] and doc["load"]["cpus"]
    assert not set(doc["target"]["cpus"].split(",")) & set(doc["load"]["cpus"].split(","))
    # Commented: where each choice came from.
    assert "# ^ the configuration file given (--config): the baseline" in study
    assert "never competes with the server" in study or "pinned" in study
    assert f"study '{kind}': " in out and "wrote study.yaml" in out
    from kvtune.study.loader import parse_study

    parse_study(study, "study.yaml", base_dir=tmp_path)  # what kvtune check parses first


def test_a_bad_configuration_file_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "memcached.conf").write_text("-m 64\n-Z\n-e /var/lib/memcached/file\n")
    code, _, err = _init(tmp_path, "--config", "memcached.conf", "--slo", "p99_us <= 1ms")
    assert code == 2 and "Traceback" not in err
    assert "memcached.conf, line 2: memcached -Z is refused" in err
    assert "memcached.conf, line 3: memcached -e is refused" in err
    assert "/var/lib/memcached/file" not in err  # a value kvtune did not validate: not echoed
    assert not (tmp_path / "study.yaml").exists()
    # A file no kind reads: said, with how to say which.
    (tmp_path / "odd.conf").write_text("hello world\n")
    code, _, err = _init(tmp_path, "--config", "odd.conf", "--slo", "p99_us <= 1ms")
    assert code == 2 and "say which with --kind" in err and "hello" not in err
    code, _, err = _init(tmp_path, "--config", "missing.conf", "--slo", "p99_us <= 1ms")
    assert code == 2 and "missing.conf" in err
    assert "No such file" in err or "does not exist" in err


def test_an_existing_study_is_not_written_over_without_force(tmp_path: Path) -> None:
    (tmp_path / "valkey.conf").write_text(VALKEY_CONF)
    (tmp_path / "study.yaml").write_text("mine\n")
    args = ("--config", "valkey.conf", "--slo", "p99_us <= 2ms")
    code, _, err = _init(tmp_path, *args)
    assert code == 2 and "exists" in err and "--force" in err
    assert (tmp_path / "study.yaml").read_text() == "mine\n"
    code, _, err = _init(tmp_path, *args, "--force")
    assert code == 0, err
    assert "kind: valkey" in (tmp_path / "study.yaml").read_text()


def test_the_slo_and_objective_are_checked_and_asked_for(tmp_path: Path) -> None:
    (tmp_path / "memcached.conf").write_text(DEBIAN)
    code, _, err = _init(tmp_path, "--config", "memcached.conf")
    assert code == 2 and "--slo" in err  # stdin is no terminal: nothing asked
    code, _, err = _init(tmp_path, "--config", "memcached.conf", "--slo", "p99 <= 1ms")
    assert code == 2 and "--slo" in err
    code, _, err = _init(tmp_path, "--config", "memcached.conf", "--objective", "p99_us")
    assert code == 2 and "--rate" in err
    code, _, err = _init(tmp_path, "--config", "memcached.conf", "--objective", "p99_us",
                         "--rate", "20k", "--slo", "p99_us <= 2ms", "-o", "lat.yaml")
    assert code == 0, err  # a rate in the grammar of a study file (issue 41)
    doc = yaml.safe_load((tmp_path / "lat.yaml").read_text())
    assert doc["objective"] == "p99_us" and doc["load"]["rate"] == 20000
    code, _, err = _init(tmp_path, "--config", "memcached.conf", "--objective", "p99_us",
                         "--rate", "20x", "--slo", "p99_us <= 2ms", "-o", "bad.yaml")
    assert code == 2 and "--rate: '20x' is not" in err and "50k" in err, err
    assert not (tmp_path / "bad.yaml").exists()
    assert "p99_us <= 2000" in doc["constraints"]
    code, _, err = _init(tmp_path, "--capture", "60s", "--config", "memcached.conf",
                         "--slo", "p99_us <= 1ms")
    assert code == 2 and "--capture records a running server" in err
    code, _, err = _init(tmp_path, "--slo", "p99_us <= 1ms")
    assert code == 2 and "--pid or --port" in err


def test_quick_is_a_short_study(tmp_path: Path) -> None:
    (tmp_path / "memcached.conf").write_text(DEBIAN)
    code, _, err = _init(tmp_path, "--config", "memcached.conf", "--slo", "p99_us <= 1ms",
                         "--quick")
    assert code == 0, err
    doc = yaml.safe_load((tmp_path / "study.yaml").read_text())
    assert doc["budget"] == {"trials": 1} and doc["repetitions"] == 1
    assert doc["evaluation"]["ablation"] is False
    # Its one trial is measured once: not again and again to race the defaults.
    assert doc["evaluation"]["intensify"] is False


def test_on_a_terminal_the_slo_and_objective_are_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import sys

    from kvtune.initcmd import _ask

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", Terminal("\np99_us <= 2ms\n"))
    assert _ask(None, None) == ("p99_us <= 2ms", "capacity")  # capacity by default
    monkeypatch.setattr(sys, "stdin", Terminal("p99_us\n\n"))
    assert _ask(None, None) == (None, "p99_us")  # a latency objective: the SLO optional
    monkeypatch.setattr(sys, "stdin", Terminal(""))
    assert _ask("p99_us <= 1ms", None) == ("p99_us <= 1ms", "capacity")  # nothing asked
