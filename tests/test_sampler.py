"""Server stats over time: samples lined up with kvload's timeline and phases (kvload/1.1),
the phase table, and a real memcached driven through the 004 phases for a few seconds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from support.servers import running

from kvtune.telemetry.sampler import ServerSampler, align, cost_summary, phase_at, phase_table


def test_phase_at_follows_kvload() -> None:
    phases = [{"start_s": 0.0, "duration_s": 2}, {"start_s": 2.0, "duration_s": 2}]
    assert phase_at(phases, -0.1, 4.0) is None  # warm-up / preload
    assert phase_at(phases, 0.0, 4.0) == 0
    assert phase_at(phases, 1.99, 4.0) == 0
    assert phase_at(phases, 2.0, 4.0) == 1
    assert phase_at(phases, 4.2, 4.0) == 1  # the final sample, just after the window
    assert phase_at(phases, 9.0, 4.0) is None


def _sample(t_ns: int, pages: dict[str, int], ev: int = 0, oom: int = 0) -> dict[str, Any]:
    chunk = {"1": 96, "12": 1184, "22": 10264, "32": 103496}
    return {"t_ns": t_ns, "cost_us": 500.0,
            "stats": {"evictions": ev, "slabs_moved": 0, "cmd_get": 0, "get_hits": 0},
            "slabs": {c: {"chunk_size": chunk[c], "total_pages": n,
                          "items_outofmemory": oom if c == "32" else 0}
                      for c, n in pages.items()}}


def test_align_and_phase_table_take_the_last_sample_of_each_phase() -> None:
    ws = 10_000_000_000
    load = {"timeline": {"window_start_ns": ws, "window_end_ns": ws + 4_000_000_000},
            "config": {"phases": [{"start_s": 0.0, "duration_s": 2.0, "value_size": "100"},
                                  {"start_s": 2.0, "duration_s": 2.0, "value_size": "100K"}]},
            "series": [{"t": 1, "errors": 0}, {"t": 2, "errors": 1}, {"t": 3, "errors": 5},
                       {"t": 4, "errors": 7}]}
    samples = [_sample(ws - 500_000_000, {"1": 1}),
               _sample(ws + 1_000_000_000, {"1": 30}, ev=10),
               _sample(ws + 1_900_000_000, {"1": 64}, ev=50),
               _sample(ws + 3_000_000_000, {"1": 64, "32": 1}, ev=80, oom=2),
               _sample(ws + 4_010_000_000, {"1": 64, "32": 1}, ev=90, oom=3)]
    rec = align({"kind": "memcached", "samples": samples}, load)
    assert [s["phase"] for s in rec["samples"]] == [None, 0, 0, 1, 1]
    assert rec["samples"][0]["t_s"] == -0.5
    rows = phase_table(rec, load)
    assert [r["pages"] for r in rows] == [{"1:96": 64}, {"1:96": 64, "32:103496": 1}]
    assert [r["evictions"] for r in rows] == [50, 40]  # counted over each phase
    assert [r["out_of_memory"] for r in rows] == [0, 3]
    assert [r["load_errors"] for r in rows] == [1, 12]
    assert cost_summary(rec)["n"] == 5


def test_real_memcached_phases_sampled_each_second(memcached_bin: str, kvload_bin: str,
                                                   tmp_path: Path) -> None:
    with running("memcached", ["-m", "64", "-t", "1"], binary=memcached_bin,
                 user="root") as mc:
        port = mc.port
        wl = tmp_path / "phases.json"
        wl.write_text(json.dumps({
            "keys": 200000, "mix": "set:1", "connections": 2, "warmup": "0s",
            "preload": False, "phases": [
                {"duration": "2s", "value_size": 100, "rate": 20000},
                {"duration": "2s", "value_size": "100K", "rate": 300}]}))
        out = tmp_path / "out.json"
        sampler = ServerSampler("memcached", "127.0.0.1", port)
        sampler.start()
        subprocess.run([kvload_bin, "--server", f"127.0.0.1:{port}", "--workload", str(wl),
                        "--json", str(out), "--quiet", "--cpus", "1"], check=True, timeout=60)
        doc = json.loads(out.read_text())
        rec = sampler.stop(doc)
    assert not rec["errors"], rec["errors"]
    assert doc["schema"].startswith("kvload/1.") and "timeline" in doc
    assert [p["start_s"] for p in rec["phases"]] == [0.0, 2.0]
    in_window = [s for s in rec["samples"] if s["phase"] is not None]
    assert {s["phase"] for s in in_window} == {0, 1}
    assert len(in_window) >= 4  # one a second over 4 s, plus the final one

    def big(s: dict[str, Any]) -> int:
        return sum(int(v.get("total_pages", 0)) for v in s["slabs"].values()
                   if int(v.get("chunk_size", 0)) > 40960)

    # The 100 KB class appears only once its phase has started.
    assert all(big(s) == 0 for s in rec["samples"] if s["t_s"] < 2.0)
    assert big(rec["samples"][-1]) >= 1
    rows = phase_table(rec, doc)
    assert len(rows) == 2 and rows[0]["pages"] and rows[1]["pages"]
    # 1 s sampling costs a few hundred µs per sample on this host (docs/case-studies.md).
    assert cost_summary(rec)["median_us"] < 20_000
