"""Small rows of our own in the exact shapes the datasets publish (field names, types, the
JSON-string test lists), for the loader and dry-run tests."""

from __future__ import annotations

import json
from typing import Any

Row = dict[str, Any]

_TEST_PATCH = (
    "diff --git a/pkg/tests/test_core.py b/pkg/tests/test_core.py\n"
    "--- a/pkg/tests/test_core.py\n+++ b/pkg/tests/test_core.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
)
_PATCH = "diff --git a/pkg/core.py b/pkg/core.py\n--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1 +1 @@\n-a\n+b\n"


def swebench_classic(instance_id: str = "astropy__astropy-12907", **extra: Any) -> Row:
    """SWE-bench / Lite / Verified before swebench 5: no image, no eval script, tests as JSON strings."""
    return {
        "repo": "astropy/astropy",
        "instance_id": instance_id,
        "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
        "patch": _PATCH,
        "test_patch": _TEST_PATCH,
        "problem_statement": "Modeling's `separability_matrix` does not compute separability correctly for nested models",
        "hints_text": "",
        "created_at": "2022-03-03T15:14:54Z",
        "version": "4.3",
        "FAIL_TO_PASS": json.dumps(["pkg/tests/test_core.py::test_nested[compound_model6-result6]"]),
        "PASS_TO_PASS": json.dumps(["pkg/tests/test_core.py::test_coord_matrix"]),
        "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
        **extra,
    }


VERIFIED_SCRIPT = (
    "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\nconda activate testbed\ncd /testbed\n"
    "git checkout d16bfe05a744909de4b27f5875fe0d4ed41ce607 pkg/tests/test_core.py\n"
    ": '>>>>> Start Test Output'\npytest -rA pkg/tests/test_core.py\n: '>>>>> End Test Output'\n"
)


def swebench_verified(**extra: Any) -> Row:
    """SWE-bench Verified as swebench 5 publishes it: the classic fields plus difficulty, image,
    eval_script, log_parser and eval_type."""
    return swebench_classic(
        difficulty="15 min - 1 hour",
        image="swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest",
        eval_script=VERIFIED_SCRIPT,
        log_parser="parse_log_astropy",
        eval_type="pass_and_fail",
        **extra,
    )


def swebench_multimodal() -> Row:
    """SWE-bench Multimodal: JS repositories, image_assets as a JSON string."""
    return {
        "repo": "chartjs/Chart.js",
        "instance_id": "chartjs__Chart.js-10301",
        "base_commit": "0f1f4cb3e5d4b5e2a3a2b1b0c9d8e7f6a5b4c3d2",
        "patch": _PATCH,
        "test_patch": "diff --git a/test/specs/core.test.js b/test/specs/core.test.js\n",
        "problem_statement": "Legend labels overlap, see the screenshots:\n![a](https://user-images.example/a.png)",
        "hints_text": "",
        "created_at": "2022-04-21T08:44:00Z",
        "version": "3.7",
        "FAIL_TO_PASS": json.dumps(["Chart.controllers.doughnut should render legend"]),
        "PASS_TO_PASS": json.dumps([]),
        "environment_setup_commit": "0f1f4cb3e5d4b5e2a3a2b1b0c9d8e7f6a5b4c3d2",
        "image_assets": json.dumps(
            {
                "problem_statement": ["https://user-images.example/a.png", "https://user-images.example/b.png"],
                "patch": [],
                "test_patch": [],
            }
        ),
        "image": "swebench/sweb.eval.x86_64.chartjs_1776_chart.js-10301:latest",
        "eval_script": "#!/bin/bash\ncd /testbed\n: '>>>>> Start Test Output'\nnpx karma start --single-run\n: '>>>>> End Test Output'\n",
        "log_parser": "parse_log_chart_js",
        "eval_type": "pass_and_fail",
    }


def swe_gym() -> Row:
    """SWE-Gym: SWE-bench's classic shape (test lists as lists), moto/pandas/... repositories."""
    return {
        "instance_id": "getmoto__moto-5406",
        "hints_text": "Thanks for raising this!",
        "patch": _PATCH,
        "test_patch": _TEST_PATCH,
        "created_at": "2022-08-23 19:35:42",
        "problem_statement": "DynamoDB table creates only in us-east-1",
        "repo": "getmoto/moto",
        "base_commit": "87683a786f0d3a0280c92ea01fecce8a3dd4b0fd",
        "version": "4.0",
        "PASS_TO_PASS": ["pkg/tests/test_core.py::test_old"],
        "FAIL_TO_PASS": ["pkg/tests/test_core.py::test_new"],
    }


def swe_smith() -> Row:
    """SWE-smith: one image per repository snapshot (image_name), no test patch, no version."""
    return {
        "instance_id": "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc",
        "repo": "swesmith/oauthlib__oauthlib.1fd52536",
        "patch": _PATCH,
        "FAIL_TO_PASS": ["tests/oauth2/rfc6749/test_server.py::TokenEndpointTest::test_invalid_type"],
        "PASS_TO_PASS": ["tests/test_common.py::ParameterTest::test_extract_params"],
        "created_at": "2025-03-15T01:05:14.244523",
        "image_name": "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
        "base_commit": "1fd525361a9d5c8a5cb4a6e2d4e8a9b0c1d2e3f4",
        "problem_statement": "Token endpoint accepts an unsupported token type",
    }


def swe_rebench() -> Row:
    """SWE-rebench: install_config carries the test command and log parser; docker_image names the image."""
    return {
        "instance_id": "tox-dev__tox-3810",
        "repo": "tox-dev/tox",
        "base_commit": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
        "patch": _PATCH,
        "test_patch": _TEST_PATCH,
        "problem_statement": "Empty replacement result treated as missing",
        "hints_text": "",
        "created_at": "2025-05-02T10:00:00",
        "version": "4.26",
        "FAIL_TO_PASS": ["pkg/tests/test_core.py::test_empty"],
        "PASS_TO_PASS": ["pkg/tests/test_core.py::test_other"],
        "environment_setup_commit": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678",
        "meta": {"llm_score": {"difficulty_score": 1, "issue_text_score": 0, "test_score": 0}, "num_modified_files": 1},
        "install_config": {
            "install": "pip install -e .",
            "log_parser": "parse_log_pytest",
            "python": "3.11",
            "test_cmd": "pytest --no-header -rA --tb=no -p no:cacheprovider -W ignore::DeprecationWarning",
            "pip_packages": ["pytest"],
        },
        "requirements": "pytest==8.3.5\n",
        "environment": "name: testbed\n",
        "docker_image": "swerebench/sweb.eval.x86_64.tox-dev_1776_tox-3810",
    }
