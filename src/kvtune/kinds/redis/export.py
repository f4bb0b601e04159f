"""A redis.conf include with the configuration that was measured: the target's fixed
arguments (`target.args`) and every changed Redis directive, grouped by whether they can be
applied live (CONFIG SET) or need a restart.

The rollback (under rollback/redis/) sets each directive back to the host's previous
value (`--from /etc/redis/redis.conf`) or to Redis's own built-in default, never to
kvtune's benchmark setting (`save ""`: kvtune measures without snapshots)."""

from __future__ import annotations

import shlex

from kvtune.export.base import Exporter, ExportFile, Recommendation, comment, rollback_path
from kvtune.knobs import catalog
from kvtune.knobs.appliers.base import HostContext

# Built-in defaults of Redis 7 where the catalog's default is kvtune's benchmark setting
# (tests/test_export.py checks the table against a redis-server started without a file).
SERVER_DEFAULTS = {"save": "3600 1 300 100 60 10000"}


def _conf_value(v: str) -> str:
    return v if v else '""'


def conf_lines(directive: str, value: str) -> list[str]:
    """The redis.conf lines that set `directive` to `value`. `save` lines add up in a
    config file (also across includes): `save ""` first clears the earlier ones."""
    if directive == "save" and value:
        return ['save ""', f"save {value}"]
    return [f"{directive} {_conf_value(value)}"]


def read_conf(text: str) -> dict[str, str]:
    """Directive → value of a redis.conf's text (the last one wins; `save` lines add up, as
    in Redis). Includes are not followed."""
    out: dict[str, str] = {}
    for ln in text.splitlines():
        s = ln.strip()
        if not s or s.startswith("#"):
            continue
        try:
            words = shlex.split(s)
        except ValueError:
            continue
        key, val = words[0].lower(), " ".join(words[1:])
        if key == "save" and val and out.get("save"):
            out["save"] += " " + val
        else:
            out[key] = val
    return out


def server_default(directive: str, ctx: HostContext, kind: str = "redis",
                   defaults: dict[str, str] = SERVER_DEFAULTS) -> str | None:
    """The server's built-in value of `directive` (the catalog's defaults of `kind` are the
    server's own, except where `defaults` says), or None when kvtune does not know it."""
    if directive in defaults:
        return defaults[directive]
    for k in catalog.CATALOG.values():
        if k.target != kind or k.default is None:
            continue
        e = k.applier.export_entry(k.default, ctx)
        if e is not None and e.family == kind and e.key == directive:
            return e.value
    return None


def arg_directives(args: list[str]) -> list[tuple[str, str]]:
    """redis-server's `--name value ...` words as (directive, value)."""
    out: list[tuple[str, str]] = []
    for a in args:
        if a.startswith("--"):
            out.append((a[2:], ""))
        elif out:
            d, v = out[-1]
            out[-1] = (d, f"{v} {a}".strip())
    return out


class RedisExporter(Exporter):
    """A config include for redis-server; a kind whose server reads redis.conf's directives
    (Valkey) subclasses it with its own names."""

    name = "redis"  # the format, the kind and the export family
    label = "Redis"
    server = "redis-server"
    conf = "redis.conf"
    etc = "/etc/redis"
    defaults = SERVER_DEFAULTS
    help = "a redis.conf include (rollback: the previous values or Redis's defaults)"

    def files(self, rec: Recommendation) -> list[ExportFile]:
        kind, label, server, conf, etc = self.name, self.label, self.server, self.conf, \
            self.etc
        if rec.target not in (None, kind):
            return []
        rows: list[tuple[str, str, bool]] = []  # directive, value, live
        notes = []
        for row in rec.entries("app"):
            if row.entry is None or row.entry.family != kind:
                continue
            gate = row.knob.applier.check(rec.ctx)
            if not gate.ok:
                notes.append(f"left out {row.knob.name}: {gate.reason}")
                continue
            rows.append((row.entry.key, row.entry.value, row.entry.live))
        set_ = {d for d, _, _ in rows}
        fixed = [(d, v, False) for d, v in arg_directives(rec.target_args) if d not in set_] \
            if rec.target == kind else []
        theirs = read_conf(rec.previous_text) if rec.previous_text is not None else None
        if theirs is not None:
            # Production keeps its own settings: the study's scaffolding (target.args) is
            # not written over the operator's config file; what it kept is said.
            for d, v, _ in fixed:
                if d in theirs and theirs[d] != v:
                    notes.append(f"kept from {rec.previous}: {d} {theirs[d]} (the study "
                                 f"measured with {d} {v}, a test setting)")
                elif d not in theirs:
                    notes.append(f"not written: {d} {v} (a test setting of the study; "
                                 f"{rec.previous} does not set it)")
            fixed = []
        if not rows and not fixed:
            return []
        if rec.target == kind:
            notes.append(f'measured with persistence off (kvtune starts {server} with save '
                         f'"" and appendonly no); persistence is left to your {conf}')
        if rec.target_cpus:
            notes.append(f"measured pinned to CPUs {rec.target_cpus}: install the systemd "
                         "drop-in too (CPUAffinity)")
        base = f"kvtune-{rec.study}.conf"
        name = f"{kind}/{base}"
        text = comment(rec.header(
            f"{conf} include for {rec.study}",
            f"Install: copy to {etc}/ and add `include {etc}/{base}` at the END of "
            f"{conf} (the last value wins), then restart {server}.", *notes))
        for title, group in (("fixed server arguments of the study (target.args)", fixed),
                             ("live: also applicable with CONFIG SET, no restart",
                              [r for r in rows if r[2]]),
                             ("needs a restart", [r for r in rows if not r[2]])):
            if group:
                text += f"\n# {title}\n" + "".join(f"{ln}\n" for d, v, _ in group
                                                  for ln in conf_lines(d, v))
        if rec.previous_text is not None:
            back = rollback_path(f"{kind}/{conf}")
            restores = f"the host's previous {rec.previous} (byte for byte)"
            return [ExportFile(name, text, back, rec.previous_text,
                               f"include {base} at the end of {conf} and restart {kind} "
                               f"(or CONFIG SET the live ones); roll back: install {back} "
                               f"as {rec.previous} ({restores}) and restart")]
        back_lines: list[str] = []
        unknown: list[str] = []
        for d, _, _ in fixed + rows:
            default = server_default(d, rec.ctx, kind, self.defaults)
            if default is None:
                unknown.append(d)
            else:
                back_lines += conf_lines(d, default)
        restores = f"{label}'s built-in defaults (no --from file was given)"
        rb = comment(rec.rollback_header(
            f"{etc}/{base}", restores,
            f"Use: replace `include {etc}/{base}` with this file and restart, or CONFIG "
            "SET its live values; removing the include line and restarting also works.",
            *([f"not here (default unknown; restart without the include): "
               f"{', '.join(unknown)}"] if unknown else []))) + "".join(
            f"{ln}\n" for ln in back_lines)
        back = rollback_path(name)
        return [ExportFile(name, text, back, rb,
                           f"include {base} at the end of {conf} and restart {kind} (or "
                           f"CONFIG SET the live ones); roll back: {back} ({restores})")]
