"""Errors of the node agent. Each says whether trying again can help."""

from __future__ import annotations


class NodeAgentError(Exception):
    """Root of every node-agent error."""

    retryable: bool = False


class ContainerConfigError(NodeAgentError):
    """The pod spec asks for something this node cannot run (fix the pod spec).

    ``reason`` is the Kubernetes-style waiting reason shown in containerStatuses.
    """

    def __init__(self, message: str, *, reason: str = "CreateContainerConfigError") -> None:
        super().__init__(message)
        self.reason = reason


class ImageError(ContainerConfigError):
    """The image name maps to nothing this node can run (fix the image name)."""

    def __init__(self, message: str, *, reason: str = "ErrImagePull") -> None:
        super().__init__(message, reason=reason)


class ReferenceNotFound(ContainerConfigError):
    """A Secret/ConfigMap (or a key in it) the pod refers to does not exist yet.

    Retryable: the kubelet keeps retrying until the object appears.
    """

    retryable = True
