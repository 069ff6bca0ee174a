"""read_modify_write: what it does after a race, a lost answer and a refusal (swerollout.client.core).

The object is a plain record with a resourceVersion; the write is conditional on the
version it was decided from, as the API server's are. The client's abort/resume and
batch writes use this loop against a real API server behind a fault proxy
(tests/swerollout/client/test_client_retry.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from swerollout.backoff import Backoff
from swerollout.client.core import RacesLost, read_modify_write
from swerollout.kube import Conflict, Forbidden, ServerError

FAST = Backoff(first_seconds=0.001, max_seconds=0.01, attempts=5)


@dataclass
class Stored:
    """One object on a server: its value and version, and the writes that reached it."""

    value: bool = False
    version: int = 1
    writes: int = 0
    reads: int = 0
    faults: list[Exception] = field(default_factory=list)
    """Raised by the next writes, in order, after the write was applied (a lost answer)
    or instead of it (Conflict: someone else wrote first)."""

    async def read(self) -> tuple[bool, int]:
        self.reads += 1
        return self.value, self.version

    async def write(self, seen: tuple[bool, int]) -> str:
        value, version = seen
        if value:
            return "already"
        fault = self.faults.pop(0) if self.faults else None
        if isinstance(fault, Conflict) or version != self.version:
            self.version += 1  # the other writer's change
            raise Conflict("the object has been modified", status=409, reason="Conflict")
        self.writes += 1
        self.value, self.version = True, self.version + 1
        if fault is not None:
            raise fault  # applied, but the answer did not come back
        return "written"


async def _set(stored: Stored, *, races: int = 3) -> str:
    return await read_modify_write(await stored.read(), write=stored.write, read=stored.read, races=races, backoff=FAST)


async def test_a_write_whose_answer_was_lost_is_read_back_and_never_sent_again() -> None:
    stored = Stored(faults=[ServerError("etcd timeout", status=503, reason="ServiceUnavailable")])
    assert await _set(stored) == "already"
    assert stored.writes == 1 and stored.reads == 2


async def test_a_lost_race_is_decided_again_on_a_fresh_read() -> None:
    stored = Stored(faults=[Conflict("raced", status=409)])
    assert await _set(stored) == "written"
    assert stored.writes == 1 and stored.reads == 2


async def test_races_without_end_give_up_retryable() -> None:
    stored = Stored(faults=[Conflict("raced", status=409) for _ in range(10)])
    with pytest.raises(RacesLost) as caught:
        await _set(stored, races=3)
    assert caught.value.retryable and stored.writes == 0 and stored.reads == 3


async def test_a_refusal_goes_up_at_once_without_another_read() -> None:
    stored = Stored()

    async def refused(seen: tuple[bool, int]) -> str:
        raise Forbidden("no patch on swerolloutbatches", status=403)

    with pytest.raises(Forbidden):
        await read_modify_write(await stored.read(), write=refused, read=stored.read, races=3, backoff=FAST)
    assert stored.reads == 1
