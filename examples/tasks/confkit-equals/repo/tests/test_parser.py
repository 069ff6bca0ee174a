import pytest

from confkit import ConfigError, get_bool, get_int, parse


def test_sections_prefix_keys():
    text = "name = demo\n[server]\nport = 8080\n"
    assert parse(text) == {"name": "demo", "server.port": "8080"}


def test_comments_and_blank_lines_ignored():
    assert parse("# top\n\n; other\nk = v\n") == {"k": "v"}


def test_quotes_removed():
    assert parse("greeting = 'hello world'") == {"greeting": "hello world"}


def test_missing_equals_names_line():
    with pytest.raises(ConfigError, match="line 2"):
        parse("a = 1\nbroken\n")


def test_get_int_and_bool():
    config = parse("workers = 4\ndebug = yes\n")
    assert get_int(config, "workers") == 4
    assert get_bool(config, "debug") is True
    assert get_int(config, "missing", 7) == 7
