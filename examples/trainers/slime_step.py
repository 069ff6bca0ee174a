"""slime's rollout steps through swerollout's hooks, with slime's own command-line flags.

slime's rollout manager loads the function a flag names and calls it: with
``--rollout-function-path swerollout.trainers.slime.generate_rollout`` once per step
(``--partial-rollout``: the groups still running when ``--rollout-batch-size`` are whole
go back to the buffer and resume by name next step); with
``--custom-generate-function-path swerollout.trainers.slime.generate`` once per sample,
inside slime's rollout (each group's samples concurrently). This script does what that
manager does, for ``--steps`` steps, so the same flags run here without a GPU:

    python examples/trainers/slime_step.py --prompt-data tasks/instances.jsonl \\
        --custom-config-path swerollout.yaml \\
        --rollout-function-path swerollout.trainers.slime.generate_rollout \\
        --partial-rollout --over-sampling-batch-size 2 --rollout-batch-size 1 --n-samples-per-prompt 1 \\
        --rollout-max-response-len 8192 --steps 2

``swerollout.yaml`` (slime sets each of its top-level keys on ``args``)::

    swerollout:
      endpoints: ["http://127.0.0.1:30000"]   # the SGLang server, as the rollout pods reach it
      tokenizer: qwen-2.5
      kubeconfig: .swerollout/dev/kubeconfig
      namespace: default
      store_url: file:///path/to/.swerollout/dev/store

Each ``--prompt-data`` row's ``--metadata-key`` column is the SWE-bench row; a plain
instances file (one SWE-bench row per line) is its own metadata. Samples are slime's
``slime.utils.types.Sample`` (``--sample-class`` names another with the same fields).
Prints one JSON line: the groups each step returned.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
from pathlib import Path
from typing import Any

import yaml


def load_function(path: str) -> Any:
    """``package.module.name`` -> the object, as slime's ``load_function`` resolves a flag."""
    module, _, name = path.replace(":", ".").rpartition(".")
    return getattr(importlib.import_module(module), name)


class DataSource:
    """slime's data source as a rollout function sees it: ``get_samples(n)`` hands out n
    groups, the buffer (what ``add_samples`` gave back) first, then new prompts."""

    def __init__(self, rows: list[dict[str, Any]], args: argparse.Namespace, sample_class: Any) -> None:
        self.rows, self.args, self.sample_class = rows, args, sample_class
        self.buffer: list[list[Any]] = []
        self.next_prompt = 0

    def get_samples(self, n: int) -> list[list[Any]]:
        groups, self.buffer = self.buffer[:n], self.buffer[n:]
        while len(groups) < n:
            row = self.rows[self.next_prompt % len(self.rows)]
            metadata = row.get(self.args.metadata_key) or row
            size = self.args.n_samples_per_prompt
            groups.append(
                [
                    self.sample_class(
                        group_index=self.next_prompt, index=self.next_prompt * size + i, metadata=metadata
                    )
                    for i in range(size)
                ]
            )
            self.next_prompt += 1
        return groups

    def add_samples(self, groups: list[list[Any]]) -> None:
        self.buffer.extend(groups)


def slime_args() -> argparse.Namespace:
    """The slime flags the hooks read (names, defaults and types as slime's parser has them)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompt-data", required=True)
    parser.add_argument("--metadata-key", default="metadata")
    parser.add_argument("--custom-config-path", required=True)
    hooks = parser.add_mutually_exclusive_group(required=True)
    hooks.add_argument("--rollout-function-path")
    hooks.add_argument("--custom-generate-function-path")
    parser.add_argument("--rollout-batch-size", type=int, required=True)
    parser.add_argument("--n-samples-per-prompt", type=int, default=1)
    parser.add_argument("--over-sampling-batch-size", type=int, default=None)
    parser.add_argument("--partial-rollout", action="store_true", default=False)
    parser.add_argument("--rollout-temperature", type=float, default=1.0)
    parser.add_argument("--rollout-top-p", type=float, default=1.0)
    parser.add_argument("--rollout-top-k", type=int, default=-1)
    parser.add_argument("--rollout-max-response-len", type=int, default=None)
    parser.add_argument("--rollout-max-context-len", type=int, default=None)
    parser.add_argument("--moe-router-topk", type=int, default=None)
    parser.add_argument("--hf-checkpoint", default=None)
    parser.add_argument("--sglang-router-ip", default=None)
    parser.add_argument("--sglang-router-port", type=int, default=None)
    # This script's own flags.
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--sample-class", default="slime.utils.types.Sample")
    args = parser.parse_args()
    # slime's --custom-config-path: every top-level key of the YAML becomes an attribute.
    for key, value in (yaml.safe_load(Path(args.custom_config_path).read_text()) or {}).items():
        setattr(args, key, value)
    return args


async def generate_steps(args: argparse.Namespace, data_source: DataSource) -> list[list[list[Any]]]:
    """slime's own rollout with a custom generate function, on its one event loop: each
    group's samples concurrently, ``sampling_params`` from the rollout flags."""
    generate = load_function(args.custom_generate_function_path)
    sampling_params = {
        "temperature": args.rollout_temperature,
        "top_p": args.rollout_top_p,
        "top_k": args.rollout_top_k,
        "max_new_tokens": args.rollout_max_response_len,
    }
    steps = []
    for _ in range(args.steps):
        groups = data_source.get_samples(args.rollout_batch_size)
        steps.append(
            [list(await asyncio.gather(*(generate(args, s, dict(sampling_params)) for s in g))) for g in groups]
        )
    return steps


def summary(groups: list[list[Any]]) -> list[dict[str, Any]]:
    return [
        {
            "group_index": g[0].group_index,
            "status": [s.status.name for s in g],
            "rewards": [s.reward for s in g],
            "sampled_tokens": [sum(s.loss_mask or []) for s in g],
            "response_length": [s.response_length for s in g],
            "weight_versions": [s.weight_versions for s in g],
            "rollouts": [s.metadata.get("swerollout_rollout") for s in g],
        }
        for g in groups
    ]


def sample_class(path: str) -> Any:
    """The ``--sample-class``; slime itself is not on PyPI, so its absence is one line with the way out."""
    try:
        return load_function(path)
    except ModuleNotFoundError as exc:
        raise SystemExit(
            f"error: --sample-class {path}: {exc.name} is not installed (slime is github.com/THUDM/slime; the PyPI "
            "package `slime` is another project). Install slime, or from a checkout pass --sample-class "
            "tests.support.slime_double.Sample (slime's fields) with PYTHONPATH=."
        ) from None


def main() -> None:
    args = slime_args()
    rows = [json.loads(line) for line in Path(args.prompt_data).read_text().splitlines() if line.strip()]
    data_source = DataSource(rows, args, sample_class(args.sample_class))
    if args.rollout_function_path:
        rollout = load_function(args.rollout_function_path)
        try:
            steps = [rollout(args, rollout_id, data_source) for rollout_id in range(args.steps)]
        finally:
            # The rollout function keeps its client on a thread of its own; stop it.
            importlib.import_module(rollout.__module__).close()
    else:
        steps = asyncio.run(generate_steps(args, data_source))
    print(json.dumps({"steps": [summary(groups) for groups in steps], "buffered": len(data_source.buffer)}))


if __name__ == "__main__":
    main()
