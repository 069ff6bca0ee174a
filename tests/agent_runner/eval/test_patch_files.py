"""Which files a patch touches (eval mode resets those of the test patch before applying it)."""

from __future__ import annotations

from agent_runner.eval.harness import default_eval_script, files_in_patch
from swerollout.api.v1alpha1 import Evaluation

PATCH = """\
diff --git a/src/my module.py b/src/my module.py
index 1111111..2222222 100644
--- a/src/my module.py
+++ b/src/my module.py
@@ -1 +1 @@
-x = 1
+x = 2
diff --git a/tests/new_test.py b/tests/new_test.py
new file mode 100644
--- /dev/null
+++ b/tests/new_test.py
@@ -0,0 +1 @@
+def test_x(): pass
diff --git a/tests/gone.py b/tests/gone.py
deleted file mode 100644
--- a/tests/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-old
diff --git a/docs/a.md b/docs/b.md
similarity index 100%
rename from docs/a.md
rename to docs/b.md
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
"""


def test_files_in_patch_covers_every_kind_of_change() -> None:
    assert files_in_patch(PATCH) == [
        "src/my module.py",
        "tests/new_test.py",
        "tests/gone.py",
        "docs/a.md",
        "docs/b.md",
        "run.sh",
    ]


def test_files_in_patch_of_nothing() -> None:
    assert files_in_patch("") == []


def test_default_eval_script_runs_the_named_test_files_once() -> None:
    script = default_eval_script(
        Evaluation(
            fail_to_pass=["tests/test_a.py::test_one", "tests/test_a.py::test_two[x]"],
            pass_to_pass=["tests/test b.py::test_three"],
        )
    )
    assert "python -m pytest -rA --tb=short -p no:cacheprovider tests/test_a.py 'tests/test b.py'\n" in script
    assert script.index(">>>>> Start Test Output") < script.index("pytest") < script.index(">>>>> End Test Output")
    assert ">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE" in script
