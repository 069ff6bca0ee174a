"""Chaos on the embedded default: one small batch per fault, every rollout finishes
with its reward, nothing runs twice.

The policy is the oracle (its patch resolves every bundled task, reward 1), slowed
down per token so that each fault lands while the batch is generating. The operator
being SIGKILLed mid-batch is in test_e2e_lifecycle.py (five kills over 20 rollouts).
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from swerollout.dev.policy_server.launch import SubprocessServer, launch
from swerollout.wire.trajectory import Trajectory
from tests.support.devstack import DevStack, dump

TERMINAL = {"Succeeded", "Failed"}
# The first test also pays for the module's stack and two policy servers (minutes on a loaded machine).
pytestmark = pytest.mark.timeout(2400)
# Slow enough that a batch is still generating when the fault lands, fast enough to finish.
SLOW = {"delay_per_token": 0.03}


class Policy:
    """The oracle behind a loopback forwarder (the rollouts' endpoint), with a standby.

    A cold start of the policy server takes a minute and more on a loaded 2-core
    machine, so "restart within 30 s" is modelled as a real SIGKILL of the serving
    process (its in-flight requests die with it), the endpoint refusing connections
    for a while, then the same endpoint served by a second, already started process.
    """

    def __init__(self, tasks: Path, logs: Path) -> None:
        launched: dict[str, SubprocessServer] = {}

        def start(role: str) -> None:
            server = launch("oracle", subprocess=True, tokenizer="qwen-2.5", tasks=tasks, faults=SLOW,
                            log_file=logs / f"chaos-policy-{role}.log", ready_timeout=900)
            assert isinstance(server, SubprocessServer)
            launched[role] = server

        threads = [threading.Thread(target=start, args=(role,)) for role in ("serving", "standby")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.serving, self.standby = launched["serving"], launched["standby"]
        self.forwarder = Forwarder(_port(self.serving.url))
        self.url = f"http://127.0.0.1:{self.forwarder.port}"

    def kill(self) -> None:
        self.forwarder.route(None)
        os.kill(self.serving.pid, signal.SIGKILL)
        self.serving.process.wait(timeout=30)

    def start_again(self) -> None:
        self.serving, self.standby = self.standby, self.serving
        self.forwarder.route(_port(self.serving.url))

    def stop(self) -> None:
        self.forwarder.close()
        for server in (self.serving, self.standby):
            server.stop()


class Forwarder:
    """A loopback TCP forwarder whose upstream can be switched or cut (connections then close at once)."""

    def __init__(self, upstream: int | None) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def route(self, upstream: int | None) -> None:
        self.upstream = upstream

    def close(self) -> None:
        self._closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = self.upstream
            try:
                if upstream is None:
                    raise OSError("no upstream")
                server = socket.create_connection(("127.0.0.1", upstream), timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def policy(dev_stack: DevStack) -> Iterator[Policy]:
    server = Policy(dev_stack.workdir / "tasks" / "instances.jsonl", dev_stack.paths.logs)
    try:
        yield server
    finally:
        server.stop()


def _batch(stack: DevStack, batch: str, endpoint: str, size: int = 2) -> list[str]:
    names = [f"{batch}-{i}" for i in range(size)]
    for i, name in enumerate(names):
        stack.rollout(name, endpoint=endpoint, task=i % len(stack.instances), batch=batch)
    return names


def _generating(stack: DevStack, names: list[str], timeout: float = 600) -> None:
    stack.wait(f"{names} running", lambda: all(stack.status(n).get("phase") == "Running" for n in names), timeout)


def _all_rewarded(stack: DevStack, names: list[str], timeout: float = 600) -> list[dict[str, Any]]:
    """Every rollout Succeeded with reward 1, on its first pod, each sampled turn kept once."""
    finals = [stack.wait_phase(name, TERMINAL, timeout=timeout) for name in names]
    for name, status in zip(names, finals):
        assert status["phase"] == "Succeeded", (name, dump(status))
        assert status["reward"]["value"] == 1.0 and status["reward"]["resolved"] is True, (name, dump(status))
        assert status["attempts"] == 1, (name, dump(status))
        trajectory = Trajectory.from_bytes(stack.read_object(status["result"]["trajectory"]))
        kept = [t for t in trajectory.info["turn_log"] if t["kept"]]
        rids = [t["rid"] for t in trajectory.info["turn_log"]]
        assert len(set(rids)) == len(rids), f"{name}: a request id was used twice: {rids}"
        assert len(kept) == status["result"]["turns"] == trajectory.turns, (name, dump(status))
    return finals


def _component_restarted(stack: DevStack, name: str, old_pid: int) -> Callable[[], bool]:
    def probe() -> bool:
        component = stack.state().components[name]
        return component.pid not in (None, old_pid) and component.alive()

    return probe


def test_policy_server_killed_and_back_within_30s(dev_stack: DevStack, policy: Policy) -> None:
    names = _batch(dev_stack, "chaos-policy", policy.url)
    _generating(dev_stack, names)
    policy.kill()
    down_at = time.monotonic()
    # Down long enough that the runners' quick retries are spent and the outage budget rides it out.
    time.sleep(12)
    policy.start_again()
    assert time.monotonic() - down_at < 30
    finals = _all_rewarded(dev_stack, names)
    assert all(not f.get("partial") for f in finals), "an outage is not an abort of the rollout"


def test_store_failing_for_10s(dev_stack: DevStack, policy: Policy) -> None:
    names = _batch(dev_stack, "chaos-store", policy.url)
    _generating(dev_stack, names)
    store = dev_stack.store_dir
    away = store.with_name("store-away")
    # A file where the store's directory was: every read and write fails (root ignores modes).
    store.rename(away)
    store.write_text("the store is down")
    try:
        time.sleep(10)
    finally:
        store.unlink()
        away.rename(store)
    _all_rewarded(dev_stack, names)


def test_node_agent_restarted(dev_stack: DevStack, policy: Policy) -> None:
    names = _batch(dev_stack, "chaos-node", policy.url)
    _generating(dev_stack, names)
    agent = dev_stack.state().components["node-agent"]
    assert agent.pid
    os.kill(agent.pid, signal.SIGKILL)
    dev_stack.wait("node agent restarted", _component_restarted(dev_stack, "node-agent", agent.pid), timeout=120)
    _all_rewarded(dev_stack, names)


def test_api_server_unavailable_for_10s(dev_stack: DevStack, policy: Policy) -> None:
    """The API server stops answering (SIGSTOP) while the batch runs, then comes back."""
    names = _batch(dev_stack, "chaos-api", policy.url)
    _generating(dev_stack, names)
    server = dev_stack.state().components["kube-apiserver"]
    assert server.pid
    os.kill(server.pid, signal.SIGSTOP)
    try:
        time.sleep(10)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    _all_rewarded(dev_stack, names)


def test_an_outage_past_its_budget_fails_the_rollout_naming_the_cause(dev_stack: DevStack) -> None:
    """The other side of the budget: the server is not back within it."""
    from swerollout.client.progress import member_state
    from swerollout.client.records import TrainerStatus

    name = "chaos-gone-0"
    dev_stack.rollout(name, endpoint=f"http://127.0.0.1:{_free_port()}", batch="chaos-gone",
                      inference={"outageBudgetSeconds": 5})
    status = dev_stack.wait_phase(name, TERMINAL, timeout=600)
    assert status["phase"] == "Failed", dump(status)
    assert status["result"]["exitStatus"] == "exit_api", dump(status)
    assert "spec.inference.outageBudgetSeconds (5 s)" in status["message"], dump(status)
    obj = dev_stack.get(name)
    assert obj is not None and member_state(obj).status is TrainerStatus.FAILED
    events = dev_stack.kubectl("get", "events", "-n", "default", "--field-selector", f"involvedObject.name={name}",
                               "-o", "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}")
    assert "InferenceFailed" in events.stdout.split(), events.stdout + events.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
