"""Reading uv's lock files (`make lock`): the pins, by normalized distribution name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FULL_LOCK = ROOT / "requirements.lock"
RUNTIME_LOCK = ROOT / "requirements-runtime.lock"

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)")


def normalize(name: str) -> str:
    """PEP 503: ``Foo_Bar.baz`` and ``foo-bar-baz`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_pins(path: Path) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line (comments and ``# via`` lines skipped)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if not line or line[0] in "# -":
            continue
        match = _PIN.match(line)
        assert match, f"{path.name}: a line that is not `name==version`: {line!r}"
        name = normalize(match.group(1))
        assert name not in pins, f"{path.name}: {name} pinned twice"
        pins[name] = match.group(3)
    return pins
