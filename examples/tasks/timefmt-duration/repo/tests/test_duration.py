import pytest

from timefmt import format_duration, parse_duration


def test_format_seconds_only():
    assert format_duration(42) == "42s"


def test_format_minutes_and_seconds():
    assert format_duration(125) == "2m 5s"


def test_format_negative_rejected():
    with pytest.raises(ValueError):
        format_duration(-1)


def test_parse_compact():
    assert parse_duration("1h30m") == 5400


def test_parse_spaced_days():
    assert parse_duration("2d 1s") == 172801


def test_parse_garbage_rejected():
    with pytest.raises(ValueError):
        parse_duration("5 parsecs")
