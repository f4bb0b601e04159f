"""The test suite's own layout (issue 39 item 2), checked from its source with `ast`:

- tests/support/ is the only place tests start a server (memcached, redis-server,
  valkey-server, PostgreSQL): no test module runs one of their binaries itself;
- free ports are found one way (support.servers.free_port, kvtune's own) and a port is waited
  for one way (support.servers.wait_port): no test module binds port 0 or polls a port in a
  loop, nor defines a helper named for either;
- no test module imports another test module (a helper two modules share lives in
  tests/support/), neither in its code nor in the code it hands a child Python.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"

# The servers' programs, by file name; and words that name one in a variable
# (memcached_bin, redis_bin, valkey_bin, PG_BIN, WRAPPER: Debian's memcached wrapper).
SERVER_PROGRAMS = {"memcached", "redis-server", "valkey-server", "postgres", "pg_ctl",
                   "pg_ctlcluster", "initdb", "systemd-memcached-wrapper"}
SERVER_WORD = re.compile(r"memcached|redis|valkey|postgres|pg_|initdb|wrapper", re.I)
# Programs that run the program named after them (their arguments are searched too).
LAUNCHERS = {"taskset", "setpriv", "nice", "chrt", "env", "sudo", "runuser", "numactl",
             "ionice", "setsid", "timeout", "stdbuf", "unshare", "prlimit", "nohup"}
# Their options that take a value as the next word (taskset -c CPUS, nice -n N...).
LAUNCHER_VALUED = {"-c", "--cpu-list", "-n", "--adjustment", "-u", "--user", "-g", "--group",
                   "-C", "--physcpubind", "-m", "--membind", "-p", "--priority"}
# The calls that start a process, by module: subprocess.Popen(...), os.execv(...)...
STARTS = {"subprocess": {"Popen", "run", "call", "check_call", "check_output"},
          "os": {"execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp",
                 "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn",
                 "posix_spawnp"},
          "asyncio": {"create_subprocess_exec"}}
BARE_STARTS = {"Popen", "check_output", "check_call", "create_subprocess_exec"}
FREE_PORT_NAME = re.compile(r"^_?(get_|find_|pick_|a_)?(free|unused|open)_?port", re.I)
WAIT_PORT_NAME = re.compile(r"^_?wait(_for)?(_on)?_?(the_)?port", re.I)
CONNECTS = {"create_connection", "connect_ex", "connect"}
TEST_IMPORT = re.compile(r"^\s*(from|import)\s+(tests\b|conftest\b|test_\w+)", re.M)


def layout_modules() -> list[Path]:
    """Every Python file of tests/ outside tests/support/ (test modules and conftest)."""
    return sorted(p for p in TESTS.rglob("*.py")
                  if SUPPORT not in p.parents and "__pycache__" not in p.parts)


# -- the checks, each on a module's source ----------------------------------------------------


class _Scope:
    """The assignments of a function (or of the module): name -> the values given it."""

    def __init__(self, node: ast.AST, outer: _Scope | None = None) -> None:
        self.outer = outer
        self.values: dict[str, list[ast.expr]] = {}
        for n in _walk_own(node):
            if isinstance(n, ast.Assign):
                for target in n.targets:
                    self._bind(target, n.value)
            elif isinstance(n, ast.AnnAssign | ast.NamedExpr) and n.value is not None:
                self._bind(n.target, n.value)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.values.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List) \
                and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                self._bind(t, v)

    def of(self, name: str) -> list[ast.expr]:
        here = self.values.get(name, [])
        return here + (self.outer.of(name) if self.outer else [])


def _walk_own(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `node`'s own body: not those of the functions and classes inside it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield child
        yield from _walk_own(child)


def _called(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else "")


def _starts_process(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
        return f.attr in STARTS.get(f.value.id, set())
    return isinstance(f, ast.Name) and f.id in BARE_STARTS


class _Servers:
    """Whether an argv expression runs a server's program."""

    def __init__(self, scope: _Scope) -> None:
        self.scope = scope
        self.seen: set[int] = set()

    def names_server(self, e: ast.expr) -> bool:
        """`e` is (the path of) a server's program."""
        if isinstance(e, ast.Constant) and isinstance(e.value, str):
            return Path(e.value).name in SERVER_PROGRAMS
        if isinstance(e, ast.Name):
            return bool(SERVER_WORD.search(e.id)) or any(
                self.names_server(v) for v in self._values(e.id))
        if isinstance(e, ast.Attribute):
            return bool(SERVER_WORD.search(e.attr))
        if isinstance(e, ast.Call):  # str(x), Path(x), shutil.which(x), os.fspath(x)
            if _called(e.func) in {"str", "Path", "which", "fspath", "abspath", "realpath"}:
                return any(self.names_server(a) for a in e.args)
            return False
        if isinstance(e, ast.BoolOp):  # shutil.which("memcached") or "memcached"
            return any(self.names_server(v) for v in e.values)
        if isinstance(e, ast.IfExp):
            return self.names_server(e.body) or self.names_server(e.orelse)
        if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div):  # PG_BIN / "pg_ctl"
            return self.names_server(e.left)
        return False

    def _values(self, name: str) -> list[ast.expr]:
        out = []
        for v in self.scope.of(name):
            if id(v) not in self.seen:
                self.seen.add(id(v))
                out.append(v)
        return out

    def _program_runs_server(self, elts: list[ast.expr]) -> bool:
        """The program of an argv list is a server's: its first word, or the program a
        launcher runs (taskset -c CPUS PROGRAM..., setpriv --opt PROGRAM...)."""
        if not elts:
            return False
        first = elts[0]
        if isinstance(first, ast.Starred):
            return self.runs_server(first.value)
        if not (isinstance(first, ast.Constant) and first.value in LAUNCHERS):
            return self.names_server(first)
        i = 1
        while i < len(elts) and isinstance(elts[i], ast.Constant) and \
                str(elts[i].value).startswith("-"):  # type: ignore[attr-defined]
            i += 1 + (elts[i].value in LAUNCHER_VALUED)  # type: ignore[attr-defined]
        return self._program_runs_server(elts[i:])

    def runs_server(self, argv: ast.expr) -> bool:
        """`argv` (a list, a name given one, a wrapper's call on one) runs a server."""
        if isinstance(argv, ast.List | ast.Tuple):
            if not argv.elts:
                return False
            return self._program_runs_server(argv.elts)
        if isinstance(argv, ast.BinOp) and isinstance(argv.op, ast.Add):
            return self.runs_server(argv.left)
        if isinstance(argv, ast.Name):
            return any(self.runs_server(v) for v in self._values(argv.id))
        if isinstance(argv, ast.Call):  # a launcher's argv built around it: wrap_argv(s, argv)
            return any(self.runs_server(a) for a in argv.args)
        return False


