"""Every usage or validation error of the CLI is one line naming the field and the fix
(no pydantic or YAML dumps, no tracebacks), and exits 2.

Nothing here reaches a cluster: each mistake is caught before the first request (the
kubeconfig points at a closed port)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swerollout.cli.main import main
from swerollout_dev.tasks import DEFAULT_TASKS_DIR

ROW = json.loads((DEFAULT_TASKS_DIR / "instances.jsonl").read_text().splitlines()[0])
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""
FILES: dict[str, str] = {
    "ok.yaml": KUBECONFIG,
    "not-yaml.yaml": "clusters: [unclosed\n",
    "clusters-not-list.yaml": "apiVersion: v1\nclusters: 5\n",
    "cluster-without-name.yaml": "apiVersion: v1\nclusters:\n- cluster: {server: https://x}\n",
    "list.yaml": "- a\n- b\n",
    "user-not-mapping.yaml": KUBECONFIG.replace("user: {token: abc}", "user: 5"),
    "good.jsonl": json.dumps(ROW) + "\n",
    "no-id.jsonl": json.dumps({k: v for k, v in ROW.items() if k != "instance_id"}) + "\n",
    "bad-commit.jsonl": json.dumps({**ROW, "base_commit": 5}) + "\n",
    "bad-f2p.jsonl": json.dumps({**ROW, "FAIL_TO_PASS": "[not json"}) + "\n",
    "bad-id.jsonl": json.dumps({**ROW, "instance_id": "bad id!"}) + "\n",
    "broken.jsonl": json.dumps(ROW) + "\n{not json\n",
}
SUBMIT = [
    "submit",
    "-f",
    "good.jsonl",
    "-G",
    "1",
    "--batch",
    "b",
    "--endpoint",
    "http://h:1",
    "--tokenizer",
    "qwen-2.5",
]


def _with(args: list[str], **changes: str) -> list[str]:
    out = list(args)
    for flag, value in changes.items():
        option = "--" + flag.replace("_", "-")
        if option in out:
            out[out.index(option) + 1] = value
        else:
            out += [option, value]
    return out


CASES: list[tuple[str, list[str], list[str]]] = [
    # (case, arguments, what the one line must name)
    ("kubeconfig not YAML", ["list", "--kubeconfig", "not-yaml.yaml"], ["not-yaml.yaml", "not valid YAML", "line"]),
    ("kubeconfig clusters not a list", ["list", "--kubeconfig", "clusters-not-list.yaml"], ["clusters", "list"]),
    ("kubeconfig entry without name", ["list", "--kubeconfig", "cluster-without-name.yaml"], ["clusters.0.name"]),
    ("kubeconfig a list", ["list", "--kubeconfig", "list.yaml"], ["not a kubeconfig mapping"]),
    ("kubeconfig user not a mapping", ["list", "--kubeconfig", "user-not-mapping.yaml"], ["malformed", "fix the file"]),
    ("kubeconfig missing", ["list", "--kubeconfig", "missing.yaml"], ["missing.yaml", "no such file", "--kubeconfig"]),
    ("unknown context", ["list", "--kubeconfig", "ok.yaml", "--context", "nope"], ["no context named 'nope'"]),
    ("row without instance_id", _with(SUBMIT, file="no-id.jsonl"), ["no-id.jsonl:1", "instance_id"]),
    (
        "row with a bad field",
        _with(SUBMIT, file="bad-commit.jsonl"),
        ["bad-commit.jsonl:1", "base_commit", "fix this field"],
    ),
    ("row with a bad test list", _with(SUBMIT, file="bad-f2p.jsonl"), ["FAIL_TO_PASS", "JSON list"]),
    ("row with a bad id", _with(SUBMIT, file="bad-id.jsonl"), ["instance_id", "pattern"]),
    ("row not JSON", _with(SUBMIT, file="broken.jsonl"), ["broken.jsonl:2", "not a JSON object"]),
    ("rows file missing", _with(SUBMIT, file="nothing.jsonl"), ["nothing.jsonl", "does not exist"]),
    (
        "endpoint without host",
        _with(SUBMIT, endpoint="http:///generate"),
        ["spec.inference.endpoint", "http://sglang:30000"],
    ),
    ("endpoint port out of range", _with(SUBMIT, endpoint="http://h:99999"), ["spec.inference.endpoint", "65535"]),
    ("endpoint not http", _with(SUBMIT, endpoint="ftp://h:1"), ["spec.inference.endpoint", "http(s)"]),
    ("group size 0", _with(SUBMIT, group_size="0"), ["--group-size", "at least 1"]),
    ("batch name", _with(SUBMIT, batch="B_x"), ["batch name 'B_x'", "lowercase"]),
    ("max turns", _with(SUBMIT, max_turns="-3"), ["spec.agent.maxTurns"]),
    ("temperature", _with(SUBMIT, temperature="20"), ["spec.inference.sampling.temperature"]),
    (
        "no tokenizer",
        [a for a in SUBMIT if a not in ("--tokenizer", "qwen-2.5")],
        ["spec.inference.tokenizer", "qwen-2.5"],
    ),
    ("label", [*SUBMIT, "--label", "novalue"], ["--label", "KEY=VALUE"]),
    ("results format", ["results", "--batch", "b", "--out", "x.csv"], [".parquet or .jsonl"]),
    (
        "results token file",
        [
            "results",
            "--batch",
            "b",
            "--out",
            "x.jsonl",
            "--results-url",
            "http://h:1",
            "--results-token-file",
            "no-token",
        ],
        ["--results-token-file", "no-token"],
    ),
]


@pytest.mark.parametrize(("case", "args", "named"), CASES, ids=[c[0] for c in CASES])
def test_a_mistake_is_one_line_naming_the_field(
    case: str,
    args: list[str],
    named: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    if "--kubeconfig" not in args and args[0] != "list":
        args = [*args, "--kubeconfig", "ok.yaml"]
    code = main(args)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1, f"{case}: not one line:\n{err}"
    for word in named:
        assert word in lines[0], f"{case}: {word!r} not in {lines[0]!r}"
