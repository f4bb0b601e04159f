"""The host fingerprint: what makes two hosts' measurements comparable.

A fleet's workers share one study; trials measured on hosts with different fingerprints are
never compared with each other's baseline. The fingerprint holds the CPU model and count,
the kernel release, the target's kind and version, and the placement (the server's and the
load's CPU lists, and the load host when the load runs elsewhere). The host name is not part
of it: identical machines share a fingerprint, which is what lets them share a baseline.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kvtune.host.facts import HostFacts

FIELDS = ("cpu_model", "cpus", "kernel", "target", "target_version", "server_cpus",
          "load_cpus", "load_host")


def fingerprint(facts: HostFacts, target_kind: str, target_version: tuple[int, ...] | None,
                server_cpus: str | None = None, load_cpus: str | None = None,
                load_host: str | None = None) -> dict[str, Any]:
    """The fingerprint of this host for a study's target and placement (JSON-able)."""
    return {
        "cpu_model": facts.cpu_model,
        "cpus": facts.cpus,
        "kernel": facts.kernel,
        "target": target_kind,
        "target_version": ".".join(str(v) for v in target_version) if target_version else None,
        "server_cpus": server_cpus,
        "load_cpus": load_cpus,
        "load_host": load_host,
    }


def key(fp: dict[str, Any]) -> str:
    """A short stable key of a fingerprint (equal fingerprints, equal keys)."""
    text = json.dumps({f: fp.get(f) for f in FIELDS}, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The fields in which two fingerprints differ, for people: 'kernel: 6.1 vs 6.18'."""
    return [f"{f}: {a.get(f)} vs {b.get(f)}" for f in FIELDS if a.get(f) != b.get(f)]
