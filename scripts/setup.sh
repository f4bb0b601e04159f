#!/usr/bin/env bash
# Installs what kvtune needs on a Debian machine, and only what is missing; quiet when
# nothing is. Run as root (apt-get). Used by `make setup`, `make demo` and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
# tuned and systemd (systemd-analyze): the export tests check the TuneD profile with TuneD's
# loader and plugins and the drop-ins with `systemd-analyze verify`; neither needs a running
# systemd or TuneD daemon (both install without one).
for pkg in memcached redis-server redis-tools libmemcached-tools linux-perf util-linux procps \
           iproute2 chromium tuned systemd; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$pkg")
done
# postgresql: the fleet tests start a throw-away PostgreSQL (initdb, pg_ctl) on loopback, and
# a fleet's shared storage (docs/fleet.md).
# openssh-server, openssh-client: the remote-load tests run kvload on a "load host" (a network
# namespace with its own sshd) over ssh (docs/fleet.md); iproute2 (above) makes the namespace.
for pkg in postgresql openssh-server openssh-client; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$pkg")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

# valkey-server 8 (the valkey kind, docs/case-studies.md) is in bookworm-backports only: add
# that suite (its packages are never preferred over bookworm's: backports pin at 100) and
# install valkey-server from it.
if ! dpkg-query -W -f='${Status}' valkey-server 2>/dev/null | grep -q "install ok installed"; then
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "setup: adding the Debian suite bookworm-backports (valkey-server 8)"
    cat > /etc/apt/sources.list.d/kvtune-bookworm-backports.sources <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  echo "setup: installing valkey-server from bookworm-backports"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -t bookworm-backports valkey-server >/dev/null
fi

# Debian starts memcached and redis-server as services when it can; kvtune starts its own
# servers, so a packaged service must not hold the default ports. There is no systemd here,
# so stop whatever the package scripts may have started.
for svc in memcached redis-server valkey-server; do
  if [ -x "/etc/init.d/$svc" ] && { pgrep -x "$svc" || pgrep -x "${svc%-server}"; } >/dev/null 2>&1; then
    "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
  fi
done

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "setup: installing Rust from Debian's packages (cargo)"
    apt-get install -y -qq cargo >/dev/null
  fi
fi

stamp=.venv/.kvtune-installed
cargo_pid=
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ kvload/pyproject.toml -nt "$stamp" ]; then
  # kvload's release build (a minute of compiling on 2 CPUs) starts now, beside the virtual
  # environment's creation and pip's downloads; maturin's build below then finds it done
  # (and says any error itself).
  cargo build --release --quiet --manifest-path kvload/Cargo.toml >/dev/null 2>&1 &
  cargo_pid=$!
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating the Python virtual environment .venv"
  if ! "$PY" -m venv .venv 2>/dev/null; then
    apt-get install -y -qq python3-venv >/dev/null
    "$PY" -m venv .venv
  fi
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ kvload/pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing kvtune and its dependencies into .venv"
  log=$(mktemp)
  # The installs go through uv (from PyPI, into .venv; `uv pip` is pip's interface): it
  # resolves, downloads and unpacks in parallel, where pip took 14 s of one CPU beside
  # cargo's build. uv reads neither pip's configuration nor its certificate setting: it is
  # given the system's certificates (where pip is told to find them, PIP_CERT, and where a
  # TLS-inspecting proxy's authority is) and pip's index and find-links settings from the
  # environment; should it fail all the same, pip installs instead, said. .venv keeps its
  # own pip, and `make test-install` installs the wheels with pip, as people do.
  # kvtune depends on the kvload package (kvload/pyproject.toml: the binary in a platform
  # wheel, built here with maturin); the checkout's own cargo build is what runs from the
  # checkout (kvtune.load.kvload.find_kvload), the wheel satisfies the dependency.
  # Nothing is compiled at install (uv's default, pip's --no-compile): the thousands of
  # modules of the dependencies kvtune never imports (most of plotly's) are not; what the
  # tests import is compiled once, when first run. kvtune's dependencies but kvload first,
  # while cargo builds kvload (the index would be asked for kvload otherwise); the editable
  # install then finds them.
  export UV_NATIVE_TLS=1
  if [ -n "${PIP_INDEX_URL:-}" ]; then export UV_DEFAULT_INDEX=${UV_DEFAULT_INDEX:-$PIP_INDEX_URL}; fi
  if [ -n "${PIP_EXTRA_INDEX_URL:-}" ]; then export UV_INDEX=${UV_INDEX:-$PIP_EXTRA_INDEX_URL}; fi
  if [ -n "${PIP_FIND_LINKS:-}" ] && [ -d "$PIP_FIND_LINKS" ]; then
    export UV_FIND_LINKS=${UV_FIND_LINKS:-$PIP_FIND_LINKS}
  fi
  use_uv=yes
  exec 3>&2
  # pyinstall [--again] ARGS: uv, else pip (--again: over an installed version, without deps)
  pyinstall() {
    local again=()
    if [ "$1" = --again ]; then shift; again=(--no-deps); fi
    if [ -n "$use_uv" ]; then
      local err
      if err=$(.venv/bin/uv pip install --python .venv/bin/python -q \
                 ${again:+--reinstall} "${again[@]}" "$@" 2>&1); then
        return 0
      fi
      echo "setup: uv could not install (${err##*$'\n'}): pip installs instead" >&3
      use_uv=
    fi
    .venv/bin/pip install -q --disable-pip-version-check --no-compile \
      ${again:+--force-reinstall} "${again[@]}" "$@"
  }
  reqs=$(mktemp)
  if ! { { .venv/bin/pip install -q --disable-pip-version-check 'uv>=0.5,<1' ||
           { echo "setup: uv could not be installed: pip installs instead" >&3; use_uv=; }; } &&
         .venv/bin/python -c '
import tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extra = p["optional-dependencies"]
for r in p["dependencies"] + extra["dev"] + extra["dashboard"] + extra["postgres"]:
    if not r.lower().startswith("kvload"):
        print(r)' >"$reqs" &&
         pyinstall -r "$reqs" &&
         { [ -z "$cargo_pid" ] || wait "$cargo_pid" || true; } &&
         rm -rf build/kvload-wheel &&
         .venv/bin/maturin build --release -m kvload/Cargo.toml --out build/kvload-wheel &&
         pyinstall --again build/kvload-wheel/kvload-*.whl &&
         pyinstall -e '.[dev,dashboard,postgres]'
       } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log" "$reqs"
    exit 1
  fi
  rm -f "$log" "$reqs"
  touch "$stamp"
fi

# The driver of postgresql:// storage URLs (the extra kvtune[postgres], psycopg 3): a fleet's
# shared storage and the fleet tests need it (installed above with the rest; here for an
# environment made before it was).
if ! .venv/bin/python -c 'import psycopg' >/dev/null 2>&1; then
  echo "setup: installing the PostgreSQL driver (kvtune[postgres]: psycopg)"
  .venv/bin/pip install -q --disable-pip-version-check 'psycopg[binary]>=3.1,<4' >/dev/null
fi
