"""Choosing a backend by URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from swerollout.store import BACKENDS, ResultStore, StoreConfigError, open_store
from swerollout.store.filesystem import FilesystemStore
from swerollout.store.s3 import S3Store


def test_backends_are_chosen_by_scheme(tmp_path: Path) -> None:
    fs = open_store(tmp_path.as_uri())
    s3 = open_store("s3://bucket/some/prefix", region="us-east-1", access_key_id="k", secret_access_key="s")
    assert isinstance(fs, FilesystemStore)
    assert isinstance(s3, S3Store)
    assert isinstance(fs, ResultStore)
    assert isinstance(s3, ResultStore)
    assert s3.url == "s3://bucket/some/prefix"
    assert fs.url == tmp_path.resolve().as_uri()


def test_an_unknown_scheme_lists_the_valid_ones() -> None:
    assert set(BACKENDS) == {"file", "s3"}
    for url in ("gs://bucket", "/data", "data", ""):
        with pytest.raises(StoreConfigError, match=r"the scheme must be one of file://, s3://"):
            open_store(url)


def test_unknown_options_are_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="fsnyc"):
        open_store(tmp_path.as_uri(), fsnyc=False)
    with pytest.raises(StoreConfigError, match="endpoint"):
        open_store("s3://bucket", endpoint="http://x")


def test_the_scheme_is_case_insensitive(tmp_path: Path) -> None:
    assert isinstance(open_store("S3://bucket", region="us-east-1"), S3Store)
