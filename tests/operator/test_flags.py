"""The operator's flags are generated from OperatorSettings: same names, every field, real parsing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from swerollout_operator.__main__ import parse_args
from swerollout_operator.flags import flag_name
from swerollout_operator.settings import OperatorSettings

# A value different from the default for every field, written as a user writes the flag.
NON_DEFAULT: dict[str, tuple[list[str], object]] = {
    "namespaces": (["--namespaces", "team-a,team-b"], ["team-a", "team-b"]),
    "cluster_wide": (["--cluster-wide"], True),
    "service_account_dir": (["--service-account-dir", "/run/sa"], Path("/run/sa")),
    "runner_image": (["--runner-image", "reg.example/swer:2"], "reg.example/swer:2"),
    "runner_image_pull_policy": (["--runner-image-pull-policy", "Always"], "Always"),
    "ingest_url": (["--ingest-url", "http://op:9"], "http://op:9"),
    "ingest_port": (["--ingest-port", "9081"], 9081),
    "metrics_port": (["--metrics-port", "9080"], 9080),
    "bind_host": (["--bind-host", "127.0.0.1"], "127.0.0.1"),
    "token_key_file": (["--token-key-file", "/etc/key"], Path("/etc/key")),
    "sandbox_port": (["--sandbox-port", "9880"], 9880),
    "runner_resources": (["--runner-resources", '{"limits": {"memory": "2Gi"}}'], {"limits": {"memory": "2Gi"}}),
    "pod_active_deadline_seconds": (["--pod-active-deadline-seconds", "600"], 600),
    "extra_tolerations": (["--extra-tolerations", '[{"operator": "Exists"}]'], [{"operator": "Exists"}]),
    "extra_node_selector": (["--extra-node-selector", '{"pool": "rl"}'], {"pool": "rl"}),
    "store_url": (["--store-url", "s3://bucket/prefix"], "s3://bucket/prefix"),
    "s3_endpoint_url": (["--s3-endpoint-url", "http://minio:9000"], "http://minio:9000"),
    "api_http2": (["--no-api-http2"], False),
    "api_max_in_flight": (["--api-max-in-flight", "8"], 8),
    "workers": (["--workers", "4"], 4),
    "status_coalesce_seconds": (["--status-coalesce-seconds", "0.5"], 0.5),
    "runner_report_grace_seconds": (["--runner-report-grace-seconds", "30"], 30.0),
    "default_queue_name": (["--default-queue-name", "team-a"], "team-a"),
    "keep_failed_pods": (["--keep-failed-pods"], True),
    "shards": (["--shards", "8"], 8),
    "replica_id": (["--replica-id", "swerollout-7c9-x2"], "swerollout-7c9-x2"),
    "advertise_url": (["--advertise-url", "http://10.1.2.3:8081"], "http://10.1.2.3:8081"),
    "lease_namespace": (["--lease-namespace", "swerollout-system"], "swerollout-system"),
}


def test_every_setting_is_a_flag_of_the_same_name() -> None:
    assert set(NON_DEFAULT) == set(OperatorSettings.model_fields), "a settings field without a case here"
    for name, (argv, value) in NON_DEFAULT.items():
        # A switch that is on by default is written in its negated form.
        assert argv[0] in (flag_name(name), "--no-" + flag_name(name)[2:])
        settings, _, _ = parse_args(argv)
        assert getattr(settings, name) == value, name
        assert getattr(settings, name) != getattr(OperatorSettings(), name), name


def test_no_flags_give_the_model_defaults_and_cluster_wide_watches_everything() -> None:
    settings, kubeconfig, level = parse_args([])
    assert settings == OperatorSettings() and level == "INFO"
    assert parse_args(["--cluster-wide"])[0].namespaces == []
    assert parse_args(["--cluster-wide", "--no-cluster-wide"])[0].cluster_wide is False


def test_help_comes_from_the_field_docs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "swerollout_operator", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--store-url STR Result store: `file:///path`" in text
    assert "--keep-failed-pods, --no-keep-failed-pods" in text
    assert "(default: 8081)" in text


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--ingest-port", "70000"], "--ingest-port: Input should be less than or equal to 65535"),
        (["--runner-resources", "{not json"], "argument --runner-resources: not valid JSON"),
        (["--ingest-port", "many"], "argument --ingest-port: invalid int value: 'many'"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert expected in err, err
