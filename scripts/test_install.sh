#!/usr/bin/env bash
# `make test-install`: install dist/*.whl into a fresh virtual environment outside the
# checkout and use kvtune from another directory, the checkout's own kvload build out of
# reach (no KVLOAD, no checkout on PATH or PYTHONPATH). Fails on any packaging break.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
PY=${PYTHON:-python3}
work=$(mktemp -d /tmp/kvtune-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
# The fresh environment gets its packages from the checkout's pip (`pip --python`), the
# install people do with pip, without setting up a pip of its own in it (ensurepip), and
# without compiling every installed module up front (--no-compile: Python compiles what
# kvtune imports when it first runs); on this 2-CPU class that is 50 s -> 18 s.
"$PY" -m venv --without-pip "$work/venv"
"$repo/.venv/bin/pip" --python "$work/venv/bin/python" install -q --no-compile \
  --disable-pip-version-check "$repo"/dist/kvload-*.whl "$repo"/dist/kvtune-*.whl
mkdir "$work/elsewhere"
cd "$work/elsewhere"
run() { env -u KVLOAD -u PYTHONPATH PATH="$work/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin" "$@"; }
want=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml" | head -1)
out=$(run kvtune --version); echo "  $out"; [[ "$out" == *"kvtune $want"* ]]
out=$(run kvload --version); echo "  $out"; [[ "$out" == "kvload $want" ]]
# The installed kvtune finds the installed kvload (never the checkout's build).
found=$(run "$work/venv/bin/python" -c 'from kvtune.load.kvload import find_kvload; print(find_kvload())')
[[ "$found" == "$work/venv/bin/kvload" ]] || { echo "kvload found at $found"; exit 1; }
run kvtune check "$repo/examples/memcached.yaml" > check.txt || { cat check.txt; exit 1; }
grep -q "runnable" check.txt
cat > syn.yaml <<'YAML'
study: installed
target: {kind: synthetic, noise_cov: 0.02}
knobs: [synthetic.x, synthetic.mode]
budget: {trials: 5}
repetitions: 2
evaluation: {noise_floor_runs: 3, confirm_top: 1, confirm_rounds: 4, ablation: false}
YAML
rc=0; run kvtune tune syn.yaml > tune.txt 2>&1 || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || { cat tune.txt; exit 1; }
[ -f results/installed.db ]  # results where it ran, nothing in the installed package
if find "$work/venv/lib" -name '*.db' | grep -q .; then echo "a result inside the venv"; exit 1; fi
echo "test-install: ok ($(( $(date +%s) - t0 )) s: wheels installed into a fresh venv, kvtune and kvload $want from another directory)"
