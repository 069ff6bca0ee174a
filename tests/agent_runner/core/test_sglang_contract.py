"""Every request the runner can send passes the sglang 0.5.23 wheel's own checks.

The bodies are captured over real HTTP from the runner's client (every sampling
option, routed experts, stop strings, seeds), then judged by the wheel's code:
its /generate contract gate (sglang/srt/entrypoints/api_contract.py over the
generated sglang/api/v1/api_types.py), ``SamplingParams(...).normalize/verify``
(sglang/srt/sampling/sampling_params.py). ``GenerateReqInput`` (io_struct.py)
imports torch, zmq and the scheduler, so it cannot load on a CPU-only test machine:
the top-level keys are checked against its field list read from the wheel's source.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_runner.policy.sglang import SamplingParams, SGLangClient, make_rid
from swerollout.backoff import Backoff
from swerollout.tokenizers import load_tokenizer
from tests.support.runner_core_fakes import FakeSGLang
from tests.support.sglang_wheel import dataclass_fields, load

api_contract = load("sglang.srt.entrypoints.api_contract")
sampling_params = load("sglang.srt.sampling.sampling_params")

SHAPES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {}),
    ({"max_new_tokens": 7, "temperature": 0.0}, {}),
    ({"temperature": 0.7, "top_p": 0.95, "top_k": 20}, {}),
    ({"top_k": -1, "top_p": 1.0}, {}),
    ({"stop": ["</tool_call>", "\n\nObservation:"]}, {}),
    ({"stop": "END"}, {}),
    ({"stop_token_ids": [151645, 151643]}, {}),
    ({"sampling_seed": 1234}, {}),
    ({"sampling_seed": -(2**63)}, {}),
    ({"max_new_tokens": 1}, {"return_routed_experts": True, "routed_experts_start_len": 0}),
    ({"max_new_tokens": 64}, {"return_routed_experts": True, "routed_experts_start_len": 3071}),
    # Issue images: one http URL (the server downloads it) and one data URL, in placeholder order.
    ({}, {"image_data": ["https://user-images.example/a.png", "data:image/png;base64,iVBORw0KGgo="]}),
]


@pytest.mark.parametrize(("sampling", "options"), SHAPES)
async def test_runner_requests_pass_sglangs_own_checks(
    fake_sglang: FakeSGLang, sampling: dict[str, Any], options: dict[str, Any]
) -> None:
    async with SGLangClient(fake_sglang.url, retry=Backoff(attempts=1)) as client:
        await client.generate(
            [151644, 8948, 198, 2610],
            SamplingParams(**sampling),
            rid_for_attempt=lambda a: make_rid("uid-1", 1, a),
            input_ids_json="151644,8948,198,2610",
            **options,
        )
    body = fake_sglang.requests[0]
    assert api_contract.generate_contract_error(body) is None
    params = sampling_params.SamplingParams(**body["sampling_params"])
    params.normalize(load_tokenizer("qwen-2.5"))  # a real tokenizer: stop strings need one
    params.verify(vocab_size=151_936)
    assert set(body) <= set(dataclass_fields("srt/managers/io_struct.py", "GenerateReqInput"))
    assert body["input_ids"] == [151644, 8948, 198, 2610] and body["logprob_start_len"] == -1
    assert body["return_logprob"] is True and body["sampling_params"]["skip_special_tokens"] is False
    for key, value in options.items():
        assert body[key] == value


@pytest.mark.parametrize(
    ("sampling", "refused"),
    [({"top_k": 0}, "top_k"), ({"seed": 3}, "seed"), ({"top_p": 0.0}, "top_p"), ({"max_tokens": 9}, "max_tokens")],
)
def test_what_sglang_refuses_the_wire_model_refuses(sampling: dict[str, Any], refused: str) -> None:
    """Our model refuses exactly these before a request leaves, as the wheel would with a 400."""
    with pytest.raises(ValueError, match=refused):
        SamplingParams(**sampling)
    wheel_error = api_contract.generate_contract_error({"input_ids": [1], "sampling_params": sampling})
    if wheel_error is None:  # the gate admits it: SamplingParams.verify refuses it
        params = sampling_params.SamplingParams(**sampling)
        params.normalize(load_tokenizer("qwen-2.5"))
        with pytest.raises(ValueError, match=refused):
            params.verify(vocab_size=100)
    else:
        assert refused in wheel_error
