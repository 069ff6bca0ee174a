"""Failure injection: the knobs of wire.FaultSettings and the seeded dice behind them."""

from __future__ import annotations

import random

from swerollout_dev.policy_server.errors import InjectedFaultError
from swerollout_dev.policy_server.wire import FaultSettings, FaultsUpdate


class FaultInjector:
    def __init__(self, settings: FaultSettings, *, seed: int) -> None:
        self.settings = settings.model_copy()
        # Its own generator, so the error pattern depends only on the seed and the
        # order of requests, not on what sampling did in between.
        self._dice = random.Random(seed)

    def before_request(self) -> None:
        """Raise InjectedFaultError when this generation request must fail."""
        if self.settings.fail_next > 0:
            self.settings.fail_next -= 1
            raise InjectedFaultError("injected fault: failing this request (fail_next)", status=503)
        if self.settings.error_rate > 0 and self._dice.random() < self.settings.error_rate:
            raise InjectedFaultError("injected fault: random server error (error_rate)", status=500)

    def update(self, change: FaultsUpdate) -> FaultSettings:
        values = self.settings.model_dump()
        values.update(change.model_dump(exclude_none=True, exclude={"clear_abort_after_tokens"}))
        if change.clear_abort_after_tokens:
            values["abort_after_tokens"] = None
        self.settings = FaultSettings.model_validate(values)
        return self.settings
