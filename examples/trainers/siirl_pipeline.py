"""One siiRL step's rollout through swerollout's DAG node, then siiRL's own next nodes.

siiRL runs ``dag.custom_pipeline_fn=swerollout.trainers.siirl:swe_grpo_pipeline``: its
own GRPO pipeline with the SWE rollout node, settings from ``$SWEROLLOUT_SIIRL_SETTINGS``.
Here that function builds the graph exactly as siiRL would; one row of a SWE-bench
instances file goes through siiRL's dataloader code (``collate_fn``,
``preprocess_dataloader``), the rollout node runs one step as a DAG worker calls it, and
siiRL's reward and GRPO advantage nodes (CPU-only) run on the result. The actor nodes
need siiRL's GPU workers and are not run here.

    python examples/trainers/siirl_pipeline.py --instances tasks/instances.jsonl --group-size 2 \\
        --endpoint http://127.0.0.1:30000 --kubeconfig .swerollout/dev/kubeconfig \\
        --store-url file://$PWD/.swerollout/dev/store

Needs siiRL 0.2.0 (``pip install siirl==0.2.0``) beside ``swerollout[trainers]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from siirl.dag_worker.dagworker import DAGWorker
from siirl.data_coordinator.dataloader.partitioned_dataset import collate_fn
from siirl.data_coordinator.sample import preprocess_dataloader
from siirl.execution.dag.node import NodeRole
from siirl.execution.dag.task_graph import TaskGraph
from siirl.execution.scheduler.enums import AdvantageEstimator
from siirl.params import SiiRLArguments

from swerollout.instances import load_instances
from swerollout.trainers.siirl import SETTINGS_ENV, STATUS_KEY, swe_grpo_pipeline


def run(graph: TaskGraph, node_id: str, batch: Any, config: SiiRLArguments, worker: Any) -> Any:
    """A node called with the arguments siiRL's DAG worker passes."""
    node = graph.get_node(node_id)
    assert node is not None
    kwargs: dict[str, Any] = {
        "_dag_worker_instance": worker,
        "process_group": None,
        "agent_group": {},
        "cur_tp_rank": 0,
    }
    if node.node_role == NodeRole.REWARD:
        kwargs["tp_size"] = 1
    elif node.node_role == NodeRole.ADVANTAGE:
        kwargs["cur_node"] = node
    return node.run(batch=batch, config=config, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", required=True)
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=2, help="actor_rollout_ref.rollout.n")
    parser.add_argument("--endpoint", required=True, help="the SGLang server, as the rollout pods reach it")
    parser.add_argument("--tokenizer", default="qwen-2.5")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--step", type=int, default=0, help="the trainer's global step (= the weight version)")
    parser.add_argument("--prompt-length", type=int, default=4096, help="actor_rollout_ref.rollout.prompt_length")
    parser.add_argument("--response-length", type=int, default=8192, help="actor_rollout_ref.rollout.response_length")
    args = parser.parse_args()

    settings = {
        "endpoints": [args.endpoint],
        "tokenizer": args.tokenizer,
        "kubeconfig": args.kubeconfig,
        "namespace": args.namespace,
        "store_url": args.store_url,
        "batch_prefix": "siirl-example",
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "swerollout.yaml"
        path.write_text(json.dumps(settings))  # JSON is YAML
        os.environ[SETTINGS_ENV] = str(path)
        graph = swe_grpo_pipeline()  # what siiRL calls for dag.custom_pipeline_fn

    config = SiiRLArguments()
    config.algorithm.adv_estimator = AdvantageEstimator.GRPO
    config.actor_rollout_ref.rollout.n = args.group_size
    config.actor_rollout_ref.rollout.prompt_length = args.prompt_length
    config.actor_rollout_ref.rollout.response_length = args.response_length

    # A dataset row as siiRL's dataloader yields it: its tokenized chat prompt (unused by the
    # SWE node: the agent renders its own) and the SWE-bench task in extra_info.
    row = load_instances(Path(args.instances))[args.task].model_dump(mode="json")
    ids = torch.tensor([1, 2, 3])
    batch = preprocess_dataloader(
        collate_fn(
            [
                {
                    "input_ids": ids,
                    "attention_mask": torch.ones_like(ids),
                    "position_ids": torch.arange(3),
                    "data_source": "swe-bench",
                    "extra_info": {"instance": row},
                }
            ]
        ),
        args.group_size,
    )

    # The DAG worker's part that the CPU nodes read (its actor/rollout GPU workers are not built here).
    worker: Any = DAGWorker.__new__(DAGWorker)
    worker.rollout_mode, worker._multi_agent, worker.global_steps, worker._rank = "sync", False, args.step, 0
    worker.validate_tokenizer = None

    rollout = run(graph, "rollout_actor", batch, config, worker)
    rewarded = run(graph, "function_reward", rollout.batch, config, worker)
    out = run(graph, "calculate_advantages", rewarded.batch, config, worker).batch
    print(
        json.dumps(
            {
                "shape": list(out["responses"].shape),
                "status": list(out[STATUS_KEY]),
                "rewards": out["token_level_scores"].sum(-1).tolist(),
                "sampled_tokens": int(out["response_mask"].sum()),
                "advantages_finite": bool(torch.isfinite(out["advantages"]).all()),
                "metrics": rollout.metrics,
            }
        )
    )


if __name__ == "__main__":
    main()
