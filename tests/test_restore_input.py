"""A journal file is input to a root process (issue 22): `kvtune restore --journal FILE`
checks every entry before it writes anything. Each file of tests/bad-inputs/journals/ is a
crafted journal (its "expect" key says the message); VICTIM and LINK stand for a file
outside the writable roots and a symlink to it. Each is refused with exit 2, a message
naming the entry, no traceback, and nothing written: the victim, the real kernel files it
names and the journal itself are as they were."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.cli import kvtune as run_kvtune

# kvtune restore as a process, against a journal naming a live process. Parallel: every
# journal is refused before anything is written (the test compares the kernel files each
# names), nothing measured; the host lock is the test's own (KVTUNE_RUN_DIR).
pytestmark = [pytest.mark.integration, pytest.mark.parallel]


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """kvtune's width when piped (160), as in a serial run: the messages checked here are
    not wrapped at the 80 columns pytest-xdist's workers set (the tests marked parallel)."""
    monkeypatch.delenv("COLUMNS", raising=False)

REPO = Path(__file__).resolve().parents[1]
CORPUS = sorted((REPO / "tests" / "bad-inputs" / "journals").glob("*.json"))


def _expect(path: Path) -> str:
    try:
        return str(json.loads(path.read_text())["expect"])
    except ValueError:
        return "is not a kvtune journal"


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_a_crafted_journal_is_refused_and_nothing_is_written(path: Path, tmp_path: Path
                                                             ) -> None:
    victim = tmp_path / "victim"
    victim.write_text("safe\n")
    link = tmp_path / "link"
    link.symlink_to(victim)
    text = path.read_text().replace("VICTIM", str(victim)).replace("LINK", str(link))
    journal = tmp_path / "journal.json"
    journal.write_text(text)
    named = {m for m in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/unprivileged_userfaultfd",
                         "/proc/sys/kernel/io_uring_disabled",
                         "/proc/sys/user/max_user_namespaces",
                         "/sys/devices/system/cpu/smt/control") if m in text}
    before = {m: Path(m).read_text() for m in named if os.path.exists(m)}
    r = run_kvtune("restore", "--journal", str(journal), timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert _expect(path).replace("VICTIM", str(victim)) in " ".join(out.split()), out
    assert "Traceback" not in out
    assert victim.read_text() == "safe\n"
    assert journal.read_text() == text  # kept as it was, for a person to look at
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.json", "link", "victim"]
    assert {m: Path(m).read_text() for m in before} == before


def test_the_journal_file_itself_must_be_a_bounded_regular_file(tmp_path: Path) -> None:
    from kvtune.errors import UserError
    from kvtune.host.journal import restore_from_file

    big = tmp_path / "big.json"
    big.write_text('{"entries": [], "pad": "' + "x" * (9 << 20) + '"}')
    with pytest.raises(UserError, match="at most 8 MiB"):
        restore_from_file(big)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):
        restore_from_file(fifo)


def test_restore_only_signals_a_recorded_server_by_its_name(tmp_path: Path) -> None:
    """A journal naming a live process with its true start time but another name (a
    `sleep`, standing for sshd) is refused; the process lives."""
    p = subprocess.Popen(["sleep", "30"])
    try:
        start = int(Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        journal = tmp_path / "j.json"
        journal.write_text(json.dumps({"entries": [], "processes": [
            {"pid": p.pid, "starttime": start, "name": "sleep"}]}))
        r = run_kvtune("restore", "--journal", str(journal), timeout=60)
        assert r.returncode == 2 and "'sleep' is not a server kvtune starts" in r.stderr
        assert p.poll() is None
        # Named as a server but not one (its process name is sleep): not signalled either.
        journal.write_text(json.dumps({"entries": [], "processes": [
            {"pid": p.pid, "starttime": start, "name": "memcached"}]}))
        r = run_kvtune("restore", "--journal", str(journal), timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert p.poll() is None
    finally:
        p.kill()
        p.wait()
