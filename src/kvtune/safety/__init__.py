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
- `workload`: `load.workload_file` is a small, regular, well-formed kvload workload file.
"""
