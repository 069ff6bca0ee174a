import pytest

from spanlib import gaps, intersect, merge


def test_merge_empty():
    assert merge([]) == []


def test_merge_overlapping_unsorted():
    assert merge([(6, 8), (1, 4), (2, 5)]) == [(1, 5), (6, 8)]


def test_merge_rejects_reversed_interval():
    with pytest.raises(ValueError):
        merge([(3, 1)])


def test_intersect_overlap():
    assert intersect((1, 5), (4, 9)) == (4, 5)


def test_intersect_disjoint():
    assert intersect((1, 2), (4, 9)) is None


def test_gaps_between_intervals():
    assert gaps([(2, 3), (6, 7)], 0, 9) == [(0, 1), (4, 5), (8, 9)]
