"""SWERolloutBatch with the real operator and API server: one write by the trainer
tells every member's runner at once (the operator writes nothing for it), the suspend
rule is the rollout's own flag OR its batch's, and the batch's weight version reaches
the resumed runs. The runners are played over the real ingest API."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from swerollout.api import v1alpha1 as api
from swerollout.wire import ingest as wire
from swerollout_operator.tokens import TokenKey, TokenKind
from tests.support.operator import OperatorProcess
from tests.support.operator_cluster import get_json, ingest_url, mark_ready, phase, rollout, wait_for


def _patches(operator: OperatorProcess) -> float:
    found = re.search(r'swerollout_api_requests_total{method="PATCH"} ([0-9.e+]+)', operator.metrics())
    return float(found.group(1)) if found else 0.0


def _sample(operator: OperatorProcess, series: str) -> float:
    found = re.search(rf"^{re.escape(series)} ([0-9.e+-]+)$", operator.metrics(), re.MULTILINE)
    assert found, f"{series} is not exported"
    return float(found.group(1))


def _resumings(operator: OperatorProcess) -> float:
    found = re.search(r'swerollout_phase_transitions_total{phase="Resuming"} ([0-9.e+]+)', operator.metrics())
    return float(found.group(1)) if found else 0.0


class Runner:
    """Plays one rollout's runner over the ingest API."""

    def __init__(self, operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str, name: str) -> None:
        self.operator, self.namespace, self.name = operator, namespace, name
        self.uid = get_json(kubectl, "swer", name, "-n", namespace)["metadata"]["uid"]
        assert operator.key_file is not None
        token = TokenKey.from_file(operator.key_file).derive(TokenKind.INGEST, namespace, name, self.uid)
        self.auth = {"Authorization": f"Bearer {token}"}

    def url(self, path: str) -> str:
        return ingest_url(self.operator, self.namespace, self.name, self.uid, path)

    def assignment(self, after: str | None = None, wait: float = 0) -> dict[str, Any]:
        params = {"wait": str(wait), **({"after": after} if after else {})}
        answer = httpx.get(self.url("/assignment"), params=params, headers=self.auth, timeout=wait + 60)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def report_aborted(self, assignment_id: str) -> None:
        blob = f"snapshot of {self.name}".encode()
        put = httpx.put(
            self.url("/objects/snapshot"),
            content=blob,
            timeout=60,
            headers={**self.auth, wire.SHA256_HEADER: hashlib.sha256(blob).hexdigest()},
        )
        assert put.status_code == 200, put.text
        ref = wire.StoredObjectRef.model_validate_json(put.content)
        event = wire.Aborted(
            assignment_id=assignment_id,
            reason="Suspended",
            snapshot=ref,
            turns=1,
            context_tokens=10,
        )
        answer = httpx.post(self.url("/events"), content=event.model_dump_json(), headers=self.auth, timeout=60)
        assert answer.status_code == 200 and answer.json()["ok"], answer.text

    def report_started(self, assignment_id: str) -> bool:
        """Report the start of an assignment; True when it was applied (not a duplicate)."""
        event = wire.Started(assignment_id=assignment_id)
        answer = httpx.post(self.url("/events"), content=event.model_dump_json(), headers=self.auth, timeout=60)
        assert answer.status_code == 200, answer.text
        return not answer.json()["duplicate"]


def _batch(kubectl: Callable[..., Any], namespace: str, name: str, **spec: Any) -> None:
    body = {"apiVersion": api.API_VERSION, "kind": api.BATCH_KIND, "metadata": {"name": name}, "spec": spec}
    kubectl("apply", "--server-side", "--field-manager=test", "-n", namespace, "-f", "-", input=json.dumps(body))


