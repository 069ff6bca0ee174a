"""`swerollout results` and `view --batch` against `dev up` find the environment's store
without --store-url (the shared connection options, swerollout/cli/rollouts.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from swerollout.cli.rollouts import dev_store_url
from swerollout_dev.stack.paths import DevPaths


def _args(**kw: str | None) -> argparse.Namespace:
    return argparse.Namespace(**{"kubeconfig": None, "store_url": None, "results_url": None, **kw})


def test_the_dev_kubeconfig_names_its_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = DevPaths.under(tmp_path)
    paths.root.mkdir(parents=True)
    paths.kubeconfig.write_text("apiVersion: v1\n")
    paths.state.write_text("{}")
    monkeypatch.setenv("KUBECONFIG", str(paths.kubeconfig))
    assert dev_store_url(_args()) == paths.store.as_uri()
    assert dev_store_url(_args(kubeconfig=str(paths.kubeconfig))) == f"file://{paths.root}/store"
    # an explicit store or results endpoint wins; another cluster's kubeconfig names nothing
    assert dev_store_url(_args(store_url="s3://b/p")) is None
    assert dev_store_url(_args(results_url="https://op:8081")) is None
    other = tmp_path / "kubeconfig"
    other.write_text("apiVersion: v1\n")
    assert dev_store_url(_args(kubeconfig=str(other))) is None
    monkeypatch.delenv("KUBECONFIG")
    assert dev_store_url(_args()) is None
