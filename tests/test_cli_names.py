"""One set of names on the command line (issue 41): the same option for the same thing on
every command, walked over typer's whole command tree — an output path is `-o/--output`, a
results database `--storage`, a library `--library`, printing JSON the flag `--json`;
older spellings stay accepted, hidden from --help. Every command that prints results has
`--json`. The command lists of --help show each summary whole, on one line at 80
columns, and tables fit the terminal's width."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from support.cli import cli

from kvtune.cli import app

# concept -> (its canonical spellings, spellings that name the same thing and may only be
# hidden aliases)
CONCEPTS: dict[str, tuple[set[str], set[str]]] = {
    "output path": ({"-o", "--output"}, {"--out", "--out-dir", "--output-dir", "--outdir",
                                         "--out-file", "--output-file", "--dest"}),
    "results database": ({"--storage"}, {"--db", "--database", "--results", "--storage-url",
                                         "--results-db"}),
    "library": ({"--library"}, {"--lib", "--library-path", "--library-url", "--library-db"}),
    "json": ({"--json"}, {"--as-json", "--json-out", "--print-json", "--json-output"}),
}

# A visible option whose name looks like a concept's but is not its canonical spelling.
LOOKALIKE = {"output path": r"^--out(put)?([-_]\w+|dir|file)?$",
             "results database": r"^--(storage\S+|db\S*|database\S*|results?[-_]?db)$",
             "library": r"^--lib(rary)?\S+$|^--lib$",
             "json": r"^--\S*json\S*$"}

# Commands that print results (what was measured, analysed, checked or found): each has
# --json. The others write a file (-o), act on the host or a store, or serve.
PRINTS_RESULTS = {
    "tune", "run", "sweep", "show", "check", "knobs", "export", "verify", "canary",
    "predict", "workload describe", "workload mrc", "library list", "library show",
    "profiles", "profiles export",
}
NO_RESULTS = {
    "init",  # writes a study file (-o)
    "restore",  # puts the host back
    "report",  # writes an HTML page (-o)
    "dashboard",  # serves the study
    "workload capture", "workload import",  # write a model (-o)
    "library forget", "library import", "library export",  # change or copy the library
}


def walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every command and group under `cmd` (typer's click tree), by its command line."""
    if path:
        yield " ".join(path), cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from walk(sub, (*path, name))


COMMANDS = dict(walk(typer.main.get_command(app)))


def options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if getattr(p, "param_type_name", "") == "option"]


def visible_names(cmd: Any) -> set[str]:
    return {n for p in options(cmd) if not p.hidden for n in (*p.opts, *p.secondary_opts)}


def all_names(cmd: Any) -> set[str]:
    return {n for p in options(cmd) for n in (*p.opts, *p.secondary_opts)}


def is_leaf_or_printing_group(name: str, cmd: Any) -> bool:
    return not hasattr(cmd, "commands") or bool(getattr(cmd, "invoke_without_command", False))


