"""One AReaL episode through swerollout's RolloutWorkflow.

AReaL's workflow executor would call ``arun_episode(engine, row)`` for each prompt; here
one row of a SWE-bench instances file is run directly, with AReaL's own SGLang engine
giving the weight version. The result is the [G, L] dict AReaL trains on.

    python examples/trainers/areal_episode.py --instances tasks/instances.jsonl --group-size 2 \\
        --endpoint http://127.0.0.1:30000 --kubeconfig .swerollout/dev/kubeconfig \\
        --store-url file://$PWD/.swerollout/dev/store

Needs AReaL 1.0.4 (``pip install areal==1.0.4``) beside ``swerollout[trainers]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from areal.api.cli_args import InferenceEngineConfig
from areal.engine.sglang_remote import RemoteSGLangEngine
from areal.infra.workflow_executor import check_trajectory_format

from swerollout.instances import load_instances
from swerollout.trainers.areal import SWERolloutWorkflow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", required=True)
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--endpoint", required=True, help="the SGLang server, as the rollout pods reach it")
    parser.add_argument("--tokenizer", default="qwen-2.5")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--store-url", required=True)
    parser.add_argument("--version", type=int, default=0, help="the engine's weight version")
    args = parser.parse_args()

    engine = RemoteSGLangEngine(InferenceEngineConfig(backend="sglang:d1"))
    engine.set_version(args.version)
    workflow = SWERolloutWorkflow(
        {
            "endpoints": [args.endpoint],
            "tokenizer": args.tokenizer,
            "kubeconfig": args.kubeconfig,
            "namespace": args.namespace,
            "store_url": args.store_url,
            "batch_prefix": "areal-example",
        },
        group_size=args.group_size,
    )
    row = load_instances(Path(args.instances))[args.task].model_dump(mode="json")
    result = asyncio.run(workflow.arun_episode(engine, {"instance": row}))
    if result is None:
        print(json.dumps({"rejected": True}))
        return
    check_trajectory_format(result, batch_size=args.group_size)
    print(
        json.dumps(
            {
                "shape": list(result["input_ids"].shape),
                "sampled_tokens": int(result["loss_mask"].sum()),
                "versions": sorted(set(result["versions"][result["loss_mask"] == 1].tolist())),
                "rewards": result["rewards"].tolist(),
            }
        )
    )


if __name__ == "__main__":
    main()
