"""The SWERollout API (v1alpha1): models shared by the operator, the runner and the client."""

from .v1alpha1 import *  # noqa: F401,F403
