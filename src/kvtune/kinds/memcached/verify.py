"""What `kvtune verify` reads from a running memcached's command line: its flags, its `-o`
options, the user it drops to (-u), and the study's fixed arguments (target.args)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvtune.kinds.memcached.export import arg_lines
from kvtune.verify import Check

if TYPE_CHECKING:
    from kvtune.export.base import Recommendation


def _flag_value(argv: list[str], flag: str) -> str | None:
    """The value memcached's argv gives `flag` ("-t 4", "-t4", "--threads=4"); "" for a
    bare flag that is present; None when absent. The last occurrence wins, as in getopt."""
    found = None
    for i, a in enumerate(argv):
        if a == flag:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            found = "" if nxt.startswith("-") else nxt
        elif flag.startswith("--") and a.startswith(flag + "="):
            found = a.split("=", 1)[1]
        elif not flag.startswith("--") and len(flag) == 2 and a.startswith(flag) \
                and len(a) > 2:
            found = a[2:]
    return found


def _options(argv: list[str]) -> dict[str, str]:
    """memcached's `-o a=b,c` options (every -o, later ones win)."""
    out: dict[str, str] = {}
    for i, a in enumerate(argv):
        text = None
        if a in ("-o", "--extended") and i + 1 < len(argv):
            text = argv[i + 1]
        elif a.startswith("--extended="):
            text = a.split("=", 1)[1]
        if text:
            for item in text.split(","):
                k, _, v = item.partition("=")
                out[k.strip()] = v.strip()
    return out


def argv_user(argv: list[str]) -> str | None:
    """The user memcached drops to (-u USER), or None."""
    return _flag_value(argv, "-u") or None


def argv_checks(rec: Recommendation, argv: list[str]) -> list[Check]:
    """The study's fixed arguments (said, never failed) and the recommended flags and
    options, on the running server's command line."""
    opts = _options(argv)
    out: list[Check] = []
    # The fixed arguments it was measured with (-m 256, ...)

    # The study's fixed arguments are its test settings, not the recommendation:
    # `export --from` keeps the operator's own values for them, so a difference is said
    # and never fails the verification.
    def scaffold(what: str, want: str, got: str | None) -> Check:
        shown = "(absent)" if got is None else (got or "(set)")
        same = (got or "(set)") == want if got is not None else False
        return Check(what, want, shown, True,
                     "" if same else f"a test setting of the study, not part of the "
                                     f"recommendation: the server runs with {shown}")

    for ln in arg_lines(rec.target_args):
        flag, _, value = ln.partition(" ")
        if flag in ("-o", "--extended"):
            for item in value.split(","):
                k, _, v = item.partition("=")
                out.append(scaffold(f"memcached -o {k} (target.args)", v or "(set)",
                                    opts.get(k)))
            continue
        out.append(scaffold(f"memcached {flag} (target.args)", value or "(set)",
                            _flag_value(argv, flag)))
    for row in rec.entries("app"):
        e = row.entry
        if e is None:
            continue
        if e.family == "memcached-flag":
            found = _flag_value(argv, e.key)
            out.append(Check(f"{rec.target} {e.key}", e.value or "(set)",
                             "(absent)" if found is None else (found or "(set)"),
                             found == e.value if e.value else found is not None))
        elif e.family == "memcached-option":
            got = opts.get(e.key)
            out.append(Check(f"{rec.target} -o {e.key}", e.value or "(set)",
                             "(absent)" if got is None else (got or "(set)"),
                             got is not None and got == e.value))
    return out
