"""Reading a study file with resource limits: a YAML bomb, a huge or deeply nested file, a
FIFO or a device fails fast with one message (exit 2), never a hang or a traceback."""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from kvtune.errors import UserError

CParser: Any
try:  # libyaml's parser when present (several times faster), else PyYAML's own
    CParser = importlib.import_module("yaml._yaml").CParser
except ImportError:  # pragma: no cover - Debian's python3-yaml and the wheels have it
    CParser = None

MAX_BYTES = 1 << 20  # a study file is a few KB
MAX_NODES = 20_000  # nodes as written
MAX_EXPANDED = 20_000  # nodes once every alias is expanded (a "billion laughs" bomb)
MAX_ALIASES = 200
MAX_DEPTH = 40
MAX_SECONDS = 2.0  # of this thread's CPU time: a busy host never trips it, a pathological file does


class LimitExceeded(yaml.YAMLError):
    """The document exceeds a resource limit (reported like a YAML error, with its line)."""

    def __init__(self, problem: str, mark: Any | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class _BoundedComposer(Composer):
    """PyYAML's composer, counting nodes, aliases and depth as it goes."""

    def _limits_init(self) -> None:
        self._nodes = 0
        self._aliases = 0
        self._depth = 0
        self._deadline = time.thread_time() + MAX_SECONDS

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._nodes += 1
        mark = self.peek_event().start_mark  # type: ignore[attr-defined]
        if self._nodes > MAX_NODES:
            raise LimitExceeded(f"more than {MAX_NODES} YAML nodes; a study file is small",
                                mark)
        if self.check_event(yaml.AliasEvent):  # type: ignore[attr-defined]
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise LimitExceeded(f"more than {MAX_ALIASES} YAML aliases", mark)
        if self._nodes % 256 == 0 and time.thread_time() > self._deadline:
            raise LimitExceeded(f"parsing took more than {MAX_SECONDS:g}s of CPU time", mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise LimitExceeded(f"nested more than {MAX_DEPTH} levels deep", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _PyLoader(_BoundedComposer, yaml.reader.Reader, yaml.scanner.Scanner,
                yaml.parser.Parser, SafeConstructor, Resolver):
    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._limits_init()


if CParser is not None:

    class _CLoader(_BoundedComposer, CParser, SafeConstructor, Resolver):
        """libyaml's parser events, composed in Python so that the limits apply."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self.anchors: dict[str, Any] = {}
            self._limits_init()

    BoundedLoader: type = _CLoader
else:  # pragma: no cover
    BoundedLoader = _PyLoader


def _expanded_size(root: yaml.Node) -> None:
    """Nodes once aliases are expanded; refuses recursive aliases and bombs."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise LimitExceeded("a YAML alias refers to its own ancestor (a recursive "
                                "structure)", node.start_mark)
        active.add(key)
        n = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                n += size(child)
                if n > MAX_EXPANDED:
                    break
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                n += size(k) + size(v)
                if n > MAX_EXPANDED:
                    break
        active.discard(key)
        if n > MAX_EXPANDED:
            raise LimitExceeded(f"aliases expand to more than {MAX_EXPANDED} YAML nodes "
                                "(a YAML bomb?)", node.start_mark)
        sizes[key] = n
        return n

    size(root)


def compose(text: str) -> yaml.Node | None:
    """The document's node tree, within the limits (raises yaml.YAMLError)."""
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    if node is not None:
        _expanded_size(node)
    return node


def load(text: str) -> Any:
    """Plain data from the document, within the limits (raises yaml.YAMLError)."""
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_study_file(path: str | Path) -> str:
    """The text of a study file: a regular file of at most MAX_BYTES of UTF-8, judged
    before it is opened (`kvtune.safety.files.open_input`)."""
    from kvtune.safety.files import ReadRefused, note_input, open_input

    p = Path(path)
    try:
        fd = open_input(p, "study file")
    except ReadRefused as e:
        raise UserError(f"cannot read {e}") from None
    try:
        st = os.fstat(fd)
        if st.st_size > MAX_BYTES:
            raise UserError(f"{p}: {st.st_size} bytes; a study file may hold at most "
                            f"{MAX_BYTES // 1024} KiB")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_BYTES + 1)
        note_input(fd)  # no write of this run may replace it
    except OSError as e:
        raise UserError(f"cannot read study file {p}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise UserError(f"{p}: a study file may hold at most {MAX_BYTES // 1024} KiB")
    return decode(data, str(p))


def decode(data: bytes, name: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise UserError(f"{name}, line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} "
                        f"at offset {e.start}); a study file is YAML text") from None
    if "\x00" in text:
        line = text[:text.index("\x00")].count("\n") + 1
        raise UserError(f"{name}, line {line}: a NUL byte; a study file is YAML text")
    return text
