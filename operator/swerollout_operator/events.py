"""Kubernetes Events about SWERollouts (what `kubectl describe swer` shows)."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from swerollout.api import v1alpha1 as api
from swerollout.kube import EVENTS, AsyncKubeClient, KubeError

from .phases import now

log = logging.getLogger(__name__)
COMPONENT = "swerollout-operator"


async def post_event(
    kube: AsyncKubeClient, meta: dict[str, Any], *, reason: str, message: str, warning: bool = False
) -> None:
    """Best effort: an Event that cannot be written never fails a reconcile."""
    at = now().isoformat().replace("+00:00", "Z")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        # Event names are bounded like any object name; a long rollout name is cut.
        "metadata": {
            "name": f"{meta['name'][:230].rstrip('-.')}.{secrets.token_hex(8)}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        },
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    }
    try:
        await kube.create(EVENTS, event, meta["namespace"])
    except KubeError as exc:
        log.warning("could not post event %s for %s/%s: %s", reason, meta["namespace"], meta["name"], exc)