def test_the_walk_finds_the_commands() -> None:
    assert {"tune", "show", "export", "library list", "profiles export",
            "workload describe"} <= set(COMMANDS), sorted(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_one_visible_spelling_per_concept(name: str) -> None:
    cmd = COMMANDS[name]
    shown = visible_names(cmd)
    for concept, (canonical, others) in CONCEPTS.items():
        wrong = (shown & others) | {n for n in shown - canonical
                                    if re.match(LOOKALIKE[concept], n)}
        assert not wrong, f"kvtune {name}: {concept} spelt {sorted(wrong)}; say " \
                          f"{'/'.join(sorted(canonical))} (an older name may stay as a " \
                          "hidden alias)"
    for p in options(cmd):
        names = set(p.opts) | set(p.secondary_opts)
        if "-o" in names or "--output" in names:  # the pair, never half of it
            assert {"-o", "--output"} <= names, f"kvtune {name}: {sorted(names)}"
        if "--json" in names and not p.hidden:  # printing JSON is a flag, not a file
            assert p.is_flag, f"kvtune {name}: --json takes a value; write files with -o"
    for p in cmd.params:  # an output path is an option, not a positional
        if getattr(p, "param_type_name", "") == "argument" and not p.hidden:
            assert "to write" not in (getattr(p, "help", "") or ""), \
                f"kvtune {name}: the file to write is positional; make it -o/--output"


@pytest.mark.parametrize("name", sorted(n for n, c in COMMANDS.items()
                                        if hasattr(c, "commands")))
def test_a_group_option_is_accepted_by_its_commands(name: str) -> None:
    group = COMMANDS[name]
    for sub_name, sub in group.commands.items():
        missing = visible_names(group) - {"-h", "--help"} - all_names(sub)
        assert not missing, \
            f"kvtune {name} {sub_name} does not accept {sorted(missing)} (`kvtune {name} " \
            f"{sub_name} {sorted(missing)[0]} X` fails with 'No such option')"


def test_every_command_is_classified() -> None:
    leaves = {n for n, c in COMMANDS.items() if is_leaf_or_printing_group(n, c)}
    unknown = leaves - PRINTS_RESULTS - NO_RESULTS
    assert not unknown, f"say whether these print results (PRINTS_RESULTS, then they need " \
                        f"--json) or not (NO_RESULTS): {sorted(unknown)}"


@pytest.mark.parametrize("name", sorted(PRINTS_RESULTS))
def test_a_command_that_prints_results_has_json(name: str) -> None:
    if name not in COMMANDS:
        pytest.skip(f"kvtune {name} does not exist (yet)")
    assert "--json" in visible_names(COMMANDS[name]), f"kvtune {name} prints results " \
                                                      "without --json"


def test_old_spellings_are_hidden_aliases() -> None:
    for name, old in (("export", "--out"), ("profiles export", "--out-dir")):
        cmd = COMMANDS[name]
        assert old in all_names(cmd) and old not in visible_names(cmd), (name, old)
    assert "--library" in all_names(COMMANDS["profiles export"])
    for name in ("export", "profiles export", "library export", "canary"):
        text = cli(*name.split(), "--help", env={"COLUMNS": "200"}).stdout
        assert "-o, --output" in text, (name, text)
        assert not re.search(r"--out\b|--out-dir", text), (name, text)
        usage = text.splitlines()[0]
        assert not re.search(r"\[(json_)?file\]", usage), usage  # hidden stays hidden


def test_old_spellings_still_work(tmp_path: Any) -> None:
    from kvtune.library.store import Library

    lib = tmp_path / "lib.db"
    Library(f"sqlite:///{lib}")  # an empty library
    for args in (["library", "export", str(tmp_path / "old.json")],
                 ["library", "export", "-o", str(tmp_path / "new.json")]):
        r = cli(*args, "--library", str(lib))
        assert r.returncode == 0 and "wrote 0 entries" in r.stdout, r.stderr
    assert (tmp_path / "old.json").exists() and (tmp_path / "new.json").exists()
    r = cli("profiles", "export", "c1", "--out-dir", str(tmp_path / "p"), "--library",
            str(lib))
    assert r.returncode == 2 and "no category 'c1'" in r.stderr, r.stderr
    r = cli("profiles", "--library", str(lib), "export", "c1", "--library", str(lib))
    assert r.returncode == 2 and "no category 'c1'" in r.stderr, r.stderr
    r = cli("library", "export", "--library", str(lib))
    assert r.returncode == 2 and "-o FILE" in r.stderr, r.stderr


GROUPS = sorted({""} | {n for n, c in COMMANDS.items() if hasattr(c, "commands")})


@pytest.mark.parametrize("group", GROUPS)
def test_help_summaries_are_whole_and_fit(group: str) -> None:
    r = cli(*group.split(), "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("Commands:\n", 1)[1].splitlines()
    for line in lines:
        if not line.strip():
            break
        assert len(line) <= 80, line
        assert re.match(r"  \S+ +\S", line), f"kvtune {group} --help: a summary does not " \
                                             f"fit on its line: {line!r}"
        summary = line.split(None, 1)[1]
        assert not summary.endswith("...") and summary[-1] in ".?!", \
            f"kvtune {group} --help cuts a summary: {line!r}"


def test_tables_fit_the_terminal() -> None:
    for columns in ("80", "120"):
        r = cli("knobs", env={"COLUMNS": columns})
        assert r.returncode == 0, r.stderr
        widest = max(len(line) for line in r.stdout.splitlines())
        assert widest <= int(columns), f"COLUMNS={columns}: a line of {widest}"
    r = cli("knobs", env={"COLUMNS": "80"})
    assert "available" in r.stdout and "knob" in r.stdout


def test_both_spellings_with_different_values_are_one_mistake(tmp_path: Any) -> None:
    r = cli("export", "nosuch", "-o", str(tmp_path / "a"), "--out", str(tmp_path / "b"),
            "--storage", f"sqlite:///{tmp_path / 'none.db'}")
    assert r.returncode == 2 and "--out is another name for --output" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


STUDY = """study: q
target: {{kind: synthetic}}
load: {{mode: open, rate: {rate}, workload: {{keys: {keys}}}}}
knobs: [synthetic.x]
objective: {{metric: ops_per_sec}}
"""


def test_quantities_in_a_study_file_take_the_command_lines_grammar(tmp_path: Any) -> None:
    from kvtune.errors import UserError
    from kvtune.study.loader import parse_study

    spec = parse_study(STUDY.format(rate="50k", keys="100k"), "q.yaml").spec
    assert spec.load is not None and spec.load.rate == 50_000
    assert spec.load.workload.keys == 100_000
    for rate in ("1.5M", "20000", "1e5", "'30000'"):
        spec = parse_study(STUDY.format(rate=rate, keys=10), "q.yaml").spec
        assert spec.load is not None and spec.load.rate in (1.5e6, 20_000, 1e5, 30_000)
    cap = parse_study(STUDY.replace("rate: {rate}, ", "").format(keys=10).replace(
        "{metric: ops_per_sec}", '{metric: capacity, slo: "p99_us <= 500", '
        "rates: [20k, 1.5M]}"), "q.yaml").spec
    assert cap.objective.rates == (20_000, 1_500_000)
    for bad, field in (("rate=50x", "load.rate"), ("keys=1.5k5", "load.workload.keys")):
        key, value = bad.split("=")
        text = STUDY.format(**{"rate": "50k", "keys": 10, key: value})
        with pytest.raises(UserError) as e:
            parse_study(text, "q.yaml")
        said = str(e.value)  # the message and its problems
        assert field in said and "such as" in said, said
        assert "Input should be a valid number" not in said, said
    r = cli("check", str(_write(tmp_path, STUDY.format(rate="50kk", keys=10))))
    assert r.returncode == 2 and "load.rate" in r.stdout and "50k or 1.5M" in r.stdout


def _write(d: Any, text: str) -> Any:
    p = d / "q.yaml"
    p.write_text(text)
    return p
