"""The report of a real short memcached study, rendered in headless Chromium: every plot
drew, no console errors, no network request beyond the file itself, and a screenshot kept
as a test artifact (test-artifacts/report.png). Also: telemetry stored with the study's
repetitions, `kvtune show`, and `kvtune dashboard` on loopback."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from support.cli import kvtune as run_kvtune

from kvtune.analysis import analyse, load
from kvtune.store import Store
from kvtune.study.loader import load_study
from kvtune.study.run import StudyRun
from kvtune.targets.base import free_port
from kvtune.telemetry.perf import find_perf

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"

STUDY = """\
study: mc-report
target: {kind: memcached, cpus: "0", args: ["-m", "64"]}
load:
  mode: open
  rate: 15000
  connections: 4
  duration: 500ms
  warmup: 200ms
  cpus: "1"
  workload: {keys: 3000, value_size: "list:100:6,1K:3,8K:1", popularity: "zipf:0.99",
             mix: "get:9,set:1"}
knobs:
  - {name: memcached.threads, range: [1, 4]}
  - {name: memcached.growth_factor, range: [1.1, 2.0]}
  - memcached.reqs_per_event
objective: {metric: p99_us}
budget: {trials: 3}
repetitions: 1
# These tests are about the report, not host noise: a busy hypervisor's steal must not stop them.
# ablation_max_rounds: the test's wall time stays bounded (the sequential ablation would
# otherwise add rounds up to 30 for changes still ambiguous at 1 s repetitions). intensify:
# the search's racing (tested on the synthetic target) is not the report's.
evaluation: {noise_floor_runs: 2, confirm_top: 1, confirm_rounds: 3, alpha: 0.1, drift_every: 0,
             steal_threshold: 0.5, ablation_max_rounds: 4, intensify: false}
