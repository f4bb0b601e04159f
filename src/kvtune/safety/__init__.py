"""A study file is untrusted input to a root process (DESIGN.md, safety rule 6).

Everything a study file can make kvtune start, read or write is checked here, before
anything runs, with the key path and line:

- `yamlload`: the file itself: a regular file, at most 1 MiB of UTF-8, YAML with bounded
  nodes, aliases, nesting and parse time;
- `values`: values for the structure they land in (argv words, memcached `-o` lists, Redis
  config lines, sysctl/sysfs files), finite numbers, CPU lists, catalog bounds;
- `args`: `target.args` and `load.extra_args` against the allow-lists the targets and the
  load driver declare;
- `hostpaths`: inline sysctl/sysfs paths (resolved, under /proc/sys or /sys, not on the
  deny-list); `inline`: `--allow-inline-host-knobs`;
- `binary`: `target.binary` is the target's server, by its version banner;
- `storage`: where the results database may be created, its driver, masked credentials;
- `workload`: `load.workload_file` is a small, regular, well-formed kvload workload file,
  every size within kvload's bounds.

And what kvtune itself does as root (issue 29, docs/security.md):

- `programs`: the one way to run a program — the file, every link and every directory up
  to `/` judged before each start;
- `files`: inputs read with a bound through one descriptor (regular, outside /proc, /sys,
  /dev) and noted; outputs written atomically, without following a link, never over an
  input;
- `text`: text from outside stripped of escape sequences and escaped for rich.
"""
