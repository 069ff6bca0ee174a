"""One verl rollout step through swerollout's batch-level agent-loop manager.

verl's trainer would call ``generate_sequences`` with its repeated batch; here the batch
is built from a SWE-bench instances file so the hook runs without a GPU. The output is
the DataProto verl trains on (padded by verl's own post-processing).

    python examples/trainers/verl_step.py --instances tasks/instances.jsonl --n 2 \\
        --endpoint http://127.0.0.1:30000 --kubeconfig .swerollout/dev/kubeconfig \\
        --store-url file://$PWD/.swerollout/dev/store --model-path <tokenizer dir>

Needs verl 0.9.1 (``pip install verl==0.9.1``) beside ``swerollout[trainers]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf
from verl.protocol import DataProto

from swerollout.instances import load_instances
from swerollout.trainers.verl import SWERolloutAgentLoopManager


def column(values: list[object]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", required=True)
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--n", type=int, default=2, help="rollout.n (group size)")
    parser.add_argument("--endpoint", required=True, help="the SGLang server, as the rollout pods reach it")
    parser.add_argument("--tokenizer", default="qwen-2.5")
    parser.add_argument("--model-path", required=True, help="actor_rollout_ref.model.path (its tokenizer pads)")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--prompt-length", type=int, default=4096)
    parser.add_argument("--response-length", type=int, default=8192)
    parser.add_argument("--step", type=int, default=1)
    args = parser.parse_args()

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "n": args.n,
                    "prompt_length": args.prompt_length,
                    "response_length": args.response_length,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "top_k": -1,
                    "val_kwargs": {"temperature": 0.0, "top_p": 1.0, "top_k": -1},
                    "agent": {"agent_loop_manager_class": "swerollout.trainers.verl.SWERolloutAgentLoopManager"},
                },
                "model": {"path": args.model_path},
            },
            "swerollout": {
                "endpoints": [args.endpoint],
                "tokenizer": args.tokenizer,
                "kubeconfig": args.kubeconfig,
                "namespace": args.namespace,
                "store_url": args.store_url,
                "batch_prefix": "verl-example",
            },
        }
    )
    instances = load_instances(Path(args.instances))[: args.limit]
    rows = [inst.model_dump(mode="json") for inst in instances for _ in range(args.n)]
    prompts = DataProto.from_single_dict(
        {
            "uid": column([f"task-{i // args.n}" for i in range(len(rows))]),
            "index": column([i // args.n for i in range(len(rows))]),
            "raw_prompt": column([[{"role": "user", "content": r["problem_statement"]}] for r in rows]),
            "extra_info": column([{"instance": r} for r in rows]),
        },
        meta_info={"global_steps": args.step},
    )
    manager = SWERolloutAgentLoopManager.create(config=config, llm_client=None)
    output = manager.generate_sequences(prompts)
    summary = {
        "rows": len(output),
        "responses": list(output.batch["responses"].shape),
        "sampled_tokens": int(output.batch["response_mask"].sum()),
        "rewards": output.batch["rm_scores"].sum(dim=1).tolist(),
        "status": list(output.non_tensor_batch["swerollout_status"]),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