@functools.cache
def _parse(source: str) -> ast.Module:
    """A module's syntax tree, parsed once for the three checks below (none changes it)."""
    return ast.parse(source)


def server_starts(source: str) -> list[str]:
    """Where a module starts a server's program itself."""
    tree = _parse(source)
    found = []

    def visit(node: ast.AST, scope: _Scope) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(child, _Scope(child, scope))
                continue
            if isinstance(child, ast.Call) and _starts_process(child):
                argv = child.args[0] if child.args else next(
                    (k.value for k in child.keywords if k.arg == "args"), None)
                if argv is not None and _Servers(scope).runs_server(argv):
                    found.append(f"line {child.lineno}: {ast.unparse(child)[:100]}")
            visit(child, scope)

    visit(tree, _Scope(tree))
    return found


def port_helpers(source: str) -> list[str]:
    """Where a module finds a free port or waits for one itself."""
    tree = _parse(source)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            if FREE_PORT_NAME.match(n.name) or WAIT_PORT_NAME.match(n.name):
                found.append(f"line {n.lineno}: def {n.name}")
        elif isinstance(n, ast.With):
            # A socket bound to port 0: a free port probed for here, unless it listens (a
            # port held on purpose: a test of a taken port).
            calls = [_called(c.func) for c in ast.walk(n) if isinstance(c, ast.Call)]
            for c in ast.walk(n):
                if isinstance(c, ast.Call) and _called(c.func) == "bind" and c.args and \
                        isinstance(c.args[0], ast.Tuple) and len(c.args[0].elts) == 2 and \
                        isinstance(c.args[0].elts[1], ast.Constant) and \
                        c.args[0].elts[1].value == 0 and "listen" not in calls:
                    found.append(f"line {c.lineno}: {ast.unparse(c)} (a free port, found here)")
        elif isinstance(n, ast.While | ast.For):
            for c in ast.walk(n):
                if isinstance(c, ast.Call) and _called(c.func) in CONNECTS:
                    found.append(f"line {n.lineno}: a loop trying {_called(c.func)} "
                                 "(waits for a port)")
                    break
    return found


