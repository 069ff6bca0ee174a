"""One dev stack per e2e module (`swerollout dev up`); the handles are in tests.support.devstack."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.devstack import DevStack, running_dev_stack


@pytest.fixture(scope="module")
def dev_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    with running_dev_stack(tmp_path_factory.mktemp("devstack")) as stack:
        yield stack
