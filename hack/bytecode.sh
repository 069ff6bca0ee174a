#!/usr/bin/env bash
# hack/bytecode.sh [PYTHON]: write the .pyc files every Python process of the tests reads,
# before anything imports (`make test` and `make test-unit` both start with it).
#
# Where PYTHONDONTWRITEBYTECODE is set (some CI images and sandboxes export it) no .pyc is
# ever written, so every Python process of the suite (each pytest, `swerollout` CLI call,
# runner, policy server, operator, trainer example) compiled all it imported from source,
# every time: 13 CPU-s of the rest's collection alone, test_client_cli.py took 84 s
# instead of 23 s, and in `make test-unit`, which had no such step, test_install_roles
# and test_torchless_processes (fresh interpreters that import the library) took 72 s
# each, against 9.5 s and 4.6 s in `make test`'s rest part. Python reads .pyc files
# whatever that variable says, so write them here: for the sources always (0.1 s when
# current), for site-packages when something was installed since the last time (about a
# CPU-minute once, 0.2 s to check). compileall's status is ignored: a few files in
# site-packages are Python 3.12 syntax that nothing imports on 3.11, and a user who
# cannot write the venv or the checkout (a shared one) reads what its owner compiled.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${1:-${PY:-.venv/bin/python}}
"$PY" -m compileall -q -j 0 swerollout agent_runner operator dev tests bench >/dev/null 2>&1 || true
read -r site prefix < <("$PY" -c 'import sys, sysconfig; print(sysconfig.get_path("purelib"), sys.prefix)')
compiled="$prefix/.bytecode-compiled"
# Every install or upgrade writes a fresh NAME.dist-info directory; running Python never does.
if [ ! -e "$compiled" ] || [ -n "$(find "$site" -maxdepth 1 -name '*.dist-info' -newer "$compiled" -print -quit)" ]; then
    echo "compiling site-packages to bytecode (once per install)"
    "$PY" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
    touch "$compiled" 2>/dev/null || true
fi
exit 0
