"""Kubernetes resource quantities (`500m`, `2Gi`, `2`, `1e3`), as core/v1 reads them.

The API server checks the same grammar (the regex below, as a CEL rule) and
compares requests with limits with CEL's `quantity()`; this module is the
Python half, so the client refuses what the API server would refuse.
Resource quantities are never negative, so the sign core/v1's grammar allows
is not accepted here.
"""

from __future__ import annotations

import re
from fractions import Fraction

# <number><suffix>: digits with an optional fraction, then a binary-SI suffix, a
# decimal-SI suffix or a decimal exponent (k8s.io/apimachinery resource.Quantity).
PATTERN = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$"
_QUANTITY = re.compile(PATTERN)
_SUFFIX = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}

# Resource names core/v1 knows without a domain; anything else must be an extended
# resource with a domain prefix (`nvidia.com/gpu`), so a typo like `memroy` is refused.
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"
EXTENDED_RESOURCE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_EXTENDED = re.compile(EXTENDED_RESOURCE)


class QuantityError(ValueError):
    pass


def is_quantity(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and _QUANTITY.match(value) is not None


def parse(value: int | str) -> Fraction:
    """The quantity's exact value (cores, bytes, or the resource's unit)."""
    if not is_quantity(value):
        raise QuantityError(f"{value!r} is not a non-negative quantity such as 500m, 2, 1.5Gi or 1e3")
    if isinstance(value, int):
        return Fraction(value)
    match = _QUANTITY.match(value)
    assert match is not None
    number, suffix = match.group(1), match.group(3) or ""
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return Fraction(number) * Fraction(10) ** int(suffix[1:])
    return Fraction(number) * _SUFFIX[suffix]


def is_resource_name(name: str) -> bool:
    if name in STANDARD_RESOURCES:
        return True
    if name.startswith(HUGEPAGES_PREFIX):
        return is_quantity(name[len(HUGEPAGES_PREFIX) :])
    return _EXTENDED.match(name) is not None and not name.split("/", 1)[0].endswith("kubernetes.io")
