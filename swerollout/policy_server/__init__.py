"""An SGLang-compatible policy server for the embedded dev mode, the demo and the tests.

It speaks SGLang's native HTTP protocol (/generate token-in/token-out, abort,
pause/continue, weight versions, load) plus an OpenAI-compatible
/v1/chat/completions, with pluggable policies (tiny-lm, oracle, null) and fault
knobs. Start it with ``swerollout policy-server`` or ``launch(...)``.
"""

from __future__ import annotations

from swerollout.policy_server.errors import (
    BadRequestError,
    InjectedFaultError,
    LaunchError,
    PolicyConfigError,
    PolicyServerError,
)
from swerollout.policy_server.launch import PolicyServerHandle, launch
from swerollout.policy_server.settings import ServerSettings
from swerollout.policy_server.wire import FaultSettings

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
