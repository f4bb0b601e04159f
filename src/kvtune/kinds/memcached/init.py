"""What `kvtune init` needs of memcached: where Debian and RHEL keep its configuration, the
configuration of a running server read back from its command line (memcached has no config
file of its own: the packaged wrapper turns /etc/memcached.conf into argv), and the knobs a
first study searches."""

from __future__ import annotations

import re


class Init:
    """kvtune init's part of the memcached kind (kinds/base.py, Kind.init)."""

    # Debian's file (the wrapper start-memcached reads it), RHEL's sysconfig file.
    config_paths = ("/etc/memcached.conf", "/etc/sysconfig/memcached")

    def recognizes(self, text: str) -> bool:
        """Whether `text` reads as a memcached configuration: every line an option, Debian's
        `logfile`, a comment, or (RHEL) a shell variable."""
        seen = False
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            seen = True
            if not (line.startswith("-") or line.split()[0] == "logfile"
                    or re.match(r"^[A-Z_]+=", line)):
                return False
        return seen

    def config_path_in_argv(self, argv: list[str]) -> str | None:
        """memcached's argv names no configuration file."""
        return None

    def argv_config(self, argv: list[str]) -> str:
        """The server's options (argv after the program) as Debian's memcached.conf, one
        option and its value a line, so the file reader judges each as it judges the
        operator's own file."""
        lines: list[list[str]] = []
        for word in argv[1:]:
            if word.startswith("-") or not lines:
                lines.append([word])
            else:
                lines[-1].append(word)
        return "".join(" ".join(words) + "\n" for words in lines)

    def live_config_path(self, host: str, port: int) -> str | None:
        """memcached cannot say which file its options came from."""
        return None

    def knobs(self, settings: dict[str, str], server_cpus: int) -> list[str]:
        """The `knobs:` entries of a first study (YAML lines with their comments): worker
        threads up to twice the server's CPUs (the operator's -t always inside the range),
        requests per event, the LRU maintainer."""
        try:
            threads = int(settings.get("-t", "4"))
        except ValueError:
            threads = 4
        top = min(16, max(4, 2 * server_cpus, threads))
        return [
            f"- {{name: memcached.threads, range: [1, {top}]}}  # worker threads "
            f"(the server has {server_cpus} CPU(s) here)",
            "- memcached.reqs_per_event       # requests served per connection per event",
            "- memcached.lru_maintainer       # the background LRU thread",
        ]


INIT = Init()
