"""The installed way (issue 23): one version for the repository, and where kvtune finds
kvload. `make test-install` (scripts/test_install.sh, run by `make test`) installs the
wheels into a fresh virtual environment and uses them from another directory."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

import kvtune
from kvtune.errors import HarnessError
from kvtune.load import kvload as kl

REPO = Path(__file__).resolve().parents[1]


def test_one_version_for_kvtune_kvload_and_the_dependency() -> None:
    py = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    cargo = tomllib.loads((REPO / "kvload" / "Cargo.toml").read_text())["package"]
    assert py["version"] == cargo["version"] == kvtune.__version__
    assert f"kvload=={cargo['version']}" in py["dependencies"]
    kv = tomllib.loads((REPO / "kvload" / "pyproject.toml").read_text())
    assert kv["tool"]["maturin"]["bindings"] == "bin" and "version" in kv["project"]["dynamic"]


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho kvload 0.1.0\n")
    path.chmod(0o755)
    return path


def test_kvload_is_found_in_the_documented_order(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    env, checkout, beside, on_path = (_exe(tmp_path / d / "kvload") for d in
                                      ("env", "checkout/kvload/target/release", "venv/bin",
                                       "path"))
    (tmp_path / "checkout" / "kvload" / "Cargo.toml").write_text("")
    monkeypatch.setattr(kl, "CHECKOUT", tmp_path / "checkout")
    monkeypatch.setattr(kl.sysconfig, "get_path", lambda name: str(beside.parent))
    monkeypatch.setattr(kl.sys, "executable", str(beside.parent / "python"))
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("KVLOAD", str(env))
    assert kl.find_kvload() == str(env)
    monkeypatch.delenv("KVLOAD")
    assert kl.find_kvload() == str(checkout)
    monkeypatch.setattr(kl, "CHECKOUT", None)  # an installed kvtune: no checkout
    assert kl.find_kvload() == str(beside)
    beside.unlink()
    assert kl.find_kvload() == str(on_path)
    on_path.unlink()
    with pytest.raises(HarnessError) as e:
        kl.find_kvload()
    text = str(e.value)
    for place in ("$KVLOAD", "installed beside kvtune", "PATH", "make dist", "make kvload"):
        assert place in text, text
    monkeypatch.setenv("KVLOAD", str(tmp_path / "nothing"))
    with pytest.raises(HarnessError, match=r"KVLOAD=.* is not an executable kvload binary"):
        kl.find_kvload()


def test_this_checkout_is_recognised() -> None:
    assert kl.CHECKOUT == REPO
    assert re.fullmatch(r"\d+\.\d+\.\d+", kvtune.__version__)
    assert os.access(REPO / "scripts" / "test_install.sh", os.X_OK)
