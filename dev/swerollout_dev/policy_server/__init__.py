"""An SGLang-compatible policy server for the embedded dev mode, the demo and the tests.

Start it with ``swerollout policy-server --policy tiny-lm|oracle|null`` or
``launch(policy, tasks=..., subprocess=False) -> handle`` (``handle.url``,
``handle.stop()``, context manager; port 0 = a free port).

Endpoints: SGLang 0.5.23's own routes, bodies, defaults and status codes (the
bodies live in swerollout/wire/sglang.py; docs/sglang-protocol.md lists every route
and says which are SGLang's and which are ours):

- ``POST /generate`` token-in/token-out (``rid``, ``input_ids`` or ``text``,
  ``sampling_params``, ``return_logprob``, ``return_routed_experts`` +
  ``routed_experts_start_len``, ``stream``).
- ``POST /abort_request`` ``{rid (EXACT), abort_all}`` -> empty 200.
- ``POST /pause_generation`` ``{mode: abort|retract|in_place}``, ``POST /continue_generation``.
- ``POST /update_weight_version`` ``{new_version, abort_all_requests=true}``,
  ``POST /update_weights_from_disk`` (version only, no weights are read),
  ``GET|POST /flush_cache`` (400 while requests run).
- ``GET /health``, ``/health_generate``, ``/get_model_info``, ``/get_server_info``,
  ``/v1/loads``, ``/v1/models``.
- ``POST /v1/chat/completions`` (OpenAI, non-streaming, ``tools`` -> ``tool_calls``).
- Ours only: ``GET|POST /_standin/faults`` (test-only knobs: delay_per_token,
  abort_after_tokens, error_rate, fail_next).

Policies: ``tiny-lm`` (a random tiny Qwen2 sampled for real; logprob definition in
policies/tiny_lm.py), ``oracle`` (gold patch, then submit) and ``null`` (submit at
once); see policies/scripted.py for the scripted replies.
"""

from __future__ import annotations

from swerollout_dev.policy_server.errors import (
    BadRequestError,
    InjectedFaultError,
    LaunchError,
    PolicyConfigError,
    PolicyServerError,
)
from swerollout_dev.policy_server.launch import PolicyServerHandle, launch
from swerollout_dev.policy_server.settings import ServerSettings
from swerollout_dev.policy_server.wire import FaultSettings

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
