#!/bin/bash
# Runs this task's tests from the repository root (the eval sandbox's working directory)
# and prints SWE-bench's markers around the test output so its log parsers can grade it.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1
# Only pytest itself: installed plugins (sugar, randomly, xdist...) would change the output format.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
echo ">>>>> Start Test Output"
python -m pytest -rA --tb=short -p no:cacheprovider tests/test_names.py
SWEBENCH_TEST_EXIT_CODE=$?
echo ">>>>> End Test Output"
echo ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE"
