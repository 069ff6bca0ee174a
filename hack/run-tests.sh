#!/usr/bin/env bash
# `make test`: the whole suite as four pytest processes at once, each with its own log.
#
#   cluster          tests/cluster: `cluster up` (our image, task images, a real kubelet),
#                    then rollouts on it; mostly waiting on containers; and, also root-only,
#                    tests/e2e/test_kueue.py (Kueue's controller beside a dev stack) and
#                    tests/dev/nodeagent/test_memlimit.py (a memory cgroup per container)
#   e2e              tests/e2e: one `dev up` stack per file and rollouts on it; mostly
#                    waiting on rollouts
#   runner-operator  tests/agent_runner, tests/operator, tests/bench (the scale tests on
#                    KWOK nodes) and tests/e2e/test_readme_by_hand.py (a stack of its own)
#   rest             everything else, in the foreground
#
# Run one after another they take the sum; side by side the longest, because much of
# their time is spent waiting, not computing. Balance them by the JUnit files below
# (hack/test-durations.py): at 2c7ebdf the rest summed 1368 s (23.4 min wall, the whole
# run), e2e 1169, cluster 1053 and runner-operator 768, so tests/bench (281 s, of it
# test_scale_kill 246) and the README's by-hand block (55 s, its own stack: it moves whole)
# went to runner-operator, for about 1090, 1100, 1115 and 1055 s. The trainers stay in the
# rest, which shares their dev stack and heavy imports. They cannot fight: the real node
# uses 10.244-245.x.x and 10.96.x.x and holds a machine lock, the dev stack and the node
# agent use free loopback ports and 127.x.y.z pod addresses, and each process has its own
# control plane and temporary directories.
#
# The real node needs root (a kubelet, containerd, network namespaces and iptables rules on
# this machine): another user runs the other three and says in one line that tests/cluster
# was left out. CI runs as root, so it runs all four.
#
# Arguments go to every process (options only: -x, -k, --lf ...). SWEROLLOUT_TEST_LOGS
# names the log directory (default .swerollout/test-logs). Each part also writes
# NAME.xml there (JUnit): every test's duration, setup and teardown included, where the
# console shows only the ten slowest; hack/test-durations.py sums them per part and file.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LOGS=${SWEROLLOUT_TEST_LOGS:-.swerollout/test-logs}
mkdir -p "$LOGS"

begin=$SECONDS
# Bytecode, before anything imports (PYTHONDONTWRITEBYTECODE: see the script).
hack/bytecode.sh "$PY"

parts=(rest runner-operator e2e)
if [ "$(id -u)" = 0 ]; then
    parts+=(cluster)
else
    echo "tests/cluster, tests/e2e/test_kueue.py and tests/dev/nodeagent/test_memlimit.py left out: the real node (kubelet, containerd, network namespaces, iptables), Kueue (a private mount namespace) and the node agent's memory cgroups need root; run make test as root for them (CI does)"
fi

declare -A pids
# A script's background jobs start with SIGINT ignored, and a Python started so never
# turns Ctrl-C into KeyboardInterrupt: restore the default first, so an interrupted run
# still runs each fixture's teardown (`cluster down`, `dev down`).
INTERRUPTIBLE='import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])'
start() {   # start NAME ARGS...: one pytest process in the background, its output in $LOGS/NAME.log
    local name=$1; shift
    "$PY" -c "$INTERRUPTIBLE" -m pytest -p no:cacheprovider --durations=10 --junitxml="$LOGS/$name.xml" "$@" \
        >"$LOGS/$name.log" 2>&1 &
    pids[$name]=$!
}

# Ctrl-C reached every process of the group already (a second SIGINT would cut their
# teardown short): only wait. SIGTERM (a cancelled CI job) is passed on as SIGINT.
trap 'wait; exit 130' INT
trap 'for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null; done; wait; exit 143' TERM

if [[ " ${parts[*]} " == *" cluster "* ]]; then
    # The session fixture builds the images and brings the node up: minutes cold, past the per-test timeout.
    # tests/e2e/test_kueue.py needs root as well (Kueue runs in a private mount namespace) and
    # a dev stack of its own: here it adds its minutes to the shortest part.
    start cluster -o timeout=3600 tests/cluster tests/e2e/test_kueue.py tests/dev/nodeagent/test_memlimit.py "$@"
fi
start e2e tests/e2e --ignore=tests/e2e/test_kueue.py --ignore=tests/e2e/test_readme_by_hand.py "$@"
start runner-operator tests/agent_runner tests/operator tests/bench tests/e2e/test_readme_by_hand.py "$@"
echo "${!pids[*]} run in the background; logs in $LOGS/<part>.log"
"$PY" -m pytest -p no:cacheprovider --durations=10 --junitxml="$LOGS/rest.xml" \
    --ignore=tests/cluster --ignore=tests/e2e --ignore=tests/agent_runner --ignore=tests/operator --ignore=tests/bench \
    --ignore=tests/dev/nodeagent/test_memlimit.py "$@" \
    2>&1 | tee "$LOGS/rest.log"
status=${PIPESTATUS[0]}
declare -A codes=([rest]=$status)
for name in "${!pids[@]}"; do
    wait "${pids[$name]}"
    codes[$name]=$?
done
trap - INT TERM

failed=0
for name in "${parts[@]}"; do
    code=${codes[$name]}
    # 5: nothing selected in this part (a -k that matches only the others' tests).
    if [ "$code" -eq 5 ] && [ $# -gt 0 ]; then codes[$name]=0; code=0; fi
    if [ "$code" -ne 0 ]; then
        failed=1
        if [ "$name" != rest ]; then
            echo
            echo "================ $name ($LOGS/$name.log) ================"
            # The failures and the summary; the whole log stays in the file.
            sed -n '/^=\+ \(FAILURES\|ERRORS\) =\+$/,$p' "$LOGS/$name.log" | tail -n 400
            grep -q '^=\+ \(FAILURES\|ERRORS\) =\+$' "$LOGS/$name.log" || tail -n 80 "$LOGS/$name.log"
        fi
    fi
done
echo
for name in "${parts[@]}"; do
    printf '%-16s exit %-3s %s\n' "$name" "${codes[$name]}" "$(tail -n 1 "$LOGS/$name.log")"
done
echo "make test: $((SECONDS - begin)) s wall; every test's duration: hack/test-durations.py $LOGS"
exit "$failed"
