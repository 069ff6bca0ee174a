"""URL scheme -> backend, imported only when used (boto3 is an optional dependency)."""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import urlsplit

from swerollout.store.errors import StoreConfigError
from swerollout.store.protocol import ResultStore

BACKENDS: dict[str, str] = {
    "file": "swerollout.store.filesystem:FilesystemStore",
    "s3": "swerollout.store.s3:S3Store",
}
"""Scheme -> ``module:Class``; the class has ``from_url(url, options) -> store``.
A new backend is one module and one line here."""


def open_store(url: str, **options: Any) -> ResultStore:
    """Open the store at ``url`` (``file:///data``, ``s3://bucket/prefix``).

    ``options`` are the backend's options (see ``FilesystemOptions`` / ``S3Options``);
    unknown ones are refused. Opening does no network I/O: call ``await store.check()``
    to fail fast on a missing bucket or unwritable root.
    """
    scheme = urlsplit(url).scheme.lower()
    target = BACKENDS.get(scheme)
    if target is None:
        valid = ", ".join(f"{name}://" for name in sorted(BACKENDS))
        raise StoreConfigError(f"unknown result store URL {url!r}: the scheme must be one of {valid}")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StoreConfigError(
            f"the {scheme}:// result store needs a package that is not installed ({exc.name}); "
            "install swerollout with the matching extra, e.g. swerollout[s3]"
        ) from exc
    store: ResultStore = getattr(module, class_name).from_url(url, options)
    return store
