"""Fixtures of the trainer-client tests: the CRD in the session control plane, a file://
result store per test, and a client pointed at both (one home: tests/support/client_fixtures.py)."""

from tests.support.client_fixtures import client, crd, keyed_server, server_aborts, store, store_url

__all__ = ["client", "crd", "keyed_server", "server_aborts", "store", "store_url"]