def imported_test_modules(source: str) -> list[str]:
    """Where a module imports a test module (or hands a child Python code that does)."""
    tree = _parse(source)
    found = []
    for n in ast.walk(tree):
        names: list[str] = []
        if isinstance(n, ast.Import):
            names = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
            names = [n.module]
        elif isinstance(n, ast.ImportFrom) and n.level > 0:
            names = [n.module or "."]
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and \
                TEST_IMPORT.search(n.value):
            found.append(f"line {n.lineno}: code in a string imports "
                         f"{TEST_IMPORT.search(n.value).group(0).strip()!r}")  # type: ignore[union-attr]
            continue
        for name in names:
            top = name.split(".")[0]
            if top.startswith("test_") or top in ("tests", "conftest", "."):
                found.append(f"line {n.lineno}: imports {name}")
    return found


# -- the suite as it is -------------------------------------------------------------------


@pytest.mark.parametrize("check", [server_starts, port_helpers, imported_test_modules],
                         ids=["server-starts", "port-helpers", "test-imports"])
def test_the_suite_keeps_its_layout(check) -> None:  # type: ignore[no-untyped-def]
    problems = {str(p.relative_to(TESTS)): found for p in layout_modules()
                if (found := check(p.read_text()))}
    assert not problems, (
        f"{check.__doc__} (use tests/support/servers.py: start, running, free_port, "
        f"wait_port, stop; shared helpers go to tests/support/): {problems}")


def test_the_guard_reads_every_test_module() -> None:
    names = {p.name for p in layout_modules()}
    assert "conftest.py" in names and Path(__file__).name in names and len(names) > 40
    assert not any(SUPPORT in p.parents for p in layout_modules())


# -- the checks catch what they are for (the suite's own former ways) -----------------------

STARTS_SERVER = {
    "fixture binary": """
def test_x(memcached_bin):
    port = free_port()
    srv = subprocess.Popen([memcached_bin, "-p", str(port), "-l", "127.0.0.1", "-U", "0"]
                           + (["-u", "nobody"] if _root() else []))
""",
    "argv built first, then pinned": """
def start(*args, cpus=None):
    argv = [memcached_bin, "-u", "nobody", "-l", "127.0.0.1", "-p", str(port), *args]
    if cpus is not None:
        argv = ["taskset", "-c", cpus, *argv]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
""",
    "which or name": """
def start(conf):
    proc = subprocess.Popen([shutil.which("valkey-server") or "valkey-server", str(conf)])
""",
    "through taskset": """
mc = subprocess.Popen(["taskset", "-c", "0", shutil.which("memcached") or "memcached",
                       "-u", "nobody"])
""",
    "through a shim": """
def _start(memcached_bin, s):
    argv = [memcached_bin, "-l", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(hsched.wrap_argv(s, argv), stdout=subprocess.DEVNULL)
""",
    "tuple assignment": """
def installed(conf, memcached):
    argv, i = [memcached], 0
    argv += ["-p", str(port)]
    proc = subprocess.Popen(argv)
""",
    "a PostgreSQL binary": """
subprocess.run([PG_BIN / "pg_ctl", "-D", datadir, "start"], check=True)
""",
    "from subprocess import Popen": """
from subprocess import Popen
p = Popen(args=["/usr/bin/redis-server", "--port", "0"])
""",
}

STARTS_NO_SERVER = {
    "through support": """
def test_x(memcached_bin):
    with running("memcached", ["-m", "64"], binary=memcached_bin, user="nobody") as s:
        load = subprocess.Popen([kvload_bin, "--server", f"127.0.0.1:{s.port}"])
""",
    "kvtune naming a kind": """
p = subprocess.Popen([sys.executable, "-m", "kvtune", "mrc", "--kind", "memcached"])
""",
    "a fake named like a server": """
def test_fake(tmp):
    fake_dir = Path(tempfile.mkdtemp())
    fake = fake_dir / "memcached"
    p = subprocess.Popen(["setpriv", "--reuid=65534", str(fake), "-t", "2"])
""",
    "a server's path as an argument": """
r = subprocess.run(["setpriv", "--reuid=65534", SYSTEM_PY, "-c", code, "/usr/bin/memcached"])
""",
    "a command as a function of the port": """
with running("redis", command=lambda port: [redis_bin, "--port", str(port)]) as s:
    pass
""",
}

