"""Convert between seconds and strings such as ``"1d 2h 3m 4s"``."""

import re

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+)\s*([dhms])")


def format_duration(seconds):
    """``3725`` -> ``"1h 2m 5s"``; zero units are left out."""
    if seconds < 0:
        raise ValueError("duration must not be negative, got %r" % seconds)
    seconds = int(seconds)
    days = seconds // 86400
    hours = seconds % 86400 // 3600
    minutes = seconds // 60
    secs = seconds % 60
    parts = []
    for value, unit in ((days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")):
        if value:
            parts.append("%d%s" % (value, unit))
    return " ".join(parts)


def parse_duration(text):
    """``"1h30m"`` or ``"1h 30m"`` -> ``5400``."""
    compact = text.replace(" ", "")
    if not compact:
        raise ValueError("empty duration")
    total = 0
    position = 0
    for match in _PART.finditer(compact):
        if match.start() != position:
            break
        total += int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(compact):
        raise ValueError("cannot parse duration %r" % text)
    return total