sampler: random
seed: 5
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real short memcached study (3 trials + baseline, 1 s repetitions) on loopback."""
    kvload = REPO / "kvload" / "target" / "release" / "kvload"
    if not kvload.exists():
        pytest.fail(f"{kvload} is missing: run `make kvload` (make test builds it)")
    if not shutil.which("memcached"):
        pytest.fail("memcached is not installed: run `make setup`")
    d = tmp_path_factory.mktemp("report")
    spec = d / "mc-report.yaml"
    spec.write_text(STUDY)
    with pytest.MonkeyPatch.context() as mp:
        # A private journal, as the per-test fixture gives (this fixture outlives a test).
        mp.setenv("KVTUNE_JOURNAL", str(d / "journal.json"))
        mp.setenv("KVLOAD", str(kvload))
        run = StudyRun(load_study(spec), Console(quiet=True), base_dir=d)
        run.run()
    assert not (d / "journal.json").exists()
    yield run.store.url, d


def test_telemetry_is_stored_with_every_repetition(study: tuple[str, Path]) -> None:
    url, _ = study
    reps = [r for r in Store(url).repetitions("mc-report") if r["status"] != "failed"]
    assert len(reps) >= 9
    for r in reps:
        m, tel = r["metrics"], r["raw"]["telemetry"]
        assert m["proc_user_s"] + m["proc_system_s"] > 0
        assert m["proc_voluntary_switches"] > 0
        assert m["mc_cmd_get"] > 0 and m["mc_total_pages"] >= 2
        assert len([c for c in tel["server"]["slab_table"] if c.get("total_pages")]) >= 2
        if find_perf():
            assert tel["perf"]["error"] is None, tel["perf"]
            assert m["perf_context_switches"] > 0 and m["perf_task_clock_ms"] > 0
            assert ("perf_ipc" in m) == ("cycles" not in tel["perf"]["unsupported"])


def test_report_renders_in_chromium(study: tuple[str, Path], chromium: Chromium) -> None:
    url, d = study
    out = d / "report.html"
    r = run_kvtune("report", "mc-report", "--storage", url, "-o", str(out), cwd=d)
    assert r.returncode == 0, r.stderr
    assert "self-contained" in r.stdout
    page = out.read_text()
    assert "<script src" not in page and "<link" not in page  # nothing fetched
    for needle in ("Before and after", "Slab classes", "perf_context_switches",
                   "Exact command lines", "memcached.growth_factor", "Optimizable zones"):
        assert needle in page, needle
    png = ARTIFACTS / "report.png"
    res = render_in_chromium(chromium, out, png)
    assert not res["errors"], res["errors"]
    assert {u.split(":", 1)[0] for u in res["requests"]} == {"file"}, res["requests"]
    plots = {p["id"]: p for p in res["plots"]}
    expected = {"plot-convergence", "plot-importance", "plot-sensitivity-0",
                "plot-sensitivity-1", "plot-sensitivity-2", "plot-correlations",
                "plot-telemetry-scatter", "plot-slab-pages", "plot-mrc"}
    assert expected <= set(plots), sorted(plots)
    for p in plots.values():
        assert p["svg"] and p["traces"] > 0 and p["marks"] > 0 and p["width"] > 300, p
    assert_drawn_right(list(plots.values()))
    assert sum(len(p["defaults"]) for p in plots.values()) >= 2  # threads, growth_factor
    for needle in ("Which change made the gain", "Latency by request type", "BH q",
                   "Noise floor and host noise facts", "counters: memcached stats",
                   "as written", "Memory and hit ratio", "the study ran at 64.0 MiB",
                   "measured in this study (kvload, the baseline&#x27;s repetitions, median) at "
                   "64.0 MiB"):
        assert needle in page, needle
    # the curve of the study's workload (memcached's model), its measured point on it
    mrc = plots["plot-mrc"]
    assert mrc["traces"] == 2 and mrc["marks"] >= 10, mrc
    assert "<details><summary>counters" in page  # collapsed by default
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_describe_page_shows_the_curve_with_its_measured_points(tmp_path: Path,
                                                                 chromium: Chromium) -> None:
    """`kvtune workload describe --html`: the model's plots and its miss-ratio curve with
    the points measured on a server, drawn in Chromium."""
    w = {"keys": 40000, "popularity": "zipf:0.9", "mix": "get:9,set:1", "key_size": 32,
         "value_size": "list:100:4,400:3,1500:2,6000:1,20000:0.3",
         "ttl": "list:0:2,8:1,20:1"}
    model = tmp_path / "mixed-ttl.json"
    model.write_text(json.dumps(w))
    out = tmp_path / "describe.html"
    r = run_kvtune("workload", "describe", str(model), "--kind", "memcached", "--measured",
                   str(REPO / "bench" / "mrc" / "check_real.json"), "--html", str(out),
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "measured (mixed-ttl) at 8.0 MiB: 0.688" in r.stdout  # bench/mrc/check_real.json
    res = render_in_chromium(chromium, out, ARTIFACTS / "describe.png")
    assert not res["errors"], res["errors"]
    assert {u.split(":", 1)[0] for u in res["requests"]} == {"file"}, res["requests"]
    plots = {p["id"]: p for p in res["plots"]}
    mrc = plots["plot-mrc"]
    assert mrc["svg"] and mrc["traces"] >= 2 and mrc["marks"] >= 10 + 4, mrc


def test_show_summarises_importance_and_telemetry(study: tuple[str, Path]) -> None:
    url, d = study
    r = run_kvtune("show", "mc-report", "--storage", url, "--json", cwd=d)
    assert r.returncode == 0, r.stderr
    an = json.loads(r.stdout)["analysis"]
    assert an["importance"]["n_trials"] >= 3
    assert an["telemetry"] and all("rho" in c for c in an["telemetry"])
    r = run_kvtune("show", "mc-report", "--storage", url, cwd=d)
    assert r.returncode == 0 and "Leads: telemetry" in r.stdout, r.stdout + r.stderr


def test_report_of_the_data_loaded_in_process(study: tuple[str, Path]) -> None:
    from kvtune.report import comparison

    url, _ = study
    data = load(Store(url), "mc-report")
    cmp = comparison(data)
    assert cmp["status"] in ("recommended", "not significant")
    assert set(cmp["base_config"]) == {"memcached.threads", "memcached.growth_factor",
                                       "memcached.reqs_per_event"}
    assert "perf_task_clock_ms" in cmp["base_metrics"] or not find_perf()


def test_dashboard_serves_the_study_on_loopback_only(study: tuple[str, Path]) -> None:
    url, d = study
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "kvtune", "dashboard", "mc-report", "--storage",
                          url, "--port", str(port)], cwd=d, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        body = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert p.poll() is None, p.stderr.read().decode() if p.stderr else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies",
                                            timeout=2) as resp:
                    body = resp.read()
                break
            except OSError:
                time.sleep(0.2)
        studies = json.loads(body)["study_summaries"]
        assert "mc-report" in {s["study_name"] for s in studies}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard", timeout=5) as resp:
            assert resp.status == 200
        assert _listening(port) == {"127.0.0.1"}
    finally:
        # SIGTERM, what a service manager sends: Ctrl-C's SIGINT is ignored by a process
        # started in the background of a non-interactive shell (CI's make test runs so),
        # and the wait below then lasted its whole 10 s.
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_dashboard_refuses_an_unknown_study(study: tuple[str, Path]) -> None:
    url, d = study
    r = run_kvtune("dashboard", "nosuch", "--storage", url, "--port", str(free_port()), cwd=d,
                   timeout=60)
    assert r.returncode == 2 and "no study named 'nosuch'" in r.stderr


# -- headless Chromium over the DevTools protocol ------------------------------------------

_CHECK_PLOTS = """
JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot')).map(p => ({
  id: p.id,
  svg: !!p.querySelector('svg.main-svg'),
  traces: (p.data || []).length,
  marks: p.querySelectorAll('.scatterlayer .point, .scatterlayer path.js-line, '
                            + '.barlayer .point, .errorbar').length,
  width: p.getBoundingClientRect().width,
  box: (() => { const r = p.querySelector('svg.main-svg').getBoundingClientRect();
                return [r.left, r.right, r.top, r.bottom]; })(),
  container: (() => { const c = p.closest('.plot') || p.parentElement;
                      const r = c.getBoundingClientRect();
                      const m = document.querySelector('main').getBoundingClientRect();
                      return [Math.max(r.left, m.left), Math.min(r.right, m.right),
                              r.top, r.bottom]; })(),
  defaults: ((p.layout && p.layout.shapes) || []).filter(s => s.name === 'default').map(s => {
    const xa = p._fullLayout.xaxis;
    const path = p.querySelector('.shapelayer path');
    const px = parseFloat(path.getAttribute('d').slice(1).split(',')[0]);
    const l = xa.p2l(px - xa._offset);
    return {value: s.x0, drawn_at: xa.type === 'log' ? Math.pow(10, l) : l, log: xa.type === 'log'};
  }),
})))
"""


def assert_drawn_right(plots: list[dict[str, Any]]) -> None:
    """No plot is clipped (its svg lies inside its container and the page's column) and
    every default marker sits at the default's value on its axis."""
    for p in plots:
        left, right, top, bottom = p["box"]
        c_left, c_right, c_top, c_bottom = p["container"]
        assert left >= c_left - 1 and right <= c_right + 1, (p["id"], p["box"], p["container"])
        assert top >= c_top - 1 and bottom <= c_bottom + 1, (p["id"], p["box"], p["container"])
        for d in p["defaults"]:
            assert abs(d["drawn_at"] - d["value"]) <= 0.01 * abs(d["value"]) + 1e-9, (p["id"], d)


def _listening(port: int) -> set[str]:
    """Local addresses with a TCP socket listening on `port` (from /proc/net/tcp{,6})."""
    out = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            addr, p = f[1].split(":")
            if f[3] == "0A" and int(p, 16) == port:  # 0A = LISTEN
                if len(addr) == 8:
                    out.add(".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0)))
                else:
                    out.add(addr)
    return out


class _DevTools:
    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            self.events.append(msg)

    def wait_for(self, event: str, timeout: float = 60) -> None:
        if any(e.get("method") == event for e in self.events):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == event:
                return
        raise TimeoutError(event)


class Chromium:
    """One headless Chromium (its own profile, DevTools on a loopback port): each render
    opens a page of its own in it, closed afterwards (a fresh page: its own events, console
    and requests), so the module starts the browser once instead of once a render."""

    def __init__(self) -> None:
        chromium = shutil.which("chromium")
        if not chromium:
            pytest.fail("chromium is not installed: run `make setup`")
        self.profile = tempfile.TemporaryDirectory(prefix="kvtune-chromium-")
        argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-extensions",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={self.profile.name}", "--window-size=1280,900",
                "about:blank"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        try:
            port_file = Path(self.profile.name) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().strip()):
                if self.proc.poll() is not None:
                    err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                    pytest.fail(f"chromium exited: {err[-2000:]}")
                if time.monotonic() > deadline:
                    pytest.fail("chromium did not open its DevTools port within 60 s")
                time.sleep(0.05)
            self.port = int(port_file.read_text().split()[0])
        except BaseException:
            self.stop()
            raise

    def _http(self, path: str, method: str = "GET") -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def new_page(self) -> tuple[str, str]:
        """A new blank page: its target id and DevTools WebSocket URL."""
        t = self._http("/json/new?about:blank", method="PUT")
        return t["id"], t["webSocketDebuggerUrl"]

    def close_page(self, target_id: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._http(f"/json/close/{target_id}")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        finally:
            self.profile.cleanup()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    browser = Chromium()
    try:
        yield browser
    finally:
        browser.stop()


def render_in_chromium(browser: Chromium, html_file: Path, png: Path,
                       width: int = 1280) -> dict[str, Any]:
    """Open the file in a new page of headless Chromium, wait for it to load, and return the
    plots found, console errors, network requests and page height; the full page goes to
    `png`."""
    if browser.proc.poll() is not None:
        pytest.fail("chromium exited")
    target_id, ws_url = browser.new_page()
    try:
        dt = _DevTools(ws_url)
        for domain in ("Runtime", "Log", "Page", "Network"):
            dt.call(f"{domain}.enable")
        dt.call("Emulation.setDeviceMetricsOverride", width=width, height=900,
                deviceScaleFactor=1, mobile=False)
        dt.call("Page.navigate", url=html_file.resolve().as_uri())
        dt.wait_for("Page.loadEventFired")
        time.sleep(1.0)  # plotly draws on load; let the last frame land
        res = dt.call("Runtime.evaluate", expression=_CHECK_PLOTS, returnByValue=True)
        plots = json.loads(res["result"]["value"])
        height = int(dt.call("Page.getLayoutMetrics")["cssContentSize"]["height"])
        shot = dt.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                       clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
        png.parent.mkdir(parents=True, exist_ok=True)
        png.write_bytes(base64.b64decode(shot["data"]))
        dt.ws.close()
    finally:
        browser.close_page(target_id)
    errors, requests = [], []
    for e in dt.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(" ".join(str(a.get("value", a.get("description")))
                                   for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            det = p["exceptionDetails"]
            errors.append(f"{det.get('text', '')} {det.get('exception', {}).get('description')}")
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(p["entry"]["text"])
        elif m == "Network.requestWillBeSent":
            requests.append(p["request"]["url"])
    return {"plots": plots, "errors": errors, "requests": requests, "height": height}


@pytest.mark.parallel  # the synthetic target, in process: nothing measured, no host knob
def test_report_of_an_unconfirmed_synthetic_study(tmp_path: Path) -> None:
    """Without confirmation the report says so, and still shows the search's best; no
    memcached section for another target."""
    from kvtune.report import render

    spec = tmp_path / "syn.yaml"
    spec.write_text("study: syn\ntarget: {kind: synthetic, noise_cov: 0.05}\n"
                    "knobs: [synthetic.x, synthetic.mode]\nobjective: {metric: ops_per_sec}\n"
                    "budget: {trials: 8}\nrepetitions: 2\nsampler: random\nseed: 2\n"
                    "evaluation: {noise_floor_runs: 3, drift_every: 0}\n")
    run = StudyRun(load_study(spec), Console(quiet=True), base_dir=tmp_path)
    run.run(confirm=False)
    page = render(load(run.store, "syn"))
    assert "Not decided: nothing is confirmed yet" in page and "best in search (trial" in page
    assert "Slab classes" not in page
    # convergence, importance and two curves; the synthetic target has no telemetry, so
    # no telemetry plots (its load metrics are in the table only)
    assert page.count('class="plotly-graph-div"') == 4
    assert "the load generator&#x27;s own figures" in page or "own figures" in page


def test_reproduction_shows_the_load_command_from_new_and_old_stores(
        study: tuple[str, Path], tmp_path: Path) -> None:
    """The load driver's raw output is stored under "load" (with its tool); stores written
    before load drivers have it under "kvload": the report shows the command from both."""
    from kvtune.report import write

    url, _ = study
    data = load(Store(url), "mc-report")
    stored = [r["raw"]["load"] for r in data.ok_reps()]
    assert stored and all(s["tool"] == "kvload" and "kvload" in s["argv"][0] for s in stored)
    html = write(data, tmp_path / "new.html", 0.05, analyse(data)).read_text()
    assert "# the load (kvload), as run against it" in html
    for r in data.reps:  # as an older kvtune stored it
        r["raw"]["kvload"] = {k: v for k, v in r["raw"].pop("load", {}).items() if k != "tool"}
    old = write(data, tmp_path / "old.html", 0.05, analyse(data)).read_text()
    assert "# the load (kvload), as run against it" in old
    argv_line = next(ln for ln in old.splitlines() if "--duration" in ln)
    assert argv_line in html


def test_default_marker_on_a_log_axis_and_no_clipping(tmp_path: Path,
                                                      chromium: Chromium) -> None:
    """A log-axis sensitivity curve with the default at 20 (drawn at 1.3 before the fix),
    in the report's grid of two columns beside a long-titled plot: the marker is at 20
    and no plot leaves its grid cell."""
    import plotly.offline

    from kvtune.analysis.sensitivity import Curve, Point
    from kvtune.report import figures
    from kvtune.report.html import _CSS, _plot

    pts = [Point(str(x), float(x), 100.0 + x, 95.0 + x, 105.0 + x, 3, 1)
           for x in (1, 4, 16, 64, 256, 1024)]
    log = figures.sensitivity(Curve("memcached.reqs_per_event", True, True, "search", pts,
                                    20), "p99_us")
    lin = figures.sensitivity(Curve("memcached.threads", True, False, "sweep", pts[:4], 4),
                              "p99_us")
    page = (f"<html><head><style>{_CSS}</style><script>{plotly.offline.get_plotlyjs()}"
            "</script></head><body><main><div class=grid>"
            + _plot(log, "plot-log") + _plot(lin, "plot-lin") + "</div></main></body></html>")
    f = tmp_path / "log.html"
    f.write_text(page)
    res = render_in_chromium(chromium, f, tmp_path / "log.png", width=1100)
    assert not res["errors"], res["errors"]
    plots = {p["id"]: p for p in res["plots"]}
    assert plots["plot-log"]["defaults"][0]["log"] is True
    assert abs(plots["plot-log"]["defaults"][0]["drawn_at"] - 20) < 0.2
    assert abs(plots["plot-lin"]["defaults"][0]["drawn_at"] - 4) < 0.04
    assert_drawn_right(list(plots.values()))


def test_host_facts_say_the_steal_every_repetition_saw() -> None:
    """A host quiet for the noise floor's half second and busy while the study measured:
    the facts say both, and the busy one can change the verdict (issue 34)."""
    from kvtune.measure.host_noise import lines, with_study

    start = {"steal": 0.0, "window_s": 0.5, "virtualized": True}
    reps = [{"metrics": {"steal": s}} for s in (0.01, 0.02, 0.08)] + [{"metrics": {}}]
    facts = with_study(start, reps, steal_threshold=0.05)
    assert facts is not None and facts["during"] == {"n": 3, "median": 0.02, "max": 0.08}
    text = "\n".join(lines(facts))
    assert "steal: 0.0% over 0.5 s [ok]" in text
    assert "steal during the study: median 2.0%, most 8.0% over 3 repetitions " \
           "[CAN CHANGE THE VERDICT]" in text
    quiet = with_study(start, [{"metrics": {"steal": 0.001}}], steal_threshold=0.05)
    assert quiet is not None and "CAN CHANGE" not in "\n".join(lines(quiet))
    assert with_study(None, []) is None
