"""The one error family of the result store.

Backends map their own failures (``OSError``, botocore's exceptions) onto these at
the boundary, so callers never import boto to handle a store error. ``retryable``
tells the caller whether the same call may succeed later: only
:class:`StoreUnavailable` says yes.
"""

from __future__ import annotations


class StoreError(Exception):
    """Root of every error the store raises."""

    retryable: bool = False
    """Whether the same call may succeed later without anyone changing anything."""


class NotFoundError(StoreError, LookupError):
    """The object (or the bucket/root itself) does not exist; retrying will not create it."""


class IntegrityError(StoreError):
    """The stored bytes do not hash to the sha256 they were stored under (or were expected to).

    The object is corrupted or was overwritten behind the store's back; reading it
    again returns the same wrong bytes, so this is not retryable. Upload it again.
    """

    def __init__(self, message: str, *, ref: str, expected: str, actual: str) -> None:
        super().__init__(message)
        self.ref = ref
        self.expected = expected
        self.actual = actual


class InvalidRefError(StoreError, ValueError):
    """A ref (or owner/kind) that this store will not touch: wrong scheme, outside the
    store root or prefix, or not of the form ``<namespace>/<uid>/<kind>/<sha256>``."""


class StoreConfigError(StoreError):
    """The store is misconfigured: unknown URL scheme, bad option, missing bucket,
    rejected credentials, unwritable root. Fix the configuration; retrying will not help."""


class StoreUnavailable(StoreError):
    """The store could not be reached or failed transiently (timeout, refused
    connection, 5xx, throttling, disk full). The same call may succeed later."""

    retryable = True
