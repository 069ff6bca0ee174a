"""The trainer client: submit SWERollout batches, follow them, collect token-exact results.

    from swerollout.client import RolloutClient
    with RolloutClient.connect(store_url="file:///data/results") as client:
        client.submit_batch(instances, group_size=8, batch="step-0042",
                            inference={"endpoint": "http://sglang:30000", "tokenizer": "qwen-2.5"})
        client.wait("step-0042")
        for record in client.results("step-0042"):
            record.response_ids, record.loss_mask, record.logprobs, record.reward, record.status

Per-sample trainer hooks (verl's and AReaL's agent loops, slime's generate function)
use ``submit_one`` and ``result(name)`` (one shared watch per client serves every
``result``), ``abort``/``resume`` by ``names=``, and ``delete`` for dropped samples.

:class:`AsyncRolloutClient` is the asyncio original (plus ``stream_results``);
:class:`RolloutClient` is a blocking facade over it. Names are
``<batch>-<sample>-<member>``, applied server-side (field manager ``swerollout-client``),
so submitting the same batch again changes nothing.
"""

from swerollout.api.v1alpha1 import LABEL_SAMPLE
from swerollout.client.aclient import FIELD_MANAGER, AsyncRolloutClient, check_inference_endpoint
from swerollout.client.errors import (
    ClientConfigError,
    ClientError,
    CrdNotInstalled,
    EndpointUnreachable,
    KubeApiError,
    NamespaceNotFound,
    ResultUnavailable,
    RolloutNotFound,
    UnknownBatch,
    WaitTimeout,
)
from swerollout.client.naming import check_batch_name, rollout_name
from swerollout.client.progress import BatchProgress, MemberState
from swerollout.client.records import (
    ANNOTATION_TRAINER_LABELS,
    RolloutRecord,
    TrainerStatus,
    align_routed_experts,
    trainer_status,
)
from swerollout.client.sync import RolloutClient

__all__ = [
    "ANNOTATION_TRAINER_LABELS",
    "FIELD_MANAGER",
    "align_routed_experts",
    "LABEL_SAMPLE",
    "AsyncRolloutClient",
    "BatchProgress",
    "ClientConfigError",
    "ClientError",
    "CrdNotInstalled",
    "EndpointUnreachable",
    "KubeApiError",
    "MemberState",
    "NamespaceNotFound",
    "ResultUnavailable",
    "RolloutClient",
    "RolloutNotFound",
    "RolloutRecord",
    "TrainerStatus",
    "UnknownBatch",
    "WaitTimeout",
    "check_batch_name",
    "check_inference_endpoint",
    "rollout_name",
    "trainer_status",
]
