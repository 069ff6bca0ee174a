"""Operations on closed integer intervals given as ``(start, end)`` tuples."""


def _check(interval):
    start, end = interval
    if start > end:
        raise ValueError("interval start %r is after its end %r" % (start, end))
    return start, end


def merge(intervals):
    """Merge overlapping or touching intervals; the result is sorted by start.

    ``[(1, 3), (3, 5)]`` touch at 3 and become ``[(1, 5)]``.
    """
    ordered = sorted(_check(i) for i in intervals)
    merged = []
    for start, end in ordered:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def intersect(a, b):
    """The overlap of two intervals, or ``None`` when they do not meet."""
    start = max(_check(a)[0], _check(b)[0])
    end = min(a[1], b[1])
    if start > end:
        return None
    return (start, end)


def gaps(intervals, lo, hi):
    """Sub-ranges of ``[lo, hi]`` that no interval covers."""
    result = []
    cursor = lo
    for start, end in merge(intervals):
        if end < lo or start > hi:
            continue
        if start > cursor:
            result.append((cursor, start - 1))
        cursor = max(cursor, end + 1)
    if cursor <= hi:
        result.append((cursor, hi))
    return result
