"""Start a policy server: in this process (a background thread), or as a subprocess.

``launch(policy="oracle", tasks=path)`` returns a handle with ``.url`` and
``.stop()`` (also a context manager). Port 0 (the default here) picks a free port.
In-process servers share the caller's Python (fast to start when the
tokenizer are already imported); subprocess servers are what ``dev up`` runs
and what a test uses when it needs to kill the server.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

from swerollout_dev.policy_server.app import ENGINE_KEY, build_engine, create_app
from swerollout_dev.policy_server.errors import LaunchError
from swerollout_dev.policy_server.settings import ServerSettings

READY_PATTERN = re.compile(r"ready at (http://\S+)")


def ready_line(url: str, settings: ServerSettings) -> str:
    """What the CLI prints once it accepts connections (subprocess launch parses it)."""
    return (
        f"swerollout policy-server ready at {url} (policy {settings.policy}, weight version {settings.weight_version})"
    )


async def serve(
    settings: ServerSettings,
    stop: asyncio.Event,
    on_ready: Callable[[str], None],
) -> None:
    """Run the server until ``stop`` is set; ``on_ready(url)`` is called once it listens."""
    engine = await asyncio.get_running_loop().run_in_executor(None, build_engine, settings)
    app = create_app(settings, engine)
    # Cancel a handler when its client disconnects, as SGLang aborts such requests.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.host, settings.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        port = sockets[0].getsockname()[1] if sockets else settings.port
        on_ready(f"http://{settings.host}:{port}")
        await stop.wait()
    finally:
        app[ENGINE_KEY].close()
        await runner.cleanup()


class PolicyServerHandle:
    """A running policy server. ``stop()`` is idempotent."""

    url: str

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> PolicyServerHandle:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class InProcessServer(PolicyServerHandle):
    def __init__(self, settings: ServerSettings, *, ready_timeout: float) -> None:
        self.settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="policy-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(ready_timeout):
            self.stop()
            raise LaunchError(f"the in-process policy server was not ready after {ready_timeout}s")
        if self._error is not None:
            self._thread.join()
            raise LaunchError(f"the policy server failed to start: {self._error}") from self._error

    def _main(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await serve(self.settings, self._stop, self._set_ready)

        try:
            asyncio.run(run())
        except BaseException as exc:  # reported to the launching thread
            self._error = exc
        finally:
            self._ready.set()

    def _set_ready(self, url: str) -> None:
        self.url = url
        self._ready.set()

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop closed meanwhile
                pass
        self._thread.join(timeout=30)


class SubprocessServer(PolicyServerHandle):
    def __init__(self, settings: ServerSettings, *, ready_timeout: float, log_file: Path | None) -> None:
        self.settings = settings
        command = [sys.executable, "-m", "swerollout.cli.main", "policy-server", *cli_arguments(settings)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # The keys go through the environment, not the command line (which `ps` shows).
        for variable, key in (("SGLANG_API_KEY", settings.api_key), ("SGLANG_ADMIN_API_KEY", settings.admin_api_key)):
            env.pop(variable, None)
            if key:
                env[variable] = key
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._output: list[str] = []
        self._log = open(log_file, "a", encoding="utf-8") if log_file else None  # noqa: SIM115
        self._reader = threading.Thread(target=self._read, name="policy-server-output", daemon=True)
        self._reader.start()
        try:
            self.url = self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if self._log is not None:
                self._log.write(line)
                self._log.flush()
            self._lines.put(line)
        self._lines.put(None)

    def _wait_ready(self, timeout: float) -> str:
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            while not deadline.is_set():
                try:
                    line = self._lines.get(timeout=0.5)
                except queue.Empty:
                    continue
                if line is None:
                    break
                self._output.append(line)
                match = READY_PATTERN.search(line)
                if match:
                    return match.group(1)
        finally:
            timer.cancel()
        tail = "".join(self._output[-30:])
        raise LaunchError(
            f"policy server (pid {self.process.pid}) not ready after {timeout}s "
            f"(exit code {self.process.poll()}); its output:\n{tail}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None


def cli_arguments(settings: ServerSettings) -> list[str]:
    """The `swerollout policy-server` flags that reproduce these settings."""
    args = [
        "--policy",
        settings.policy,
        "--tokenizer",
        settings.tokenizer,
        "--host",
        settings.host,
        "--port",
        str(settings.port),
        "--weight-version",
        settings.weight_version,
        "--seed",
        str(settings.seed),
        "--context-length",
        str(settings.context_length),
        "--delay-per-token",
        str(settings.faults.delay_per_token),
        "--error-rate",
        str(settings.faults.error_rate),
        "--fail-next",
        str(settings.faults.fail_next),
    ]
    if settings.tasks is not None:
        args += ["--tasks", str(settings.tasks)]
    if settings.faults.abort_after_tokens is not None:
        args += ["--abort-after-tokens", str(settings.faults.abort_after_tokens)]
    if settings.oracle_ledger:
        args += ["--oracle-ledger", str(settings.oracle_ledger)]
    return args


def launch(
    policy: str = "oracle",
    *,
    subprocess: bool = False,
    ready_timeout: float = 180.0,
    log_file: Path | None = None,
    **settings: Any,
) -> PolicyServerHandle:
    """Start a policy server on a free loopback port (unless ``port=`` says otherwise).

    Keyword arguments are ServerSettings fields (tasks, tokenizer, weight_version,
    seed, context_length, faults={...}, host, port).
    """
    settings.setdefault("port", 0)
    config = ServerSettings(policy=policy, **settings)
    if subprocess:
        return SubprocessServer(config, ready_timeout=ready_timeout, log_file=log_file)
    return InProcessServer(config, ready_timeout=ready_timeout)
