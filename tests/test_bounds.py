"""Every size has a bound checked before allocation, in kvtune and in kvload, named in the
message, exit 2 (issue 29): item and value sizes, CPU lists, connections, keys, the
workload file, the trace's decompressed bytes, its rows' sizes and op counts, and the
describe page of a model with 10^12 keys."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from support.cli import cli

REPO = Path(__file__).resolve().parents[1]


def kvtune(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd)


def _refused(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out and "panicked" not in out, out
    flat = " ".join(out.split())  # a long message wraps at the console's width
    for n in needles:
        assert n in flat, out
    return out


def test_a_huge_item_size_in_a_workload_file_is_refused_by_kvtune_and_kvload(
        tmp_path: Path, kvload_bin: str) -> None:
    wl = tmp_path / "w.json"
    wl.write_text(json.dumps({"rate": 1000, "max_item_size": "999999999999M"}))
    study = tmp_path / "s.yaml"
    study.write_text("study: big\ntarget: {kind: memcached, cpus: '0'}\n"
                     "load: {workload_file: w.json, cpus: '1'}\n")
    _refused(kvtune(tmp_path, "check", str(study)), "max_item_size", "1 GiB")
    r = subprocess.run([kvload_bin, "--server", "127.0.0.1:1", "--workload", str(wl)],
                       capture_output=True, text=True, timeout=30)
    _refused(r, "max-item-size", "1 GiB")
    for text, key in (('{"rate": 1, "value_size": "list:2000M:1"}', "value_size"),
                      ('{"rate": 1, "popularity": "table:999999999999M:1"}', "popularity"),
                      ('{"rate": 1, "key_size": 70000}', "key_size")):
        wl.write_text(text)
        out = _refused(kvtune(tmp_path, "check", str(study)), key)
        assert "bound" in out or "GiB" in out, out


@pytest.mark.parametrize(("args", "needle"), [
    (["--cpus", "0-3000000000"], "out of range"),
    (["--connections", "100000000000000"], "bound of 100000"),
    (["--max-item-size", "999999999999M"], "1 GiB"),
    (["--keys", "2000000000000", "--protocol", "resp"], "bound of 1000000000000"),
    (["--workload", "/dev/zero"], "not a regular file"),
    (["--trace", "/dev/zero"], "not a regular file"),
    (["--workload", "/proc/self/environ"], "kernel or device file"),
])
def test_kvload_refuses_before_it_allocates(kvload_bin: str, args: list[str],
                                            needle: str) -> None:
    t0 = time.monotonic()
    r = subprocess.run([kvload_bin, "--server", "127.0.0.1:1", "--rate", "10", *args],
                       capture_output=True, text=True, timeout=30)
    _refused(r, needle)
    assert time.monotonic() - t0 < 10


def test_study_file_sizes_are_bounded(tmp_path: Path) -> None:
    for load, needle in (
            ("{rate: 1000, workload: {value_size: 'list:999999999999M:1'}, cpus: '1'}",
             "1 GiB"),
            ("{rate: 1000, extra_args: ['--max-item-size', '9999999999M'], cpus: '1'}",
             "1 GiB"),
            ("{rate: 1000, cpus: '0-3000000000'}", "load.cpus")):
        study = tmp_path / "s.yaml"
        study.write_text(f"study: big\ntarget: {{kind: memcached, cpus: '0'}}\nload: {load}\n")
        _refused(kvtune(tmp_path, "tune", str(study)), needle)


def test_a_zstd_bomb_is_refused_fast(tmp_path: Path) -> None:
    """A few KB of zstd that expand to millions of lines (1.6 KB -> 20M lines used to be
    read to the end)."""
    import zstandard

    bomb = tmp_path / "bomb.csv.zst"
    line = b"1600000000,k,8,100,1,get,0\n"
    # Level 3: ~8 KB, as small as level 19's ~7 KB for this repetition, in a fifth of the time.
    with open(bomb, "wb") as f, zstandard.ZstdCompressor(level=3).stream_writer(f) as w:
        chunk = line * 40_000
        for _ in range(80):  # ~86 MB of CSV
            w.write(chunk)
    assert bomb.stat().st_size < 64_000
    t0 = time.monotonic()
    out = _refused(kvtune(tmp_path, "workload", "import", "twitter", str(bomb), "-o",
                          "m.json"), "decompression bomb")
    assert "200 times" in out
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "m.json").exists()


def test_trace_rows_have_bounded_sizes_and_counts(tmp_path: Path) -> None:
    meta = tmp_path / "m.csv"
    rows = "".join(f"k{i},GET,100,1,10\n" for i in range(50))
    meta.write_text("key,op,size,op_count,key_size\n" + rows
                    + "hot,GET,100,1000000000000000,10\nbig,SET,99999999999999,1,10\n")
    r = kvtune(tmp_path, "workload", "import", "meta", str(meta), "-o", "m.json",
               "--max-bad", "0.5")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "m.json").read_text())
    imported = doc["about"]["imported"]
    assert imported["malformed_lines_skipped"] == 2 and imported["requests"] == 50, imported
    bad = tmp_path / "bad.csv"
    bad.write_text("key,op,size,op_count,key_size\n" + "s3cr3t,GET,x-s3cr3t,1,10\n" * 5)
    out = _refused(kvtune(tmp_path, "workload", "import", "meta", str(bad), "-o", "b.json"),
                   "size is not an integer")
    assert "s3cr3t" not in out, out
    for special in ("/proc/kmsg", "/dev/zero", "/proc/self/environ"):
        _refused(kvtune(tmp_path, "workload", "import", "twitter", special, "-o", "x.json"),
                 "not a regular file")


def test_describe_html_of_a_model_with_a_trillion_keys(tmp_path: Path) -> None:
    model = tmp_path / "m.json"
    model.write_text(json.dumps({"rate": 1000, "keys": 10**12, "popularity": "zipf:0.99"}))
    t0 = time.monotonic()
    r = kvtune(tmp_path, "workload", "describe", str(model), "--html", "p.html")
    assert r.returncode == 0, r.stdout + r.stderr
    assert time.monotonic() - t0 < 60
    assert (tmp_path / "p.html").stat().st_size > 10_000
