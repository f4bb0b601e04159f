"""`kvtune init`: a commented study file for the operator's own server.

    kvtune init --port 11211 --config /etc/memcached.conf --slo 'p99_us <= 1ms' -o study.yaml
    kvtune init --pid 1234 --slo 'p99_us <= 1ms' --capture 60s
    kvtune init --config /etc/valkey/valkey.conf --slo 'p99_us <= 2ms'

From a running server (server.py) it takes the kind, the configuration file it runs with (the
study's baseline), its CPUs and NUMA node (cpus.py: the study's placement), and on request a
capture of its live traffic (the study's workload); from a configuration file alone, the
kind and the baseline. The SLO and the objective come from the options, or are asked on a
terminal. The file written (study.py) is parsed by the loader first, is never written over
an existing file without --force, and passes `kvtune check`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from kvtune import kind_registry as kinds
from kvtune.errors import UserError

_KINDS = ", ".join(kinds.names())


def _flag(*decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, metavar="", **kw)


def init_command(
    pid: Annotated[int | None, typer.Option(
        "--pid", help="the running server's process id")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", help="the TCP port the running server listens on (it is found by it)")]
    = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="the server's configuration file (the one it was started with; "
                         "without a running server, the study's only source)")] = None,
    kind: Annotated[str | None, typer.Option(
        "--kind", help=f"the server's kind when the configuration file does not say: "
                       f"{_KINDS}")] = None,
    slo: Annotated[str | None, typer.Option(
        "--slo", help="the latency SLO, e.g. 'p99_us <= 1000' (µs) or 'p99_us <= 1ms' "
                      "(asked on a terminal when missing)")] = None,
    objective: Annotated[str | None, typer.Option(
        "--objective", help="what to improve: capacity (requests/s within the SLO; the "
                            "default) or a metric such as p99_us (then --rate, or "
                            "--capture's rate)")] = None,
    rate: Annotated[str | None, typer.Option(
        "--rate", help="requests/s of the open-loop load, for an objective other than "
                       "capacity (50000, 50k or 1.5M, as in a study file)")] = None,
    capture: Annotated[str | None, typer.Option(
        "--capture", help="capture this long of the server's live traffic (e.g. 60s) as "
                          "the study's workload (read-only; loopback)")] = None,
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="the study file to write")] = Path("study.yaml"),
    name: Annotated[str | None, typer.Option(
        "--name", help="the study's name (default: the kind and the port)")] = None,
    quick: Annotated[bool, _flag(
        "--quick", help="a study of about a minute, to try the steps (one trial, short "
                        "windows, coarse searches): not an answer")] = False,
    force: Annotated[bool, _flag(
        "--force", help="write over an existing study file")] = False,
) -> None:
    """Write a commented study file for your own server.

    From the running server (--pid or --port: its argv, its configuration file, its CPUs
    and NUMA node) or from its configuration file alone (--config); the SLO and objective
    from the options, or asked on a terminal. The file passes `kvtune check`; nothing is
    started or changed on the server."""
    from kvtune.initcmd.run import run
    from kvtune.quantities import parse_rate

    try:  # one grammar for a rate, on the command line and in a study file
        rps = None if rate is None else parse_rate(rate)
    except ValueError as e:
        raise UserError(f"--rate: {e}") from None
    answers = _ask(slo, objective)
    for line in run(pid=pid, port=port, config=config, kind=kind, slo=answers[0],
                    objective=answers[1], rate=rps, capture=capture, output=output,
                    name=name, quick=quick, force=force):
        print(line)


def _ask(slo: str | None, objective: str | None) -> tuple[str | None, str]:
    """The SLO and the objective: as given, else asked when stdin is a terminal."""
    tty = sys.stdin.isatty()
    if objective is None:
        objective = (typer.prompt("Objective (capacity, or a metric such as p99_us)",
                                  default="capacity") if tty and slo is None else "capacity")
    if slo is None and tty:
        slo = typer.prompt("Latency SLO, e.g. p99_us <= 1000 (µs) or p99_us <= 1ms",
                           default="" if objective != "capacity" else None) or None
    if slo is None and objective == "capacity":
        raise UserError("--slo: the capacity objective needs the latency SLO, e.g. --slo "
                        "'p99_us <= 1000' (asked only when kvtune init runs on a terminal)")
    return slo, objective
