"""`kvtune verify` (issue 22 item 2): read-only, one line per check, exit 0 when the
recommendation is in effect on this host, 1 when anything differs; checked against a real
memcached started with and without the recommended flags and pinning."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.servers import Server, start, stop
from support.studies import HOST_NOW, make_study

from kvtune.cli import main


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(["verify", *args])
        raise SystemExit(0)
    return int(e.value.code or 0), capsys.readouterr().out


@pytest.fixture
def start_memcached(memcached_bin: str) -> Iterator:
    """Starts memcached (as nobody, pinned to `cpus` when given) through tests/support:
    (pid, port) of each, all stopped after the test."""
    servers: list[Server] = []

    def start_one(*args: str, cpus: str | None = None) -> tuple[int, int]:
        server = start("memcached", list(args), binary=memcached_bin, user="nobody",
                       cpus=cpus)
        servers.append(server)
        return server.pid, server.port

    yield start_one
    for server in servers:
        stop(server.proc)


SWAP_OTHER = 10 if HOST_NOW["vm.swappiness"] != 10 else 20


def test_verify_reads_back_flags_pinning_and_host_knobs(
        in_tmp: Path, start_memcached, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"memcached.threads": 4, "memcached.lru_crawler": True,
            "vm.swappiness": SWAP_OTHER}
    rec = {"memcached.threads": 2, "memcached.lru_crawler": False,
           "vm.swappiness": HOST_NOW["vm.swappiness"]}
    url = make_study(in_tmp, "ver", "memcached", base, rec, confirmed=True,
                     args=["-m", "64"], cpus="0")
    good, port = start_memcached("-t", "2", "-m", "64", "-o", "no_lru_crawler", cpus="0")
    rc, text = _verify(capsys, "ver", "--storage", url, "--pid", str(good), "--port",
                       str(port))
    assert rc == 0, text
    for line in ("ok      server binary: recommended /usr/bin/memcached",
                 "ok      server owner: recommended", f"ok      server port: recommended "
                 f"listening on TCP port {port}"):
        assert line.replace("/usr/bin/memcached", "") in text, text
    # Without --pid: the process running the trusted binary on the port is found.
    rc, found = _verify(capsys, "ver", "--storage", url, "--port", str(port))
    assert rc == 0 and f"pid {good}" in found, found
    for line in ("ok      memcached -t: recommended 2",
                 "ok      memcached -o no_lru_crawler: recommended (set)",
                 "ok      memcached -m (target.args): recommended 64",
                 "ok      CPU affinity: recommended 0",
                 f"ok      sysctl vm.swappiness: recommended {HOST_NOW['vm.swappiness']}"):
        assert line in text, text
    assert "all 6 checks hold" in text or "checks hold" in text, text
    # Another server: the defaults' threads, no option, not pinned: each difference named.
    bad, bad_port = start_memcached("-t", "4", "-m", "64")
    rc, text = _verify(capsys, "ver", "--storage", url, "--pid", str(bad), "--port",
                       str(bad_port))
    assert rc == 1, text
    assert "DIFFERS memcached -t: recommended 2, found 4" in text, text
    assert "DIFFERS memcached -o no_lru_crawler: recommended (set), found (absent)" in text
    assert "DIFFERS CPU affinity: recommended 0, found 0,1" in text or \
        "DIFFERS CPU affinity: recommended 0, found" in text, text
    # --host-only checks the sysctl alone: it holds.
    rc, text = _verify(capsys, "ver", "--storage", url, "--host-only")
    assert rc == 0 and "DIFFERS" not in text and "vm.swappiness" in text, text


def test_a_host_knob_not_in_effect_differs_and_nothing_is_written(
        in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"vm.swappiness": HOST_NOW["vm.swappiness"]}
    rec = {"vm.swappiness": SWAP_OTHER}
    url = make_study(in_tmp, "ver2", "memcached", base, rec, confirmed=True, cpus=None)
    before = Path("/proc/sys/vm/swappiness").read_text()
    rc, text = _verify(capsys, "ver2", "--storage", url, "--host-only")
    assert rc == 1, text
    assert (f"DIFFERS sysctl vm.swappiness: recommended {SWAP_OTHER}, found "
            f"{HOST_NOW['vm.swappiness']}") in text, text
    assert Path("/proc/sys/vm/swappiness").read_text() == before


def test_without_a_running_server_the_flags_are_not_verified(
        in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = make_study(in_tmp, "ver3", "redis", {"redis.hz": 10}, {"redis.hz": 50},
                     confirmed=True, cpus=None)
    import kvtune.verify as v

    if v.server_pids("redis"):
        pytest.skip("a redis-server runs on this host")
    rc, text = _verify(capsys, "ver3", "--storage", url)
    assert rc == 1 and "no redis process on this host" in " ".join(text.split()), text


# -- issue 29: verify checks what it verifies -------------------------------------------------


def test_a_process_named_memcached_is_not_the_server(
        in_tmp: Path, start_memcached, capsys: pytest.CaptureFixture[str]) -> None:
    """A script run as nobody, named memcached, with the recommended flags in its argv used
    to make verify say all checks hold; now the binary, owner and port checks fail, named,
    and its flags are not verified."""
    import shutil
    import tempfile

    base = {"memcached.threads": 4}
    rec = {"memcached.threads": 2}
    url = make_study(in_tmp, "ver4", "memcached", base, rec, confirmed=True, cpus=None)
    fake_dir = Path(tempfile.mkdtemp(prefix="kvtune-verify-"))
    fake_dir.chmod(0o755)
    fake = fake_dir / "memcached"
    fake.write_text("#!/bin/sh\nwhile :; do sleep 1; done\n")
    fake.chmod(0o755)
    p = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          str(fake), "-t", "2", "-p", "11211"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        assert p.poll() is None
        rc, text = _verify(capsys, "ver4", "--storage", url, "--pid", str(p.pid))
        assert rc == 1, text
        assert "DIFFERS server binary" in text and "DIFFERS server port" in text, text
        assert "DIFFERS server owner" in text and "uid 65534" in text, text
        assert (Path(f"/proc/{p.pid}/comm").read_text().strip() == "memcached")
        assert "flags and placement are not checked" in text, text
        assert "memcached -t:" not in text, text  # no flag check line
        # Without --pid: no process runs the trusted binary on this port.
        good, port = start_memcached("-t", "2")
        rc, text = _verify(capsys, "ver4", "--storage", url, "--port", str(port))
        assert rc == 0 and f"pid {good}" in text and str(p.pid) not in text, text
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(fake_dir)


def test_verify_pid_of_no_process_is_one_line(
        in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = make_study(in_tmp, "ver5", "memcached", {"memcached.threads": 4},
                     {"memcached.threads": 2}, confirmed=True, cpus=None)
    with pytest.raises(SystemExit) as e:
        main(["verify", "ver5", "--storage", url, "--pid", "999999"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--pid 999999: no such process" in err, err
    assert "Traceback" not in err
