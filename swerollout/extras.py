"""The optional parts of the install: which extra brings which package, and the one error
a command gives when its extra is missing.

The library a trainer installs (`pip install swerollout`) is light on purpose; a command
that needs more imports it through `require`, so a missing package is one line naming the
extra to install, never a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    """A package an optional feature needs is not installed; installing the extra fixes it."""

    def __init__(self, module: str, extra: str, needed_for: str) -> None:
        self.extra = extra
        super().__init__(
            f"{needed_for} needs {module.split('.')[0]}, which is not installed: "
            f"pip install 'swerollout[{extra}]' (from a checkout: pip install -e '.[{extra}]')",
            name=module,
        )


def require(module: str, extra: str, needed_for: str) -> ModuleType:
    """Import ``module``, or raise MissingExtra naming ``extra`` and what needed it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        # Only the package itself being absent is the extra's fault; a broken install
        # of it (a missing shared library) keeps its own message.
        if exc.name is not None and module.split(".")[0] == exc.name.split(".")[0]:
            raise MissingExtra(module, extra, needed_for) from None
        raise
