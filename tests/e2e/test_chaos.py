"""Chaos on the embedded default: one small batch per fault, every rollout finishes
with its reward, nothing runs twice.

The policy is the oracle (its patch resolves every bundled task, reward 1), slowed
down per token so that each fault lands while the batch is generating. Before its fix
it runs LEDGER commands, each appending its step to a file in the repository, so the
submitted patch shows how many times each command ran: exactly once, whatever the
fault. It is served with the dev stack's admin key, which the rollouts' runners get
from the dev Secret (spec.inference.adminKeySecretRef). The operator being SIGKILLed
mid-batch is in test_e2e_lifecycle.py (five kills over 20 rollouts).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from swerollout.kube import PODS
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.policy_server.launch import SubprocessServer, launch
from tests.support.checkpoints import ledger_runs, restored_snapshot
from tests.support.devstack import DevStack, dump

TERMINAL = {"Succeeded", "Failed"}
# The first test also pays for the module's stack and two policy servers (minutes on a loaded machine).
pytestmark = pytest.mark.timeout(2400)
# Slow enough that a batch is still generating when the fault lands, fast enough to finish.
SLOW = {"delay_per_token": 0.03}
LEDGER = 3


class Policy:
    """The oracle behind a loopback forwarder (the rollouts' endpoint), with a standby.

    A cold start of the policy server takes a minute and more on a loaded 2-core
    machine, so "restart within 30 s" is modelled as a real SIGKILL of the serving
    process (its in-flight requests die with it), the endpoint refusing connections
    for a while, then the same endpoint served by a second, already started process.
    """

    def __init__(self, tasks: Path, logs: Path, admin_key: str) -> None:
        launched: dict[str, SubprocessServer] = {}

        def start(role: str) -> None:
            server = launch(
                "oracle",
                subprocess=True,
                tokenizer="qwen-2.5",
                tasks=tasks,
                faults=SLOW,
                oracle_ledger=LEDGER,
                admin_api_key=admin_key,
                log_file=logs / f"chaos-policy-{role}.log",
                ready_timeout=900,
            )
            assert isinstance(server, SubprocessServer)
            launched[role] = server

        threads = [threading.Thread(target=start, args=(role,)) for role in ("serving", "standby")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.serving, self.standby = launched["serving"], launched["standby"]
        self.admin_key = admin_key
        self._logs = {server.pid: logs / f"chaos-policy-{role}.log" for role, server in launched.items()}
        self.forwarder = Forwarder(_port(self.serving.url))
        self.url = f"http://127.0.0.1:{self.forwarder.port}"

    def log_of(self, server: SubprocessServer) -> Path:
        return self._logs[server.pid]

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
    server = Policy(
        dev_stack.workdir / "tasks" / "instances.jsonl",
        dev_stack.paths.logs,
        dev_stack.paths.inference_admin_key.read_text().strip(),
    )
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


def _in_flight(url: str) -> int:
    return int(httpx.get(f"{url}/v1/loads", timeout=10).json()["loads"][0]["num_running_reqs"])


def _admitted(url: str) -> dict[str, int]:
    """rid -> tokens sent, of the /generate requests a stand-in admitted (its request log)."""
    requests = httpx.get(f"{url}/_standin/requests", timeout=10).json()["requests"]
    return {r["rid"]: r["sent_tokens"] for r in requests}


def _set_delay(url: str, admin_key: str, seconds: float) -> None:
    """The stand-in's per-token delay; it applies to the tokens of requests in flight too."""
    headers = {"Authorization": f"Bearer {admin_key}"}
    httpx.post(
        f"{url}/_standin/faults", json={"delay_per_token": seconds}, headers=headers, timeout=10
    ).raise_for_status()


def _run_of(rid: str) -> str:
    """The run (rollout uid) of a runner's rid `<uid>-t0007-a01-<8 hex>.` (agent_runner.policy.sglang.make_rid)."""
    found = re.fullmatch(r"(.+)-t\d{4}-a\d{2}-[0-9a-f]{8}\.", rid)
    assert found, rid
    return found.group(1)


def _all_rewarded(
    stack: DevStack, names: list[str], timeout: float = 600, *, allow_partial: bool = False
) -> dict[str, Trajectory]:
    """Every rollout Succeeded with reward 1, on its first and only pod, each sampled turn
    kept once, and each of the policy's commands run exactly once (the ledger in the patch)."""
    finals = [stack.wait_phase(name, TERMINAL, timeout=timeout) for name in names]
    trajectories = {}
    for name, status in zip(names, finals):
        assert status["phase"] == "Succeeded", f"{name}: {dump(status)}"
        assert status["reward"]["value"] == 1.0 and status["reward"]["resolved"] is True, f"{name}: {dump(status)}"
        assert status["attempts"] == 1 and status["sandbox"]["podName"] == f"{name}-a1", f"{name}: {dump(status)}"
        assert allow_partial or not status.get("partial"), f"{name}: an outage is not an abort of the rollout"
        trajectory = Trajectory.from_bytes(stack.read_object(status["result"]["trajectory"]))
        kept = [t for t in trajectory.info["turn_log"] if t["kept"]]
        rids = [t["rid"] for t in trajectory.info["turn_log"]]
        assert len(set(rids)) == len(rids), f"{name}: a request id was used twice: {rids}"
        assert len(kept) == status["result"]["turns"] == trajectory.turns, f"{name}: {dump(status)}"
        patch = stack.read_object(status["result"]["patch"]).decode()
        assert ledger_runs(patch) == [f"step {i}" for i in range(LEDGER)], f"{name}: commands ran\n{patch}"
        trajectories[name] = trajectory
    return trajectories


def _component_restarted(stack: DevStack, name: str, old_pid: int) -> Callable[[], bool]:
    def probe() -> bool:
        component = stack.state().components[name]
        return component.pid not in (None, old_pid) and component.alive()

    return probe


def test_policy_server_killed_and_back_within_30s(dev_stack: DevStack, policy: Policy) -> None:
    """SIGKILLed while a /generate is in flight: that request dies with the server, and
    its turn is sent again (a new rid for the same turn) to the server that comes back."""
    names = _batch(dev_stack, "chaos-policy", policy.url)
    killed_server, standby = policy.serving.url, policy.standby.url
    dev_stack.wait("a /generate in flight", lambda: _in_flight(killed_server) >= 1, timeout=600)
    admitted = _admitted(killed_server)
    policy.kill()
    down_at = time.monotonic()
    # Down long enough that the runners' quick retries are spent and the outage budget rides it out.
    time.sleep(12)
    policy.start_again()
    assert time.monotonic() - down_at < 30
    trajectories = _all_rewarded(dev_stack, names)
    kept = {t["rid"] for tr in trajectories.values() for t in tr.info["turn_log"] if t["kept"]}
    lost = {rid: sent for rid, sent in admitted.items() if rid not in kept}
    assert lost, f"no request was in flight at the kill: {admitted}"
    served_after = _admitted(standby)
    for rid, sent in lost.items():
        # The same run sent the same context again (a new rid) and kept that answer.
        again = [r for r, n in served_after.items() if _run_of(r) == _run_of(rid) and n == sent and r in kept]
        assert again, f"the turn of {rid} ({sent} tokens) was not sent again: {served_after}"


def test_suspend_aborts_by_rid_with_the_admin_key_and_runs_each_command_once(
    dev_stack: DevStack, policy: Policy
) -> None:
    """The policy server requires its admin key for /abort_request: the runner's exact-rid
    abort carries the key from the Secret its spec names (adminKeySecretRef), the server
    accepts it, and the resumed run finishes with every command run once."""
    [name] = _batch(dev_stack, "chaos-keys", policy.url, size=1)
    obj = dev_stack.get(name)
    assert obj is not None
    assert obj["spec"]["inference"]["adminKeySecretRef"]["name"] == "swerollout-inference-keys"
    server, uid = policy.serving, obj["metadata"]["uid"]

    def own() -> set[str]:
        return {rid for rid in _admitted(server.url) if rid.startswith(f"{uid}-t")}

    # The fix's turn (after the ledger's) is in flight: slow it down so the abort finds it running.
    dev_stack.wait("the fix in flight", lambda: len(own()) > LEDGER and _in_flight(server.url) >= 1, timeout=600)
    _set_delay(server.url, policy.admin_key, 1.0)
    try:
        in_flight = own()
        dev_stack.set_suspend(name, True)
        dev_stack.wait_phase(name, {"Aborted"}, timeout=300)
    finally:
        _set_delay(server.url, policy.admin_key, SLOW["delay_per_token"])
    log = Path(policy.log_of(server)).read_text()
    aborted = re.findall(r"abort rid='([^']+)' all=False matched=1", log)
    assert set(aborted) & in_flight, f"no exact-rid abort of {in_flight} was accepted:\n{log[-3000:]}"
    dev_stack.set_suspend(name, False)
    _all_rewarded(dev_stack, [name], allow_partial=True)


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


def test_api_server_killed_and_restarted(dev_stack: DevStack, policy: Policy) -> None:
    """kube-apiserver SIGKILLed mid-batch; the dev supervisor starts it again (same port,
    certificates and etcd data). The operator's and the node agent's watches reconnect
    (and relist), the runners' reports are retried: every rollout finishes once."""
    names = _batch(dev_stack, "chaos-api", policy.url)
    dev_stack.wait("a /generate in flight", lambda: _in_flight(policy.serving.url) >= 1, timeout=600)
    server = dev_stack.state().components["kube-apiserver"]
    assert server.pid
    os.kill(server.pid, signal.SIGKILL)
    dev_stack.wait(
        "kube-apiserver restarted", _component_restarted(dev_stack, "kube-apiserver", server.pid), timeout=300
    )
    _all_rewarded(dev_stack, names)


def test_an_outage_past_its_budget_fails_the_rollout_naming_the_cause(dev_stack: DevStack) -> None:
    """The other side of the budget: the server is not back within it."""
    from swerollout.client.progress import member_state
    from swerollout.client.records import TrainerStatus

    name = "chaos-gone-0"
    dev_stack.rollout(
        name, endpoint=f"http://127.0.0.1:{_free_port()}", batch="chaos-gone", inference={"outageBudgetSeconds": 5}
    )
    status = dev_stack.wait_phase(name, TERMINAL, timeout=600)
    assert status["phase"] == "Failed", dump(status)
    assert status["result"]["exitStatus"] == "exit_api", dump(status)
    assert "spec.inference.outageBudgetSeconds (5 s)" in status["message"], dump(status)
    obj = dev_stack.get(name)
    assert obj is not None and member_state(obj).status is TrainerStatus.FAILED
    events = dev_stack.kubectl(
        "get",
        "events",
        "-n",
        "default",
        "--field-selector",
        f"involvedObject.name={name}",
        "-o",
        'jsonpath={range .items[*]}{.reason}{"\\n"}{end}',
    )
    assert "InferenceFailed" in events.stdout.split(), events.stdout + events.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_pod_killed_mid_turn_resumes_from_its_checkpoint(dev_stack: DevStack, policy: Policy) -> None:
    """The rollout pod is deleted while a /generate is in flight, after some turns were
    checkpointed: a fresh pod continues from the last checkpoint, the token list before the
    loss is exactly the checkpoint's, the interrupted turn is sampled again, every command
    still ran once, and the rollout gets its reward."""
    [name] = _batch(dev_stack, "chaos-podkill", policy.url, size=1)
    uid = (dev_stack.get(name) or {})["metadata"]["uid"]

    def checkpointed_and_generating() -> bool:
        own = [rid for rid in _admitted(policy.serving.url) if rid.startswith(f"{uid}-t")]
        checkpoint = dev_stack.status(name).get("checkpoint") or {}
        return (
            checkpoint.get("turns", 0) >= 2
            and len(own) > checkpoint.get("turns", 0)
            and bool(_in_flight(policy.serving.url))
        )

    dev_stack.wait("a checkpoint and a turn in flight", checkpointed_and_generating, timeout=600)
    pod = dev_stack.status(name)["sandbox"]["podName"]
    log = policy.log_of(policy.serving)
    before = len(log.read_text())
    dev_stack.kube.delete(PODS, pod, "default")
    final = dev_stack.wait_phase(name, TERMINAL, timeout=600)
    # The runner's SIGTERM (the graceful delete) ended its in-flight request on the server
    # by its exact rid, rather than leaving it to sample for a pod that is gone.
    since = log.read_text()[before:]
    exact = rf"abort rid='{re.escape(uid)}-t\d{{4}}-a\d{{2}}-[0-9a-f]{{8}}\.' all=False matched=1"
    assert re.search(exact, since), since[-3000:]
    assert final["phase"] == "Succeeded" and final["reward"]["value"] == 1.0, dump(final)
    assert final["attempts"] == 2 and final["sandbox"]["podName"] == f"{name}-a2", dump(final)
    [retry] = final["retries"]
    assert retry["reason"] == "PodLost" and retry["attempt"] == 1 and retry["turns"] >= 2, dump(final)
    resumed = restored_snapshot(dev_stack.stored(final["partial"]["snapshot"]))
    assert len(resumed.state.turns) >= 2
    trajectory = Trajectory.from_bytes(dev_stack.read_object(final["result"]["trajectory"]))
    tokens = [*trajectory.prompt_ids, *trajectory.response_ids]
    prefix = resumed.buffer.input_ids
    assert tokens[: len(prefix)] == prefix, "the tokens before the loss are the checkpoint's"
    start = len(trajectory.prompt_ids)
    assert trajectory.loss_mask[: len(prefix) - start] == list(resumed.buffer.loss_mask[start:])
    assert any("replayed this rollout into a fresh pod" in n for n in trajectory.info.get("notes", []))
    rids = [t["rid"] for t in trajectory.info["turn_log"]]
    assert len(set(rids)) == len(rids), rids
    patch = dev_stack.read_object(final["result"]["patch"]).decode()
    assert ledger_runs(patch) == [f"step {i}" for i in range(LEDGER)], f"commands ran\n{patch}"


def test_an_eval_pod_killed_is_run_again_and_the_rollout_gets_its_reward(dev_stack: DevStack, policy: Policy) -> None:
    """The eval pod is the infrastructure's: deleted while it grades, it is run again (a
    test failure would be a result, a lost pod is not), recorded as a retry, and the
    rollout is graded once, on its first rollout pod."""
    [name] = _batch(dev_stack, "chaos-evalkill", policy.url, size=1)

    def eval_pod() -> str | None:
        status = dev_stack.status(name)
        pod = (status.get("evaluation") or {}).get("podName")
        return pod if status.get("phase") == "Evaluating" and pod else None

    pod = dev_stack.wait("the eval pod", eval_pod, timeout=600)
    dev_stack.kube.delete(PODS, pod, "default")
    final = dev_stack.wait_phase(name, TERMINAL, timeout=600)
    assert final["phase"] == "Succeeded" and final["reward"]["value"] == 1.0, dump(final)
    assert final["evaluation"]["attempt"] == 2 and final["evaluation"]["podName"] != pod, dump(final)
    assert [(r["reason"], r["attempt"]) for r in final["retries"]] == [("EvalPodFailed", 1)], dump(final)
    assert final["attempts"] == 1, "the rollout itself ran once"


def test_a_sandbox_oom_killed_past_its_memory_limit_resumes_from_its_checkpoint(
    dev_stack: DevStack, policy: Policy
) -> None:
    """The node agent enforces the sandbox's resources.limits.memory with a memory cgroup:
    a process of the sandbox that allocates past it is OOM-killed by the kernel, the
    container ends OOMKilled (the whole container, as a kubelet has it), and the rollout
    is replayed from its last checkpoint into a fresh pod and gets its reward."""
    import subprocess
    import sys

    from swerollout_dev.nodeagent.memlimit import MemoryLimits

    limits = MemoryLimits()
    assert limits.enforced, "this machine has a writable memory cgroup (the dev node agent's limits need one)"
    resources = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "768Mi"}}
    name = "chaos-oom-0"
    server = policy.serving
    # The OOM must land while the rollout still has turns to sample, or it ends the pod of a
    # rollout that is done (a loaded machine takes seconds to start the allocation): turns
    # are slow until the checkpoint, and slower still from then until the kill was seen.
    _set_delay(server.url, policy.admin_key, 0.2)
    try:
        dev_stack.rollout(name, endpoint=policy.url, task=0, batch="chaos-oom", sandbox={"resources": resources})
        dev_stack.wait(
            "a checkpoint", lambda: (dev_stack.status(name).get("checkpoint") or {}).get("turns", 0) >= 2, timeout=600
        )
        _set_delay(server.url, policy.admin_key, 1.0)
        status = dev_stack.status(name)
        assert status["phase"] == "Running" and status["checkpoint"]["turns"] < LEDGER + 1, dump(status)
        pod = dev_stack.kube.get(PODS, status["sandbox"]["podName"], "default")
        procs = limits.procs_file(f"{pod['metadata']['uid']}_sandbox")
        assert procs is not None, "the sandbox container runs in its own memory cgroup"
        # A task's process that allocates (and touches) twice the limit, inside the sandbox's cgroup.
        hog = subprocess.Popen(
            ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$1" -c "b = b\'x\' * (1536 << 20)"', str(procs), sys.executable]
        )
        assert hog.wait(timeout=120) == -9 or hog.returncode == 137, "the kernel's OOM killer ended the allocation"
        dev_stack.wait("the rollout replayed", lambda: dev_stack.status(name).get("attempts", 0) >= 2, timeout=300)
    finally:
        _set_delay(server.url, policy.admin_key, SLOW["delay_per_token"])
    final = dev_stack.wait_phase(name, TERMINAL, timeout=600)
    assert final["phase"] == "Succeeded" and final["reward"]["value"] == 1.0, dump(final)
    assert final["attempts"] == 2 and [r["reason"] for r in final["retries"]] == ["PodLost"], dump(final)
    events = dev_stack.kubectl(
        "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={name}",
        "-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
    ).stdout  # fmt: skip
    assert "OOMKilled" in events, events
    trajectory = Trajectory.from_bytes(dev_stack.read_object(final["result"]["trajectory"]))
    prefix = restored_snapshot(dev_stack.stored(final["partial"]["snapshot"])).buffer.input_ids
    assert [*trajectory.prompt_ids, *trajectory.response_ids][: len(prefix)] == prefix
    patch = dev_stack.read_object(final["result"]["patch"]).decode()
    assert ledger_runs(patch) == [f"step {i}" for i in range(LEDGER)], f"commands ran\n{patch}"
