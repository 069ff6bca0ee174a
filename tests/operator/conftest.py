"""The operator, installed with the chart and running under the chart's ServiceAccount.

The fixtures live in tests.support.operator so that other test folders can use them
without importing this conftest.
"""

from tests.support.operator import crd, kubectl, operator

__all__ = ["crd", "kubectl", "operator"]
