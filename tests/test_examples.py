"""Every example study file parses, resolves its knobs, and passes preflight on this host
(which applies nothing), and its baseline is what the server and the host really have by
default: the server started with the baseline's arguments reports the same settings as the
server started with none of them, and each host knob's baseline is what its file reads."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from kvtune.kinds.memcached.target import MemcachedTarget
from kvtune.kinds.redis.target import RedisTarget, resp_command
from kvtune.knobs.appliers.base import Launch
from kvtune.measure.session import Session
from kvtune.study.loader import load_study as load
from kvtune.targets.base import ServerTarget

# Parallel (kvload_bin puts it in the integration tier): preflight applies nothing, and the
# servers are started only to read their settings (on a free port): nothing measured.
pytestmark = pytest.mark.parallel

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))
# The synthetic surface's defaults, as its module documents them.
SYNTHETIC_DEFAULTS = {"synthetic.x": 2.0, "synthetic.threads": 4, "synthetic.mode": "a",
                      "synthetic.flag": False}


def _redis_config(t: RedisTarget) -> dict[str, str]:
    """CONFIG GET * (an array of bulk strings: name, value, ...)."""
    with socket.create_connection((t.host, t.port), timeout=5) as s, s.makefile("rb") as f:
        s.sendall(resp_command("CONFIG", "GET", "*"))
        n = int(f.readline()[1:])
        words = []
        for _ in range(n):
            size = int(f.readline()[1:])
            words.append(f.read(size + 2)[:-2].decode())
    return dict(zip(words[::2], words[1::2], strict=True))


def _settings(t: ServerTarget, launch: Launch) -> dict[str, Any]:
    """The running server's own view of its configuration."""
    server = t.start(launch)
    try:
        if isinstance(t, MemcachedTarget):
            settings = t.raw_stats("settings")
            # hashpower_init shows 0 when -o hashpower is not given; the table memcached
            # then builds is `stats`' hash_power_level (16).
            settings["hashpower_init"] = t.raw_stats()["hash_power_level"]
            return settings
        assert isinstance(t, RedisTarget)
        return _redis_config(t)
    finally:
        t.stop(server)


def _host_file_value(path: str) -> str:
    """A host file's value as the kernel shows it: THP's bracketed choice, else the text."""
    text = Path(path).read_text().strip()
    if "[" in text:
        return text[text.index("[") + 1:text.index("]")]
    return text


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_valid_here_and_its_baseline_is_the_default(
        path: Path, kvload_bin: str) -> None:
    loaded = load(path)
    assert loaded.knobs, "an example tunes something"
    session = Session(loaded.spec, loaded.knobs, None)
    space = session.preflight()
    assert [k.name for k in space.knobs] == [k.name for k in loaded.knobs]
    if loaded.spec.target.kind == "synthetic":
        assert dict(space.baseline) == {k: v for k, v in SYNTHETIC_DEFAULTS.items()
                                        if k in space.baseline}
        return
    target = session.target
    assert isinstance(target, ServerTarget)
    app = {k.name for k in space.knobs if k.scope == "app"}
    assert app, "the examples tune the server"
    baseline_launch = session.launch_for(space.baseline_config())
    assert baseline_launch.flags or baseline_launch.options, \
        "the baseline is passed to the server explicitly"
    # The baseline's arguments change nothing: they are the server's built-in defaults.
    with_baseline = _settings(target, baseline_launch)
    plain = _settings(target, Launch())
    assert with_baseline == plain
    for k in space.knobs:
        if k.scope == "host":
            assert k.applier.format(space.baseline[k.name]) == _host_file_value(
                k.applier.where()), k.name
