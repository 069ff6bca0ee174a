"""`swerollout submit`: create a batch of SWERollouts from a dataset as published.

    swerollout submit -f instances.jsonl --group-size 8 --batch step-0042 \\
        --endpoint http://sglang:30000 --tokenizer qwen-2.5
    swerollout submit -f swe-bench-verified.parquet --limit 20 --filter 'django__.*' ...

``-f`` takes .jsonl, .json, .parquet, a saved ``datasets`` folder or a hub name, with rows
of SWE-bench (full, Lite, Verified, Multimodal), SWE-Gym, SWE-smith or SWE-rebench.

Creates one SWERollout per (instance, group member), named ``<batch>-<sample>-<member>``;
running it again with the same arguments changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from swerollout.api.v1alpha1 import AgentKind, IssueImageMode, Mode, OnAbort
from swerollout.cli.rollouts import EXIT_OK, EXIT_USAGE, add_connection_args, run_client_command
from swerollout.client import RolloutClient
from swerollout.datasets import DatasetKind
from swerollout.datasets.conventions import TEMPLATE_FIELDS
from swerollout.instances import InstanceError, load_instances


def _secret_key_ref(value: str) -> dict[str, str]:
    name, _, key = value.partition("/")
    if not name or not key or "/" in key:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not SECRET/KEY: name the Secret and its key, e.g. sglang-keys/admin-key"
        )
    return {"name": name, "key": key}


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--label {pair!r}: use KEY=VALUE")
        labels[key] = value
    return labels


def _submit(args: argparse.Namespace, client: RolloutClient) -> int:
    try:
        instances = load_instances(
            args.file,
            dataset=args.dataset,
            split=args.split,
            image_template=args.image_template,
            id_filter=args.filter,
            limit=args.limit,
        )
        labels = _labels(args.label or [])
    except (InstanceError, argparse.ArgumentTypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    inference: dict[str, Any] = {"endpoint": args.endpoint, "tokenizer": args.tokenizer}
    if args.max_context_tokens:
        inference["maxContextTokens"] = args.max_context_tokens
    if args.temperature is not None:
        inference["sampling"] = {"temperature": args.temperature}
    if args.on_abort:
        inference["onAbort"] = args.on_abort
    if args.api_key_secret:
        inference["apiKeySecretRef"] = args.api_key_secret
    if args.admin_key_secret:
        inference["adminKeySecretRef"] = args.admin_key_secret
    agent: dict[str, Any] = {"kind": args.agent}
    if args.max_turns:
        agent["maxTurns"] = args.max_turns
    if args.issue_image_mode:
        agent["issueImageMode"] = args.issue_image_mode
    names = client.submit_batch(
        instances,
        args.group_size,
        batch=args.batch,
        inference=inference,
        agent=agent,
        mode=args.mode,
        labels=labels,
        weight_version=args.weight_version,
        reward={"enabled": not args.no_reward, **({"prewarm": True} if args.prewarm_eval else {})},
        check_endpoint=args.check_endpoint,
        prepared=args.prepare,
    )
    print(
        f"batch {args.batch}: {len(names)} rollouts ({len(instances)} instances x {args.group_size}) "
        f"in namespace {client.namespace}; follow with `swerollout watch --batch {args.batch}`"
    )
    if args.prepare:
        print(f"prepared: they park in phase Prepared; start them with `swerollout resume --batch {args.batch}`")
    return EXIT_OK


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--file",
        required=True,
        help="instances: .jsonl/.json/.parquet, a saved `datasets` folder or a hub name, rows as SWE-bench, SWE-Gym, "
        "SWE-smith or SWE-rebench publish them (`swerollout tasks materialize` writes the bundled tasks)",
    )
    parser.add_argument(
        "--dataset",
        choices=[k.value for k in DatasetKind],
        help="whose conventions apply (image naming, eval script); detected from the rows and the file name by default",
    )
    parser.add_argument(
        "--split", help="split of a saved dataset folder or hub dataset (default: its only split, else test)"
    )
    parser.add_argument(
        "--image-template",
        help="sandbox image for every row, overriding the dataset's; fields: "
        + ", ".join("{" + k + "} " + v for k, v in TEMPLATE_FIELDS.items()),
    )
    parser.add_argument(
        "--filter", metavar="REGEX", help="only instances whose id fully matches this regular expression"
    )
    parser.add_argument("--limit", type=int, help="only the first N instances (after --filter)")
    parser.add_argument("--group-size", "-G", type=int, required=True, help="rollouts per instance (GRPO group size)")
    parser.add_argument(
        "--batch",
        required=True,
        help="batch name: lowercase letters, digits, '-' (names are <batch>-<sample>-<member>)",
    )
    parser.add_argument("--endpoint", required=True, help="SGLang base URL, e.g. http://sglang:30000")
    parser.add_argument(
        "--tokenizer",
        help="tokenizer of the chat template (bundled name such as qwen-2.5, or a directory); required unless --agent ChatAgent",
    )
    parser.add_argument(
        "--mode",
        choices=[m.value for m in Mode],
        default=Mode.TRAIN.value,
        help="train grades only `submitted`; validate grades autosubmissions too",
    )
    parser.add_argument(
        "--agent",
        choices=[k.value for k in AgentKind],
        default=AgentKind.RL_TOKEN_AGENT.value,
        help="agent loop (default RLTokenAgent)",
    )
    parser.add_argument("--max-turns", type=int, help="model calls per rollout (default 50)")
    parser.add_argument("--max-context-tokens", type=int, help="context limit in tokens (default 32768)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default 1.0)")
    parser.add_argument(
        "--on-abort",
        choices=[v.value for v in OnAbort],
        help="what an aborted request leaves: Drop (default) re-samples the turn, Keep continues it (partial rollout)",
    )
    parser.add_argument(
        "--issue-image-mode",
        choices=[v.value for v in IssueImageMode],
        help="how issue images (SWE-bench Multimodal) reach the model: Inline (default) as images, which the "
        "tokenizer's chat template must show; Links as a text list after the problem statement",
    )
    parser.add_argument(
        "--api-key-secret",
        type=_secret_key_ref,
        metavar="SECRET/KEY",
        help="the Secret key holding the server's API key (SGLang's --api-key); mounted into the runner only",
    )
    parser.add_argument(
        "--admin-key-secret",
        type=_secret_key_ref,
        metavar="SECRET/KEY",
        help="the Secret key holding the server's admin key (SGLang's --admin-api-key), sent on the runner's aborts; "
        "`swerollout dev up` makes swerollout-inference-keys/admin-key",
    )
    parser.add_argument("--weight-version", help="weight version the trainer expects (recorded per token)")
    parser.add_argument(
        "--label", action="append", metavar="KEY=VALUE", help="extra label on every rollout (repeatable)"
    )
    parser.add_argument("--no-reward", action="store_true", help="skip the evaluation pod (no reward)")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="submit the batch suspended: each rollout is prepared (pod, sandbox, tokenizer, first prompt) and "
        "parks in phase Prepared until `swerollout resume --batch`, which sends every first /generate at once",
    )
    parser.add_argument(
        "--prewarm-eval",
        action="store_true",
        help="start each eval pod while its rollout is prepared or runs (spec.reward.prewarm), so the reward follows the finish",
    )
    parser.add_argument("--check-endpoint", action="store_true", help="fail unless GET <endpoint>/health answers first")
    add_connection_args(parser)
    parser.set_defaults(func=run_client_command(_submit))
