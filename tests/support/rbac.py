"""RBAC changes take effect a moment after they are written: wait for them."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from swerollout.kube import Forbidden

T = TypeVar("T")


def once_rbac_allows(call: Callable[[], T], timeout: float = 15.0) -> T:
    """Run ``call`` until it stops being Forbidden.

    The RBAC authorizer reads Roles and RoleBindings from an informer cache, so a
    new binding takes effect a moment after the create returns.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except Forbidden:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
