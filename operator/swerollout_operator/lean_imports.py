"""Import kopf without the `kubernetes` package; imported first by the operator's entry point.

kopf imports `kubernetes` if it is installed, to recognise its model objects when they
are passed to kopf's helpers (we never pass any), and its default registry does, to
offer the package's login as a fallback (we have our own login handler). That import is 45 MB of the
operator's memory (1,100 modules), and in a cluster nothing else needs it: the
in-cluster identity is read by swerollout.kube.config itself. A kubeconfig is still read
by the `kubernetes` package's loader (exec plugins), which imports it then, as usual.
"""

from __future__ import annotations

import sys

if "kopf" not in sys.modules and "kubernetes" not in sys.modules:
    # A None entry makes `import kubernetes` raise ImportError, which kopf takes as "not installed".
    sys.modules["kubernetes"] = None  # type: ignore[assignment]
    try:
        import kopf

        kopf.get_default_registry()  # created now, while `kubernetes` reads as absent
    finally:
        if "kubernetes" in sys.modules and sys.modules["kubernetes"] is None:
            del sys.modules["kubernetes"]
