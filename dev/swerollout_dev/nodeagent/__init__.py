"""The local node agent: plays the kubelet's part on a machine with no kubelet.

It registers a Node, binds pending pods that tolerate its taint, and runs each
pod's containers as local processes (inside bubblewrap when it is installed).
See docs/dev-mode.md for how images, volumes, isolation and logs map to a
single machine.
"""

from .config import NodeAgentConfig
from .errors import NodeAgentError

__all__ = ["NodeAgentConfig", "NodeAgentError"]
