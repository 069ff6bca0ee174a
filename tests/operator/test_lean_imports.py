"""The operator's process imports kopf without the `kubernetes` package (45 MB of memory)."""

from __future__ import annotations

import subprocess
import sys


def test_the_operator_entry_point_leaves_kubernetes_unimported_and_importable() -> None:
    code = (
        "import sys; import swerollout_operator.__main__; "
        "from kopf._cogs.helpers import thirdparty; "
        "print('kubernetes' in sys.modules, thirdparty.V1ObjectMetaSync is None, "
        "any(h.id == 'login_via_client' for h in __import__('kopf').get_default_registry()._activities.get_all_handlers())); "
        # A --kubeconfig is still read by the package's loader, imported on demand.
        "import kubernetes.config; print('kubernetes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "False", "True"]
