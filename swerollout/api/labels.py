"""Label values derived from object names.

A rollout's name may be up to 253 characters (a DNS subdomain), a label value at
most 63. The operator labels every pod and Secret of a rollout with
``swerollout.io/rollout=<rollout_label(name)>`` and selects them by it, so this
is the one place that maps a name to that value: the name itself when it fits
(what `kubectl get pods -l` users expect), otherwise a bounded prefix plus a hash
of the whole name (deterministic, and never an invalid selector).
"""

from __future__ import annotations

import hashlib

MAX_LABEL_VALUE = 63
_HASH_CHARS = 10


def rollout_label(name: str) -> str:
    if len(name) <= MAX_LABEL_VALUE:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
    # A label value must start and end alphanumeric: names do, and so does the digest.
    head = name[: MAX_LABEL_VALUE - _HASH_CHARS - 1].rstrip("-.")
    return f"{head}-{digest}"
