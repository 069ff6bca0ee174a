"""API keys as SGLang decides them: admin routes need the admin key, others the API key, /health* is open."""

from __future__ import annotations

import httpx

from swerollout_dev.policy_server.app import FAULTS_ROUTE
from swerollout_dev.policy_server.auth import ADMIN_ROUTES, allowed


def test_sglang_decision_table() -> None:
    bearer = "Bearer k"
    for route in ADMIN_ROUTES:
        assert allowed("POST", route, None, api_key=None, admin_api_key=None)  # no keys: open, as SGLang
        assert not allowed("POST", route, None, api_key=None, admin_api_key="k")
        assert not allowed("POST", route, "Bearer other", api_key=None, admin_api_key="k")
        assert allowed("POST", route, bearer, api_key=None, admin_api_key="k")
        assert allowed("POST", route, "bearer k", api_key=None, admin_api_key="k")
        assert not allowed("POST", route, "Bearer a", api_key="a", admin_api_key="k")  # the API key does not open them
        assert allowed("POST", route, "Bearer a", api_key="a", admin_api_key=None)  # only an API key: it does
    assert allowed("POST", "/generate", None, api_key=None, admin_api_key="k")  # admin key only: normal routes open
    assert not allowed("POST", "/generate", "Bearer k", api_key="a", admin_api_key="k")
    assert allowed("POST", "/generate", "Bearer a", api_key="a", admin_api_key="k")
    assert allowed("GET", "/health_generate", None, api_key="a", admin_api_key="k")


def test_admin_routes_need_the_admin_key_over_http(policy_server) -> None:  # type: ignore[no-untyped-def]
    server = policy_server("null", admin_api_key="adm1n")
    with httpx.Client(base_url=server.url, timeout=60) as http:
        for path, body in (
            ("/abort_request", {"rid": "x"}),
            ("/pause_generation", {}),
            ("/update_weights_from_disk", {"model_path": "/nonexistent"}),
            ("/flush_cache", {}),
        ):
            refused = http.post(path, json=body)
            assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}, path
        assert http.get(FAULTS_ROUTE).status_code == 401
        assert http.post("/continue_generation", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert (
            http.post("/abort_request", json={"rid": "x"}, headers={"Authorization": "Bearer adm1n"}).status_code == 200
        )
        assert http.get("/health").status_code == 200
        assert http.get("/get_model_info").status_code == 200  # normal routes stay open without an API key
        info = http.get("/get_server_info")
        assert info.status_code == 200 and "adm1n" not in info.text  # an open route never shows a key
