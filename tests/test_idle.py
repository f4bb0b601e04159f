"""The idle path as knobs (issue 31): PM QoS (/dev/cpu_dma_latency held open), guest
halt-polling and cpuidle states. Each is in the catalog with its availability, a study
applies it through the journal and puts it back, `kvtune restore` after SIGKILL leaves the
host as it was (the PM QoS request ends with the process), exports carry them, and bad
values are refused before anything is written."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import kvtune
from support.cli import kvtune as run_kvtune
from support.studies import journal_has_process, study_file, wait_for

from kvtune import roots
from kvtune.host.facts import this_host
from kvtune.host.journal import default_path
from kvtune.knobs import catalog
from kvtune.knobs.appliers import idle
from kvtune.knobs.appliers.base import HostContext

HALT = Path(roots.HALTPOLL) / "guest_halt_poll_ns"
QOS = Path(roots.PM_QOS)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the idle path needs root")


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)


def qos_value() -> int:
    fd = os.open(QOS, os.O_RDONLY)
    try:
        return int(struct.unpack("<i", os.read(fd, 4))[0])
    finally:
        os.close(fd)


@pytest.mark.integration  # runs kvtune knobs as a process
@pytest.mark.parallel  # reads the catalog's availability: nothing written, nothing measured
def test_the_idle_path_is_in_the_catalog_with_its_availability() -> None:
    ctx = HostContext(this_host())
    for name in ("cpu.idle_max_latency_us", "cpu.halt_poll_ns", "cpu.idle_disable",
                 "cpu.idle_governor", "cpu.halt_poll_allow_shrink"):
        k = catalog.CATALOG[name]
        a = k.applier.check(ctx)
        assert a.ok or a.reason, name  # available, or said why not
    k = catalog.CATALOG["cpu.halt_poll_ns"]
    if Path(roots.HALTPOLL).is_dir():
        assert k.applier.check(ctx).ok
    else:
        assert "haltpoll cpuidle driver is not loaded" in k.applier.check(ctx).reason
    # The states are offered by the names this host gives them.
    names = idle.state_names()
    assert catalog.CATALOG["cpu.idle_disable"].domain.choices == ("none", *names[1:])
    r = run_kvtune("knobs", "--json", timeout=120)
    rows = {x["name"]: x for x in json.loads(r.stdout)}
    assert "cpu.idle_max_latency_us" in rows and "available" in rows["cpu.halt_poll_ns"]


@pytest.mark.skipif(not HALT.exists(), reason="no haltpoll driver on this host")
def test_a_study_sets_halt_polling_and_pm_qos_and_puts_them_back(
        in_tmp: Path, kvload_bin: str, memcached_bin: str) -> None:
    before_halt, before_qos = HALT.read_text().strip(), qos_value()
    spec = study_file(in_tmp, "idle", knobs="  - cpu.halt_poll_ns\n  - cpu.idle_max_latency_us\n")
    p = subprocess.Popen([sys.executable, "-m", "kvtune", "run", str(spec), "--set",
                          "cpu.halt_poll_ns=200000", "--set", "cpu.idle_max_latency_us=0",
                          "--repetitions", "1"], cwd=in_tmp, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(journal_has_process), "the study never started its server"
        assert HALT.read_text().strip() == "200000"
        assert qos_value() == 0
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err[-2000:]
    assert HALT.read_text().strip() == before_halt and qos_value() == before_qos


@pytest.mark.skipif(not HALT.exists(), reason="no haltpoll driver on this host")
def test_restore_after_sigkill_leaves_the_idle_path_as_it_was(
        in_tmp: Path, kvload_bin: str, memcached_bin: str) -> None:
    before_halt, before_qos = HALT.read_text().strip(), qos_value()
    spec = study_file(in_tmp, "idlekill", duration="20s",
                      knobs="  - cpu.halt_poll_ns\n  - cpu.idle_max_latency_us\n")
    p = subprocess.Popen([sys.executable, "-m", "kvtune", "run", str(spec), "--set",
                          "cpu.halt_poll_ns=400000", "--set", "cpu.idle_max_latency_us=5"],
                         cwd=in_tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(journal_has_process), "the study never started its server"
        time.sleep(0.3)
        assert HALT.read_text().strip() == "400000" and qos_value() == 5
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # The request ended with the process that held the file; the sysfs value waits.
    assert wait_for(lambda: qos_value() == before_qos, 5)
    assert HALT.read_text().strip() == "400000"
    r = kvtune("restore", cwd=in_tmp)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "PM QoS" in r.stdout and "released when it ended" in r.stdout
    assert HALT.read_text().strip() == before_halt and qos_value() == before_qos
    assert not default_path().exists()


@pytest.mark.integration  # starts tuned-adm --version
@pytest.mark.parallel  # export files only: nothing written to the host, nothing measured
def test_exports_carry_the_idle_path(tmp_path: Path) -> None:
    """TuneD force_latency and [sysfs] lines; a unit that holds the PM QoS request."""
    from kvtune.export import exporters
    from kvtune.export.base import Recommendation

    base = {"cpu.idle_max_latency_us": idle.NO_REQUEST, "cpu.halt_poll_ns": 0}
    rec = Recommendation("s", "memcached", {"cpu.idle_max_latency_us": 20,
                                            "cpu.halt_poll_ns": 200000}, base, "test",
                         spec={"target": {"kind": "memcached"}}, tuned_include="")
    tuned = exporters()["tuned"].files(rec)
    text = tuned[0].text
    assert "[cpu]\nforce_latency=20" in text
    if HALT.exists():
        assert f"{HALT}=200000" in text and "[bootloader]" in text
    unit = [f for f in exporters()["systemd"].files(rec) if "pm-qos" in f.path]
    assert unit and "/dev/cpu_dma_latency" in unit[0].text
    assert '\\\\024\\\\000\\\\000\\\\000' in unit[0].text  # 20, little-endian, octal


@pytest.mark.parallel  # refused before anything is written (checked), nothing measured
@pytest.mark.parametrize("setting,words", [
    ("cpu.idle_max_latency_us=5000", "outside"),
    ("cpu.halt_poll_ns=-1", "outside"),
    ("cpu.idle_disable=C99", "outside"),
])
def test_a_bad_idle_value_is_refused_before_anything_is_written(
        in_tmp: Path, kvload_bin: str, memcached_bin: str, setting: str, words: str) -> None:
    before = (HALT.read_text() if HALT.exists() else None, qos_value())
    spec = study_file(in_tmp, "idlebad", knobs="  - cpu.idle_max_latency_us\n"
                                               "  - cpu.halt_poll_ns\n  - cpu.idle_disable\n")
    r = kvtune("run", str(spec), "--set", setting, "--repetitions", "1", cwd=in_tmp)
    assert r.returncode == 2, r.stdout + r.stderr
    assert setting.split("=")[0] in r.stderr and words in r.stderr
    assert "Traceback" not in r.stderr
    assert (HALT.read_text() if HALT.exists() else None, qos_value()) == before
