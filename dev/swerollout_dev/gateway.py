"""Run smg (SGLang's gateway, the ``smg`` wheel from PyPI) in front of stand-in engines.

``launch_gateway(worker_urls)`` starts ``smg launch`` on loopback with the flags a rollout
fleet needs (docs/sglang-protocol.md, "Fleets"): routing on the rollout's routing key
(``--policy consistent_hashing``, ``--routing-key-headers x-smg-routing-key``), the RL
control plane (``--enable-rl``) for fan-out aborts and pauses, no tokenizer download
(``--disable-tokenizer-autoload``), and its metrics port on loopback too. It returns once
smg lists every worker as healthy.

smg probes each worker at registration and retries a failed probe only after 30 s, so
start it after the engines answer ``/health``.

smg takes its ``--api-key`` (which it requires of every caller and sends to the engines) only
on its command line, which every user of the machine sees in ``ps``; ``python -m
swerollout_dev.gateway ARGS`` runs smg's own launcher with the key read from
``SWEROLLOUT_GATEWAY_API_KEY`` instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from swerollout.wire.smg import ROUTING_KEY_HEADER, GatewayWorkers
from swerollout_dev.controlplane import free_port

SMG_VERSION = "1.13.0"
"""The smg release these flags were read from (``smg launch --help``) and tested with."""

POLICIES = ("consistent_hashing", "round_robin", "cache_aware", "prefix_hash", "random")
"""smg's routing policies worth picking here; consistent_hashing is the one keyed on the
routing key header."""


class GatewayError(RuntimeError):
    """smg is missing, or did not come up."""


KEY_ENV = "SWEROLLOUT_GATEWAY_API_KEY"


def _check_installed() -> None:
    try:
        import smg.launch_router  # noqa: F401
    except ImportError as exc:
        raise GatewayError(
            f"smg is not installed: pip install smg=={SMG_VERSION} (swerollout-dev's dependencies pin it), "
            "or leave out --gateway"
        ) from exc


class GatewayHandle:
    """A running smg. ``stop()`` is idempotent; also a context manager."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, workers: list[str], log_file: Path | None) -> None:
        self.process = process
        self.url = url
        self.workers = workers
        self.log_file = log_file

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> GatewayHandle:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def gateway_command(
    worker_urls: list[str], *, port: int, metrics_port: int, policy: str, enable_rl: bool, host: str = "127.0.0.1"
) -> list[str]:
    """The ``smg launch`` command line (every flag checked against smg 1.13.0's --help)."""
    if policy not in POLICIES:
        raise GatewayError(f"unknown gateway policy {policy!r}; valid: {', '.join(POLICIES)}")
    command = [
        sys.executable,
        "-m",
        "swerollout_dev.gateway",
        "--host",
        host,
        "--port",
        str(port),
        "--prometheus-host",
        host,
        "--prometheus-port",
        str(metrics_port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        policy,
        "--routing-key-headers",
        ROUTING_KEY_HEADER,
        "--disable-tokenizer-autoload",
        "--shutdown-grace-period-secs",
        "2",
        "--log-level",
        "warn",
    ]
    if enable_rl:
        command.append("--enable-rl")
    return command


def launch_gateway(
    worker_urls: list[str],
    *,
    policy: str = "consistent_hashing",
    enable_rl: bool = True,
    host: str = "127.0.0.1",
    port: int = 0,
    log_file: Path | None = None,
    ready_timeout: float = 90.0,
    api_key: str | None = None,
) -> GatewayHandle:
    """Start smg in front of ``worker_urls`` (engines already up); returns once it lists
    every one of them as healthy. Port 0 picks a free one. ``api_key``: smg's ``--api-key``
    (callers must send it; smg sends it to the engines, so it must open their admin routes)."""
    _check_installed()
    if not worker_urls:
        raise GatewayError("the gateway needs at least one engine URL")
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise GatewayError(f"the dev gateway listens on loopback only, not {host!r}")
    port = port or free_port()
    command = gateway_command(
        worker_urls, port=port, metrics_port=free_port(), policy=policy, enable_rl=enable_rl, host=host
    )
    output = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115
    try:
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        if api_key:
            env[KEY_ENV] = api_key
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    finally:
        if log_file:
            output.close()  # type: ignore[union-attr]
    handle = GatewayHandle(process, f"http://{host}:{port}", list(worker_urls), log_file)
    try:
        wait_ready(handle.url, len(worker_urls), ready_timeout, api_key=api_key, process=process, log_file=log_file)
    except BaseException:
        handle.stop()
        raise
    return handle


def wait_ready(
    url: str,
    expected: int,
    timeout: float,
    *,
    api_key: str | None = None,
    process: subprocess.Popen[bytes] | None = None,
    log_file: Path | None = None,
) -> None:
    """Return once the smg at ``url`` lists ``expected`` healthy workers; GatewayError when
    ``process`` exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=2.0, headers=headers) as http:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise GatewayError(
                    f"smg exited with code {process.returncode}" + (f"; its log: {log_file}" if log_file else "")
                )
            try:
                response = http.get(f"{url}/workers")
                if response.status_code == 200:
                    workers = GatewayWorkers.model_validate_json(response.content).workers
                    healthy = [w for w in workers if w.is_healthy]
                    last = f"{len(healthy)} of {expected} workers healthy"
                    if len(healthy) >= expected:
                        return
                else:
                    last = f"/workers answered HTTP {response.status_code}"
            except httpx.TransportError as exc:
                last = repr(exc)
            time.sleep(0.2)
    raise GatewayError(f"smg at {url} not ready after {timeout:.0f}s ({last})")


def main(argv: list[str] | None = None) -> None:
    """``python -m swerollout_dev.gateway SMG-LAUNCH-ARGS``: smg's launcher, its ``--api-key``
    from ``$SWEROLLOUT_GATEWAY_API_KEY`` (never an argument)."""
    from smg.launch_router import launch_router, parse_router_args

    args = parse_router_args(list(sys.argv[1:] if argv is None else argv))
    args.api_key = os.environ.get(KEY_ENV) or None
    launch_router(args)


if __name__ == "__main__":
    main()