def test_one_batch_write_suspends_and_resumes_every_member(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    other = rollout("bc")
    other["metadata"]["labels"][api.LABEL_BATCH] = "b9"
    for body in (rollout("ba"), rollout("bb"), other):
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))
    names = ("ba", "bb", "bc")
    for name in names:
        wait_for(f"{name} Starting", lambda n=name: phase(kubectl, namespace, n) == "Starting", op=operator)
        mark_ready(kubectl, namespace, f"{name}-a1")
    for name in names:
        wait_for(f"{name} Running", lambda n=name: phase(kubectl, namespace, n) == "Running", op=operator)
    runners = {name: Runner(operator, kubectl, namespace, name) for name in names}
    first = {name: r.assignment() for name, r in runners.items()}
    assert {a["kind"] for a in first.values()} == {"run"}

    # Every runner parks in its long poll; then the trainer writes the batch object once.
    patches_before = _patches(operator)
    with ThreadPoolExecutor(3) as pool:
        polls = {
            name: pool.submit(r.assignment, first[name]["id"], 60 if name != "bc" else 8) for name, r in runners.items()
        }
        told = time.monotonic()
        _batch(kubectl, namespace, "b1", suspend=True)
        got = {name: poll.result(timeout=120) for name, poll in polls.items()}
    assert got["ba"]["kind"] == got["bb"]["kind"] == "abort", got
    assert got["bc"]["id"] == first["bc"]["id"], "a member of another batch is not told anything"
    assert _patches(operator) == patches_before, "telling the runners took an API write"
    assert get_json(kubectl, "swer", "ba", "-n", namespace)["spec"]["suspend"] is False, "spec is the user's"

    for name in ("ba", "bb"):
        runners[name].report_aborted(got[name]["id"])
        wait_for(f"{name} Aborted", lambda n=name: phase(kubectl, namespace, n) == "Aborted", op=operator)
    # The abort fan-out histogram timed both, from the batch's write to their reports.
    assert _sample(operator, "swerollout_abort_fanout_seconds_count") == 2
    assert 0 < _sample(operator, "swerollout_abort_fanout_seconds_sum") < 2 * (time.monotonic() - told)
    assert _sample(operator, 'swerollout_phase_oldest_seconds{phase="Aborted"}') > 0
    assert _sample(operator, 'swerollout_phase_oldest_seconds{phase="Running"}') > 0  # bc
    assert _sample(operator, 'swerollout_phase_oldest_seconds{phase="Pending"}') == 0
    assert runners["ba"].assignment()["kind"] == "wait"
    # A late copy of the run's start report does not take an Aborted rollout for resumed.
    assert not runners["ba"].report_started(first["ba"]["id"])
    assert phase(kubectl, namespace, "ba") == "Aborted"

    # A restarted operator reads every batch before its first pass: an Aborted member of a
    # suspended batch (its own flag false) is not taken for resumed.
    def passes() -> int:
        return operator.log_path.read_text(errors="replace").count(f"pass over {namespace}/ba at")

    seen = passes()
    operator.kill()
    # Long enough that no pass of a resumed batch's member comes before its runner reports.
    operator.argv += ["--runner-report-grace-seconds", "600"]
    operator.start()
    wait_for("ba's first pass after the restart", lambda: passes() > seen, op=operator)
    assert phase(kubectl, namespace, "ba") == "Aborted"
    assert runners["ba"].assignment()["kind"] == "wait"

    # bb is also suspended by name: resuming the batch resumes ba only (own flag OR batch's).
    kubectl("patch", "swer", "bb", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    resumings = _resumings(operator)
    _batch(kubectl, namespace, "b1", suspend=False, weightVersion="v9")
    # ba's runner is told at once, in memory; its start report is the one transition
    # (Aborted -> Running): its pass waits for that report, so no Resuming write first.
    resume = wait_for(
        "ba told to resume", lambda: (a := runners["ba"].assignment())["kind"] == "resume" and a, op=operator
    )
    assert resume["spec"]["inference"]["weightVersion"] == "v9", resume
    # A pass that comes for another reason before the report (here a user's label; in a
    # batch, the pass its abort report queued) waits for the report too.
    labelled = kubectl(
        "patch",
        "swer",
        "ba",
        "-n",
        namespace,
        "--type=merge",
        "-o",
        "json",
        "-p",
        json.dumps({"metadata": {"labels": {"marker": "1"}}}),
    )
    marker_rv = int(json.loads(labelled.stdout)["metadata"]["resourceVersion"])
    wait_for(
        "the marker's pass",
        lambda: any(
            int(rv) >= marker_rv
            for rv in re.findall(
                rf"pass over {namespace}/ba at resourceVersion (\d+)", operator.log_path.read_text(errors="replace")
            )
        ),
        op=operator,
    )
    assert phase(kubectl, namespace, "ba") == "Aborted", "a pass within the grace wrote Resuming"
    assert phase(kubectl, namespace, "bb") == "Aborted"
    assert runners["bb"].assignment()["kind"] == "wait"
    assert runners["ba"].report_started(resume["id"])
    wait_for("ba Running", lambda: phase(kubectl, namespace, "ba") == "Running", op=operator)
    assert _resumings(operator) == resumings, "a resumed batch's live runner cost a Resuming write"
    kubectl("patch", "swer", "bb", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    # The runner is told at once; its start report counts whether or not Resuming was written.
    resumed = wait_for(
        "bb told to resume", lambda: (a := runners["bb"].assignment())["kind"] == "resume" and a, op=operator
    )
    assert runners["bb"].report_started(resumed["id"])
    wait_for("bb Running", lambda: phase(kubectl, namespace, "bb") == "Running", op=operator)

    # Deleting a suspended batch object leaves each member to its own flag.
    _batch(kubectl, namespace, "b9", suspend=True)
    wait_for("bc told to abort", lambda: runners["bc"].assignment()["kind"] == "abort", op=operator)
    kubectl("delete", "swerb", "b9", "-n", namespace)
    wait_for("bc running again", lambda: runners["bc"].assignment()["kind"] == "run", op=operator)


def test_a_prepared_members_go_is_recorded_by_its_runners_start_report(
    operator: OperatorProcess, kubectl: Callable[..., Any], namespace: str
) -> None:
    # Long enough that no pass of a resumed batch's member comes before its runner reports.
    operator.kill()
    operator.argv += ["--runner-report-grace-seconds", "600"]
    operator.start()
    _batch(kubectl, namespace, "b1", suspend=True)
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rollout("pa")))
    wait_for("pa Starting", lambda: phase(kubectl, namespace, "pa") == "Starting", op=operator)
    mark_ready(kubectl, namespace, "pa-a1")
    wait_for("pa Prepared", lambda: phase(kubectl, namespace, "pa") == "Prepared", op=operator)
    runner = Runner(operator, kubectl, namespace, "pa")
    first = runner.assignment()
    assert first["kind"] == "prepare", first

    with ThreadPoolExecutor(1) as pool:
        poll = pool.submit(runner.assignment, first["id"], 60)
        _batch(kubectl, namespace, "b1", suspend=False)
        go = poll.result(timeout=120)
    # The go reaches the parked runner in memory; Running is the runner's start report's
    # one write, not a pass's ahead of it (in a batch of 20, 20 writes in the way).
    assert (go["kind"], go["id"]) == ("run", "run:1"), go
    assert phase(kubectl, namespace, "pa") == "Prepared"
    assert runner.report_started(go["id"])
    wait_for("pa Running", lambda: phase(kubectl, namespace, "pa") == "Running", op=operator)
    assert runner.assignment()["id"] == "run:1", "Running answers the id the runner already acted on"
