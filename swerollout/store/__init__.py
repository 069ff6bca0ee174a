"""The result store: where trajectories, snapshots and eval reports live (never etcd).

``open_store(url, **options)`` returns a :class:`ResultStore`; objects are
content-addressed within their rollout's prefix ``<namespace>/<uid>/<kind>/<sha256>``.
Backends: ``file://`` (a directory, by default on a PVC) and ``s3://`` (any
S3-compatible server; needs boto3).
"""

from swerollout.store.errors import (
    IntegrityError,
    InvalidRefError,
    NotFoundError,
    StoreConfigError,
    StoreError,
    StoreUnavailable,
)
from swerollout.store.models import ObjectKind, Owner, StoredObject, StoreUsage
from swerollout.store.protocol import ResultStore
from swerollout.store.registry import BACKENDS, open_store

__all__ = [
    "BACKENDS",
    "IntegrityError",
    "InvalidRefError",
    "NotFoundError",
    "ObjectKind",
    "Owner",
    "ResultStore",
    "StoreConfigError",
    "StoreError",
    "StoreUnavailable",
    "StoreUsage",
    "StoredObject",
    "open_store",
]
