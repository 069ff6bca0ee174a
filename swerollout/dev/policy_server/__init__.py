"""An SGLang-compatible policy server for the embedded dev mode, the demo and the tests.

Start it with ``swerollout policy-server --policy tiny-lm|oracle|null`` or
``launch(policy, tasks=..., subprocess=False) -> handle`` (``handle.url``,
``handle.stop()``, context manager; port 0 = a free port).

Endpoints (SGLang's field names; bodies validated, unknown fields -> 400 naming them):

- ``POST /generate`` token-in/token-out (``rid``, ``input_ids`` or ``text``,
  ``sampling_params``, ``return_logprob``, ``return_routed_experts``, ``stream``).
- ``POST /abort_request`` ``{rid (prefix), abort_all}``.
- ``POST /pause_generation`` ``{mode: abort|retract|in_place}``, ``POST /continue_generation``.
- ``POST /update_weight_version`` ``{new_version, abort_all_requests}``; trainer
  compatibility: ``POST /update_weights_from_disk`` (version only, no weights are
  read), ``POST /flush_cache`` (no-op), ``GET /get_weight_version``.
- ``GET /health``, ``/health_generate``, ``/get_model_info``, ``/get_server_info``,
  ``/get_load``, ``/v1/loads``, ``/v1/models``.
- ``POST /v1/chat/completions`` (OpenAI, non-streaming, ``tools`` -> ``tool_calls``).
- ``GET|POST /faults`` (test-only knobs: delay_per_token, abort_after_tokens,
  error_rate, fail_next).

Policies: ``tiny-lm`` (a random tiny Qwen2 sampled for real; logprob definition in
policies/tiny_lm.py), ``oracle`` (gold patch, then submit) and ``null`` (submit at
once); see policies/scripted.py for the scripted replies.
"""

from __future__ import annotations

from swerollout.dev.policy_server.errors import (
    BadRequestError,
    InjectedFaultError,
    LaunchError,
    PolicyConfigError,
    PolicyServerError,
)
from swerollout.dev.policy_server.launch import PolicyServerHandle, launch
from swerollout.dev.policy_server.settings import ServerSettings
from swerollout.dev.policy_server.wire import FaultSettings

__all__ = [
    "BadRequestError",
    "FaultSettings",
    "InjectedFaultError",
    "LaunchError",
    "PolicyConfigError",
    "PolicyServerError",
    "PolicyServerHandle",
    "ServerSettings",
    "launch",
]
