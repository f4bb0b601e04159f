"""No write follows a link; every write is atomic; no write replaces an input (issue 29):
kvtune.safety.files, and the exports, models, traces and reports that write through it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.cli import cli
from support.studies import MC_BASE, MC_REC, make_study

from kvtune.safety import files
from kvtune.safety.files import WriteRefused, note_input, read_input, write_file

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _fresh_inputs() -> None:
    files.forget_inputs()


def kvtune(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd)


def _listing(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def test_a_link_below_the_output_directory_is_never_followed(tmp_path: Path) -> None:
    out, victim = tmp_path / "o", tmp_path / "victim"
    out.mkdir()
    victim.mkdir()
    (victim / "keep.conf").write_text("precious\n")
    (out / "memcached").symlink_to(victim)
    with pytest.raises(WriteRefused, match="symbolic link"):
        write_file("memcached/memcached.conf", "x\n", base=out, create_dirs=True)
    (out / "memcached").unlink()
    (out / "memcached").mkdir()
    (out / "memcached" / "memcached.conf").symlink_to(victim / "keep.conf")
    with pytest.raises(WriteRefused, match="symbolic link"):
        write_file("memcached/memcached.conf", "x\n", base=out)
    assert (victim / "keep.conf").read_text() == "precious\n"
    assert _listing(victim) == {"keep.conf"}


def test_a_write_is_atomic_and_leaves_nothing_when_it_fails(tmp_path: Path) -> None:
    target = tmp_path / "model.json"
    target.write_text("old\n")
    write_file(target, "new\n")
    assert target.read_text() == "new\n" and _listing(tmp_path) == {"model.json"}
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    a = files.AtomicFile(target)
    assert a.file is not None
    a.file.write("half")
    a.abandon()
    assert target.read_text() == "new\n" and _listing(tmp_path) == {"model.json"}


def test_an_input_is_never_overwritten_however_it_is_named(tmp_path: Path) -> None:
    trace = tmp_path / "x.csv"
    trace.write_text("1,a,2,3,4,get,0\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias.csv").symlink_to(trace)
    os.link(trace, tmp_path / "hard.csv")
    note_input(trace)
    for name in (tmp_path / "sub" / ".." / "x.csv", tmp_path / "hard.csv", trace):
        with pytest.raises(WriteRefused, match="an input of this run"):
            write_file(name, "clobber\n")
    with pytest.raises(WriteRefused, match="symbolic link"):
        write_file(tmp_path / "alias.csv", "clobber\n")
    assert trace.read_text() == "1,a,2,3,4,get,0\n"


def test_read_input_bounds_and_refuses_kernel_and_device_files(tmp_path: Path) -> None:
    f = tmp_path / "a.conf"
    f.write_text("x" * 100)
    assert read_input(f, 100, "config") == b"x" * 100
    with pytest.raises(files.ReadRefused, match="more than the 64 bytes"):
        read_input(f, 64, "config")
    for special, why in (("/dev/zero", "not a regular file"), ("/proc/self/environ",
                                                                "is under /proc"),
                         ("/sys/kernel/mm/transparent_hugepage/enabled", "is under /sys"),
                         (str(tmp_path), "is a directory")):
        with pytest.raises(files.ReadRefused, match=why):
            read_input(special, 1 << 20, "config")


def test_workload_import_never_truncates_its_own_input(tmp_path: Path) -> None:
    """`--keep-trace sub/../x.csv` (or a link, or -o naming the trace) used to truncate and
    then delete the input; now refused, exit 2, the input intact, nothing written."""
    trace = tmp_path / "x.csv"
    text = "".join(f"{1600000000 + i // 10},key{i % 50},8,100,1,get,0\n" for i in range(2000))
    trace.write_text(text)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.csv").symlink_to(trace)
    for args in (["-o", "m.json", "--keep-trace", "sub/../x.csv"],
                 ["-o", "m.json", "--keep-trace", "link.csv"],
                 ["-o", "x.csv"], ["-o", "sub/../x.csv"]):
        r = kvtune(tmp_path, "workload", "import", "twitter", "x.csv", *args)
        out = r.stdout + r.stderr
        assert r.returncode == 2 and "Traceback" not in out, (args, out)
        assert "an input of this run" in out or "symbolic link" in out, (args, out)
        assert trace.read_text() == text
        assert _listing(tmp_path) == {"x.csv", "sub", "link.csv"}, args
    r = kvtune(tmp_path, "workload", "import", "twitter", "link.csv", "-o", "m.json",
               "--keep-trace", "x.csv")
    assert r.returncode == 2 and "an input of this run" in r.stderr, r.stderr
    r = kvtune(tmp_path, "workload", "import", "twitter", "x.csv", "-o", "m.json",
               "--keep-trace", "kept.csv")
    assert r.returncode == 0, r.stderr
    assert _listing(tmp_path) == {"x.csv", "sub", "link.csv", "m.json", "kept.csv"}


@pytest.mark.integration  # export asks tuned-adm which profile the host runs
def test_export_refuses_planted_links_and_takes_only_a_real_config_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = make_study(tmp_path, "wr", "memcached", MC_BASE, MC_REC, confirmed=True,
                     args=["-m", "256"])
    victim = tmp_path / "victim.conf"
    victim.write_text("precious\n")
    out = tmp_path / "o"
    (out / "memcached").mkdir(parents=True)
    (out / "memcached" / "memcached.conf").symlink_to(victim)
    r = kvtune(tmp_path, "export", "wr", "--storage", url, "--format", "memcached",
               "-o", str(out))
    assert r.returncode == 2 and "never writes through a link" in r.stderr, r.stderr
    assert victim.read_text() == "precious\n" and "Traceback" not in r.stderr
    # --from must parse as the target's configuration file: /etc/shadow and a binary
    # file are refused with one line, exit 2; nothing is written or echoed.
    shadow_like = tmp_path / "shadow"
    shadow_like.write_text("root:$6$s3cr3t:19000:0:99999:7:::\n")
    binary = tmp_path / "bin.conf"
    binary.write_bytes(bytes(range(256)) * 10)
    for src, why in ((shadow_like, "not a memcached.conf line"), (binary, "not UTF-8"),
                     (Path("/etc/shadow"), "memcached"), (Path("/proc/self/environ"),
                                                          "is under /proc"),
                     (tmp_path / "missing.conf", "does not exist")):
        fresh = tmp_path / f"out-{src.name}"
        r = kvtune(tmp_path, "export", "wr", "--storage", url, "--format", "memcached",
                   "--from", str(src), "-o", str(fresh))
        out_text = r.stdout + r.stderr
        assert r.returncode == 2 and why in out_text, (src, out_text)
        assert "Traceback" not in out_text and "s3cr3t" not in out_text, out_text
        assert "root:" not in out_text and not fresh.exists(), out_text
    good = tmp_path / "memcached.conf"
    good.write_text("# the admin's\n-m 64\n-c 4096\n")
    good.chmod(0o600)
    fresh = tmp_path / "out-good"
    r = kvtune(tmp_path, "export", "wr", "--storage", url, "--format", "memcached",
               "--from", str(good), "-o", str(fresh))
    assert r.returncode == 0, r.stdout + r.stderr
    back = fresh / "rollback" / "memcached" / "memcached.conf"
    assert back.read_text() == good.read_text()
    assert back.stat().st_mode & 0o077 == 0  # as private as the file it copies