PORT_HELPERS = {
    "own free_port": """
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
""",
    "own _wait_port": """
def _wait_port(port, proc):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
""",
    "inline bind and poll": """
def fixture():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    for _ in range(200):
        with socket.socket() as sk:
            if sk.connect_ex(("127.0.0.1", port)) == 0:
                break
""",
}

# ("{T}" is "test_", "{P}" "tests": written so, this module's own strings import no test module)
IMPORTS = {name: code.format(T="test_", P="tests") for name, code in {
    "import": "from {T}export import MC_BASE\n",
    "module": "import {T}sched\n",
    "package": "from {P}.{T}fleet import x\n",
    "in a child's code": 'SCRIPT = """\\nimport sys\\nfrom {T}sched import FAKE_KNOB\\n"""\n',
}.items()}


@pytest.mark.parametrize("name", sorted(STARTS_SERVER))
def test_a_server_started_by_a_test_module_is_found(name: str) -> None:
    assert server_starts(STARTS_SERVER[name]), name


@pytest.mark.parametrize("name", sorted(STARTS_NO_SERVER))
def test_a_process_that_is_no_server_is_not_counted(name: str) -> None:
    assert server_starts(STARTS_NO_SERVER[name]) == [], name


@pytest.mark.parametrize("name", sorted(PORT_HELPERS))
def test_an_own_port_helper_is_found(name: str) -> None:
    assert port_helpers(PORT_HELPERS[name]), name


def test_supports_port_helpers_are_not_counted() -> None:
    source = ("from support.servers import free_port, wait_port\n"
              "def test_x():\n    port = free_port()\n    wait_port(port)\n")
    assert port_helpers(source) == [] and server_starts(source) == []


def test_a_port_held_on_purpose_is_not_counted() -> None:
    """A listening socket on port 0 is the test's taken port, not a probe for a free one."""
    source = ("with socket.socket() as s:\n    s.bind(('127.0.0.1', 0))\n    s.listen()\n"
              "    port = s.getsockname()[1]\n")
    assert port_helpers(source) == []


@pytest.mark.parametrize("name", sorted(IMPORTS))
def test_a_test_module_import_is_found(name: str) -> None:
    assert imported_test_modules(IMPORTS[name]), name


def test_support_imports_are_not_counted() -> None:
    assert imported_test_modules("from support.servers import running\nimport pytest\n"
                        "from kvtune.cli import main\n") == []


def test_the_slowest_tests_are_named_as_pytest_names_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """scripts/slowest.py (what `make test` prints last) names a test pytest-xdist grouped
    without the "@group" xdist appends to it in the JUnit file, and keeps an "@" that is
    part of a parameter's id."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "slowest", Path(__file__).resolve().parent.parent / "scripts" / "slowest.py")
    assert spec is not None and spec.loader is not None
    slowest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(slowest)
    (tmp_path / "junit-parallel.xml").write_text(
        '<testsuites><testsuite tests="3" time="9.5">'
        '<testcase classname="tests.test_a" name="test_x[p]@test_a" time="7.0"/>'
        '<testcase classname="tests.test_a" name="test_y[u@h]" time="2.0"/>'
        '<testcase classname="tests.test_b" name="test_z@test_b" time="0.5"/>'
        '</testsuite></testsuites>')
    # the serial run: two tiers in one file, each test carrying its tier
    (tmp_path / "junit-serial.xml").write_text(
        '<testsuites><testsuite tests="2" time="4.2">'
        '<testcase classname="tests.test_c" name="test_i" time="1.0"><properties>'
        '<property name="tier" value="integration"/></properties></testcase>'
        '<testcase classname="tests.test_c" name="test_e" time="3.0"><properties>'
        '<property name="tier" value="e2e"/></properties></testcase>'
        '</testsuite></testsuites>')
    assert slowest.main(["3", str(tmp_path / "junit-parallel.xml"),
                         str(tmp_path / "junit-serial.xml")]) == 0
    out = capsys.readouterr().out
    assert "parallel: 3 tests in 10 s" in out and "serial: 2 tests in 4 s" in out
    assert "tiers: e2e 1 (3 s of tests), integration 1 (1 s of tests), parallel 3 (10 s " \
        "of tests)" in out, out
    lines = out.splitlines()[-3:]
    assert lines[0].endswith("tests/test_a.py::test_x[p]"), lines
    assert lines[1].endswith("e2e         tests/test_c.py::test_e"), lines
    assert lines[2].endswith("tests/test_a.py::test_y[u@h]"), lines
