#!/usr/bin/env bash
# `make demo`: set up what the demo needs and nothing more (make demo-venv, make bins,
# hack/install-system-deps.sh demo), timing each part, then run the demo, which prints
# those parts beside its own steps: where the minutes went, from a fresh clone on.
#   MAKE, BIN: as the Makefile passes them. Arguments go to python -m swerollout_dev.demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
make="${MAKE:-make}"
bin="${BIN:-.venv/bin}"
workdir=.swerollout/demo
mkdir -p "$workdir"
times="$workdir/setup-times.tsv"
: >"$times"

timed() {
  local name="$1" start
  shift
  echo "==> $name" >&2
  start=$(date +%s%N)
  "$@"
  printf '%s\t%s\n' "$name" "$(( ($(date +%s%N) - start) / 1000000 ))" >>"$times"
}

timed "setup: venv (the demo's packages at requirements.lock's pins)" "$make" --no-print-directory demo-venv
timed "setup: kube binaries (built once from Go modules, cached)" "$make" --no-print-directory bins
timed "setup: apt (git, bubblewrap, iproute2, util-linux)" hack/install-system-deps.sh demo
exec "$bin/python" -m swerollout_dev.demo --setup-times "$times" "$@"
