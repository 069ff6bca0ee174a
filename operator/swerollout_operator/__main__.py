"""`python -m swerollout_operator`: run the operator.

In a cluster it uses its ServiceAccount; elsewhere pass --kubeconfig (or set
KUBECONFIG). It watches only the namespaces it is given unless --all-namespaces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import kopf

from . import handlers  # noqa: F401 - registers the kopf handlers
from .runtime import OperatorRuntime
from .settings import OperatorSettings


def parse_args(argv: list[str] | None = None) -> tuple[OperatorSettings, Path | None, str]:
    p = argparse.ArgumentParser(prog="swerollout_operator", description=__doc__)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--namespace", default=None, help="comma-separated namespaces to watch (default: default)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch every namespace (needs the ClusterRole)")
    p.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG") or None)
    p.add_argument("--runner-image")
    p.add_argument("--runner-image-pull-policy")
    p.add_argument("--ingest-url")
    p.add_argument("--ingest-port", type=int)
    p.add_argument("--metrics-port", type=int)
    p.add_argument("--bind-host")
    p.add_argument("--token-key-file", type=Path)
    p.add_argument("--sandbox-port", type=int)
    p.add_argument("--status-coalesce-seconds", type=float)
    p.add_argument("--pod-active-deadline-seconds", type=int)
    p.add_argument("--runner-resources", type=json.loads, help="JSON object {requests: ..., limits: ...}")
    p.add_argument("--pod-tolerations", type=json.loads, help="JSON list of tolerations added to every pod")
    p.add_argument("--pod-node-selector", type=json.loads, help="JSON object added to every pod's nodeSelector")
    p.add_argument("--keep-failed-pods", action="store_true", default=None)
    p.add_argument("--store", help="result store URL: file:///path or s3://bucket/prefix")
    p.add_argument("--s3-endpoint-url")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)

    values: dict[str, object] = {}
    if args.all_namespaces:
        values["cluster_wide"] = True
        values["namespaces"] = []
    elif args.namespace:
        values["namespaces"] = [n for n in args.namespace.split(",") if n]
    mapping = {
        "runner_image": args.runner_image,
        "runner_image_pull_policy": args.runner_image_pull_policy,
        "ingest_url": args.ingest_url,
        "ingest_port": args.ingest_port,
        "metrics_port": args.metrics_port,
        "bind_host": args.bind_host,
        "token_key_file": args.token_key_file,
        "sandbox_port": args.sandbox_port,
        "status_coalesce_seconds": args.status_coalesce_seconds,
        "pod_active_deadline_seconds": args.pod_active_deadline_seconds,
        "runner_resources": args.runner_resources,
        "extra_tolerations": args.pod_tolerations,
        "extra_node_selector": args.pod_node_selector,
        "keep_failed_pods": args.keep_failed_pods,
        "store_url": args.store,
        "s3_endpoint_url": args.s3_endpoint_url,
    }
    values.update({k: v for k, v in mapping.items() if v is not None})
    return OperatorSettings.model_validate(values), args.kubeconfig, args.log_level


async def run(settings: OperatorSettings, kubeconfig: Path | None) -> None:
    if kubeconfig is not None:
        # kopf's own login reads KUBECONFIG.
        os.environ["KUBECONFIG"] = str(kubeconfig)
    memo = kopf.Memo(runtime=OperatorRuntime(settings, kubeconfig=kubeconfig))
    # kopf handles SIGTERM/SIGINT itself: it stops the watches, runs the cleanup
    # handlers (which stop our servers) and returns.
    await kopf.operator(
        standalone=True,
        clusterwide=settings.cluster_wide,
        namespaces=settings.namespaces,
        memo=memo,
    )


def main(argv: list[str] | None = None) -> int:
    settings, kubeconfig, log_level = parse_args(argv)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(run(settings, kubeconfig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
