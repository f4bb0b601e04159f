"""`kvtune init`'s steps: find the server, its configuration and its CPUs, capture its
traffic when asked, write the study (and, for a server whose options are its argv, that
argv as its configuration file beside the study). Returns the lines it says."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvtune import kind_registry as kinds
from kvtune.errors import UserError
from kvtune.initcmd import cpus as cpu_choice
from kvtune.initcmd.server import (
    Server,
    from_process,
    guess_kind,
    init_part,
    pid_on_port,
    reader,
    settings_of,
)
from kvtune.initcmd.study import Plan, render


def _check_output(path: Path, force: bool, what: str) -> None:
    """A file init writes: never over an existing one without --force, never a directory."""
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory: give a file name")
    if (path.exists() or path.is_symlink()) and not force:
        raise UserError(f"{what} {path} exists: kvtune init does not write over it (give "
                        "--force to replace it)")


def _argv_config(kind: str, text: str, shown: str) -> dict[str, str]:
    """The settings (name -> value) of the configuration built from a running server's
    argv, judged as a file of its own by the kind's reader (in a private directory):
    UserError naming each option kvtune cannot run."""
    tmp = tempfile.mkdtemp(prefix="kvtune-init-")
    try:
        path = Path(tmp, shown)
        path.write_text(text)
        try:
            return settings_of(kind, path)[0]
        except UserError as e:
            raise UserError(f"the running server's command line: {len(e.problems)} "
                            "setting(s) kvtune cannot run (nothing was written)",
                            [p.replace(f"{path}, line", "option").replace(str(path), shown)
                             for p in e.problems]) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _config_for_process(s: Server, part: Any, output: Path, force: bool
                        ) -> tuple[Path | None, str, str | None]:
    """The configuration file a running server was started with: (its path, how it was
    found, the text to write beside the study when the server's argv is its
    configuration)."""
    named = part.config_path_in_argv(s.argv)
    if named:
        return Path(named), "the file its command line names", None
    if s.port is not None:
        told = part.live_config_path("127.0.0.1", s.port)
        if told:
            return Path(told), "the file the server says it was started with", None
    argv_text = part.argv_config(s.argv)
    running = _argv_config(s.kind, argv_text, "argv") if argv_text is not None else None
    for candidate in part.config_paths:
        path = Path(candidate)
        if not path.is_file():
            continue
        if running is None:
            return path, "its package's configuration file", None
        try:
            if settings_of(s.kind, path)[0] == running:
                return path, ("its package's configuration file, which holds the settings "
                              "the server runs with"), None
        except UserError:
            continue
    if argv_text is None:
        return None, "", None
    conf = output.with_name(f"{output.stem}-{reader(s.kind).conf}")
    _check_output(conf, force, "the server's configuration")
    return conf, f"the running server's options (pid {s.pid}), one a line", argv_text


def _differences(ours: dict[str, str], running: dict[str, str]) -> list[str]:
    """The settings the file and the running server disagree on, by name."""
    return sorted(n for n in set(ours) | set(running) if ours.get(n) != running.get(n))


def run(*, pid: int | None, port: int | None, config: Path | None, kind: str | None,
        slo: str | None, objective: str, rate: float | None, capture: str | None,
        output: Path, name: str | None, quick: bool, force: bool) -> list[str]:
    from kvtune.durations import parse_duration
    from kvtune.metrics import OBJECTIVES, unknown_objective
    from kvtune.spec import parse_slo

    said: list[str] = []
    # The options first: nothing is read before they are known to be good.
    if slo is not None:
        try:
            slo = str(parse_slo(slo))
        except ValueError as e:
            raise UserError(f"--slo: {e}") from None
    if objective not in OBJECTIVES:
        raise UserError(f"--objective: {unknown_objective(objective)}")
    if objective != "capacity" and rate is None and capture is None:
        raise UserError(f"--objective {objective}: the load needs a rate: give --rate "
                        "(requests/s), or --capture to replay the live traffic's")
    if rate is not None and not 0 < rate <= 1e9:
        raise UserError(f"--rate {rate:g}: a rate in (0, 1e9] requests/s")
    if port is not None and not 0 < port < 65536:
        raise UserError(f"--port {port}: not a TCP port")
    if kind is not None and kind not in kinds.names():
        raise UserError(f"--kind {kind!r}: one of {', '.join(kinds.names())}")
    seconds = None
    if capture is not None:
        try:
            seconds = parse_duration(capture)
        except ValueError as e:
            raise UserError(f"--capture {capture!r}: {e}") from None
        if pid is None and port is None:
            raise UserError("--capture records a running server: give --pid or --port")
    if pid is None and port is None and config is None:
        raise UserError("say which server: --pid or --port (a running one), or --config "
                        "(its configuration file)")
    _check_output(output, force, "-o")

    # The server.
    if pid is not None or port is not None:
        s = from_process(pid if pid is not None else pid_on_port(port or 0))
        if port is not None:
            s.port = port
        if kind is not None and kind != s.kind:
            raise UserError(f"--kind {kind}: the process {s.pid} runs {s.kind}")
    else:
        from kvtune.targets.server_config import read_text

        assert config is not None
        try:
            text = read_text(config, what="--config")
        except ValueError as e:
            raise UserError(f"--config: {e}") from None
        s = Server(kind or guess_kind(config, text))
    part = init_part(s.kind)
    k = kinds.get(s.kind)

    # Its configuration: the study's baseline.
    argv_text = None
    if config is not None:
        s.config, s.config_how = config, "the configuration file given (--config)"
    elif s.pid is not None:
        s.config, s.config_how, argv_text = _config_for_process(s, part, output, force)
    settings: dict[str, str] = {}
    if argv_text is not None:
        assert s.config is not None
        settings = _argv_config(s.kind, argv_text, s.config.name)
    elif s.config is not None:
        settings = settings_of(s.kind, s.config)[0]
        own = part.argv_config(s.argv) if s.pid is not None else None
        if own is not None:
            differ = _differences(settings, _argv_config(s.kind, own, "argv"))
            if differ:
                said.append(f"note: the running server and {s.config} differ in "
                            f"{', '.join(differ)}: the file is the baseline (what a "
                            "restart runs)")

    # Its CPUs.
    try:
        placement = cpu_choice.choose(cpu_choice.read_topology(), s.cpus, s.running_on)
    except ValueError as e:
        raise UserError(f"kvtune init: {e}") from None

    study_name = name or (f"{s.kind}-{s.port}" if s.port else s.kind)
    source = []
    if s.pid is not None:
        source.append(f"From the running server: pid {s.pid}"
                      + (f", user {s.user}" if s.user else "")
                      + (f", TCP port {s.port}" if s.port else "")
                      + (f", CPUs {cpu_choice.cpu_list(s.cpus)}" if s.cpus else "") + ".")
    elif s.config is not None:
        source.append(f"From its configuration file {s.config} (no running server read).")
    plan = Plan(name=study_name, kind=s.kind, label=k.label, placement=placement,
                knobs=part.knobs(settings, len(placement.server)), objective=objective,
                slo=slo, config=None, config_how=s.config_how, source=source, rate=rate,
                quick=quick)
    if s.config is not None:
        plan.config = (s.config.name if argv_text is not None
                       else os.path.abspath(s.config))

    # Its traffic, when asked.
    model = None
    if seconds is not None:
        model = output.with_name(f"{output.stem}-traffic.json")
        _check_output(model, force, "the captured traffic")
        plan.workload_file = model.name

    # The study checked before the capture (its workload as a stand-in), and again with it.
    _parse(render(replace(plan, workload_file=None)), output)
    if model is not None and seconds is not None:
        from kvtune.workload.capture import capture as run_capture

        if s.port is None:
            raise UserError(f"--capture: the process {s.pid} listens on no TCP port")
        run_capture(f"{s.kind}://127.0.0.1:{s.port}", seconds, str(model),
                    max_events=5_000_000, max_bytes=1 << 30, sample=False,
                    allow_remote=False, say=said.append)
        said.append(f"wrote {model} (the live traffic, {seconds:g} s)")
    text = render(plan)
    _parse(text, output)
    from kvtune.safety.files import write_file

    if argv_text is not None:
        assert s.config is not None
        write_file(s.config, f"# {k.label} options of the running server (pid {s.pid}), "
                   "read by kvtune init: the study's baseline\n" + argv_text,
                   what="the server's configuration", mode=0o600)
        said.append(f"wrote {s.config} (the running server's options)")
    write_file(output, text, what="-o")
    knob_names = [ln.split("#")[0].strip(" -{}").split(",")[0].removeprefix("name: ")
                  for ln in plan.knobs]
    said += [f"study {study_name!r}: {k.label} "
             + (f"pid {s.pid}" + (f" (user {s.user}, TCP port {s.port})" if s.user and s.port
                                  else "") if s.pid is not None
                else "(no running server read: its configuration file alone)"),
             f"  baseline: {plan.config or 'the server defaults'}"
             + (f" ({s.config_how})" if plan.config else ""),
             f"  server on CPUs {cpu_choice.cpu_list(placement.server)}, load on CPUs "
             f"{cpu_choice.cpu_list(placement.load)}: {placement.why[0]}",
             f"  knobs: {', '.join(knob_names)}",
             f"  objective: {objective}" + (f" at {slo}" if slo and objective == "capacity"
                                            else (f", {slo}" if slo else "")),
             f"wrote {output}" + (" (--quick: a rehearsal of the steps, not an answer)"
                                  if quick else ""),
             f"next: kvtune check {output}, then kvtune run {output} (its capacity now)"]
    return said


def _parse(text: str, output: Path) -> None:
    """The loader's check of the study text (the schema and the registries; nothing is
    started): a study init writes is one the loader takes."""
    from kvtune.study.loader import parse_study

    parse_study(text, str(output), base_dir=output.resolve().parent)
