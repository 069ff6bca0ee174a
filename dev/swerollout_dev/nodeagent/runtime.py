"""Running one pod: init containers in order, then the others, as a kubelet would.

The runtime knows nothing about HTTP: it reads Secrets/ConfigMaps and publishes
status and Events through a :class:`PodHost` the node agent provides, so the
pod life cycle can be exercised without an API server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from swerollout.api.v1alpha1 import ANNOTATION_EGRESS
from swerollout.backoff import Backoff, Schedule

from ..taskenv import TaskEnvError, ensure_task_env, requirements_file
from . import netns, podnet
from .config import NodeAgentConfig, parse_egress
from .env import container_env, expand, referenced_objects
from .errors import ContainerConfigError, ReferenceNotFound
from .images import BASE_COMMIT_ENV, PythonEnvImage, checkout, resolve_argv, resolve_image
from .isolation import (
    HOST_RUNTIME_DIRS,
    MOUNT_ROOT_ENV,
    Masks,
    Mount,
    bwrap_argv,
    map_unisolated,
    private_entries,
    visible_host_paths,
)
from .layout import PodDir
from .memlimit import JOIN, OOM_POLL_SECONDS, memory_limits
from .network import HOST_IP, POD_LOOPBACK_ENV
from .podspec import Container, Pod
from .probes import ExecContext, probe_once
from .process import ContainerProcess, ProcessRecord, kill_tree
from .volumes import materialise

# Waiting for a missing reference and restarting a container both back off like the
# kubelet's CrashLoopBackOff, on the project's one backoff rule, and never give up: the
# pod's own deadline or deletion ends the wait.
_WAIT_RETRY = Backoff(first_seconds=0.5, max_seconds=10.0)


def _pause(retry: Schedule) -> float:
    delay = retry.next_delay()
    assert delay is not None  # the policy has no bound
    return delay


EXEC_CONTEXT_FILE = "exec.json"
"""Beside a container's process record: what its exec probes run in (probes.ExecContext)."""

log = logging.getLogger("swerollout_dev.nodeagent")

DEFAULT_TASK_WORKDIR = "/testbed"
ISOLATION_CONDITION = "swerollout.io/Isolated"
NETWORK_CONDITION = "swerollout.io/NetworkIsolated"
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodHost(Protocol):
    """What the runtime needs from the outside world (the node agent implements it)."""

    async def fetch(self, namespace: str, kind: str, name: str) -> Mapping[str, bytes] | None: ...

    async def publish_status(self, pod: Pod, status: Callable[[], dict[str, Any] | None]) -> None:
        """Write ``status()`` to pods/status; it is called once a request slot is free, so a
        pod that waited publishes its latest state (None: nothing new to write)."""
        ...

    async def event(self, pod: Pod, type_: str, reason: str, message: str) -> None: ...


@dataclass
class ContainerSlot:
    spec: Container
    init: bool
    restart_count: int = 0
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    done: bool = False  # terminated and will not run again
    process: ContainerProcess | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # set on every state change of the pod

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.spec.name,
            "image": self.spec.image,
            "imageID": self.spec.image,
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": "running" in self.state,
        }
        if self.process is not None:
            out["containerID"] = f"local://{self.process.pid}"
        return out

    def persisted(self) -> dict[str, Any]:
        return {
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
            "done": self.done,
        }


class PodRuntime:
    def __init__(
        self,
        pod: Pod,
        config: NodeAgentConfig,
        host: PodHost,
        *,
        bwrap: str | None,
        pod_ip: str = HOST_IP,
        egress: list[tuple[str, int]] | None = None,
    ) -> None:
        self.pod = pod
        self.pod_ip = pod_ip
        """This pod's own loopback address (see network.py); a restored pod keeps the one it had."""
        self.config = config
        self.host = host
        self.bwrap = bwrap
        self.egress = egress
        """None: the pod shares the host network; else its own namespaces reaching only these host addresses."""
        self.dir = PodDir.of(config.root_dir, pod.metadata.namespace, pod.metadata.name, pod.metadata.uid)
        self.net: podnet.PodNetwork | None = None
        self._portal = podnet.Portal(self.dir)
        self.init_slots = [ContainerSlot(c, True) for c in pod.spec.init_containers]
        self.slots = [ContainerSlot(c, False) for c in pod.spec.containers]
        self.start_time: str | None = None
        self.initialized = not self.init_slots
        self.failure: tuple[str, str] | None = None  # pod-level (reason, message) once Failed for good
        self.stopping = False
        self._deadline_message: str | None = None
        self._stop_grace = 0.0
        self._started_at: float | None = None  # exact start, when this process started the pod
        self._objects: dict[tuple[str, str], Mapping[str, bytes] | None] = {}
        self._changed = asyncio.Event()
        self._finished = asyncio.Event()
        self._last_published: dict[str, Any] | None = None
        self._persisted = ""  # the state file's last content, to skip identical rewrites
        self._pending: dict[str, Any] | None = None  # status being written
        self._tasks: list[asyncio.Task[Any]] = []
        # container -> what its exec probes run in, so they see what the container sees
        self._probe_context: dict[str, ExecContext] = {}

    # ---- status -----------------------------------------------------------------

    def _pod_failure(self) -> tuple[str, str] | None:
        if self.failure is not None:
            return self.failure
        if self._deadline_message and not any("running" in s.state for s in [*self.init_slots, *self.slots]):
            return ("DeadlineExceeded", self._deadline_message)
        return None

    @property
    def phase(self) -> str:
        if self._pod_failure() is not None:
            return "Failed"
        if not self.initialized:
            return "Pending"
        if not all(s.done for s in self.slots):
            started = any("waiting" not in s.state or s.restart_count or s.last_state for s in self.slots)
            return "Running" if started else "Pending"
        return "Succeeded" if all(s.state.get("terminated", {}).get("exitCode") == 0 for s in self.slots) else "Failed"

    def status(self) -> dict[str, Any]:
        phase = self.phase
        finished = phase in ("Succeeded", "Failed")
        ready = not finished and bool(self.slots) and all(s.ready for s in self.slots)
        old = {c["type"]: c for c in (self._last_published or {}).get("conditions", [])}

        def cond(type_: str, ok: bool, reason: str | None = None, message: str | None = None) -> dict[str, Any]:
            status = "True" if ok else "False"
            prev = old.get(type_)
            c: dict[str, Any] = {
                "type": type_,
                "status": status,
                "lastTransitionTime": prev["lastTransitionTime"]
                if prev and prev["status"] == status
                else now_rfc3339(),
            }
            if reason:
                c["reason"] = reason
            if message:
                c["message"] = message
            return c

        not_ready_reason = "PodCompleted" if finished else "ContainersNotReady"
        conditions = [
            cond("PodScheduled", True),
            cond("Initialized", self.initialized, None if self.initialized else "ContainersNotInitialized"),
            cond("ContainersReady", ready, None if ready else not_ready_reason),
            cond("Ready", ready, None if ready else not_ready_reason),
        ]
        if self.bwrap is None:
            conditions.append(
                cond(
                    ISOLATION_CONDITION,
                    False,
                    "Unisolated",
                    "bubblewrap (bwrap) is not installed on this node: containers run as plain local processes "
                    f"that can see the whole file system; mountPaths are mapped under ${MOUNT_ROOT_ENV}",
                )
            )
        else:
            conditions.append(cond(ISOLATION_CONDITION, True, "Bubblewrap"))
        if self.egress is None:
            conditions.append(
                cond(
                    NETWORK_CONDITION,
                    False,
                    "HostNetwork",
                    "this node agent cannot create network namespaces (it needs root, ip and nsenter): the pod's "
                    "containers share the host network and can reach every service on it",
                )
            )
        else:
            conditions.append(cond(NETWORK_CONDITION, True, "PodNetwork"))
        out: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": HOST_IP,
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "containerStatuses": [s.status() for s in self.slots],
            "initContainerStatuses": [s.status() for s in self.init_slots],
        }  # qosClass is left to the API server: it computes it from resources and it is immutable
        if self.start_time:
            out["startTime"] = self.start_time
        failure = self._pod_failure()
        if failure is not None:
            out["reason"], out["message"] = failure
        return out

    def _touch(self) -> None:
        # The state file is written by the status writer (coalesced); the few points
        # that must reach disk before going on call _persist() themselves.
        self._changed.set()
        for slot in self.slots:
            slot.changed.set()

    def _persist(self) -> None:
        state = {
            "startTime": self.start_time,
            "podIP": self.pod_ip,
            "initialized": self.initialized,
            "failure": list(self.failure) if self.failure else None,
            "containers": {s.spec.name: s.persisted() for s in [*self.init_slots, *self.slots]},
        }
        text = json.dumps(state)
        if text == self._persisted:
            return
        self.dir.path.mkdir(parents=True, exist_ok=True)
        tmp = self.dir.state_file.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(self.dir.state_file)
        self._persisted = text

    def restore(self) -> bool:
        """Load state a previous node agent left; False when there is none."""
        try:
            state = json.loads(self.dir.state_file.read_text())
        except (OSError, ValueError):
            return False
        self.start_time = state.get("startTime")
        self.pod_ip = state.get("podIP") or self.pod_ip
        self.initialized = bool(state.get("initialized")) or not self.init_slots
        if state.get("failure"):
            self.failure = (state["failure"][0], state["failure"][1])
        saved = state.get("containers", {})
        for s in [*self.init_slots, *self.slots]:
            entry = saved.get(s.spec.name)
            if entry:
                s.restart_count = int(entry.get("restartCount", 0))
                s.state = entry.get("state") or s.state
                s.last_state = entry.get("lastState") or {}
                s.done = bool(entry.get("done"))
        return True

    async def _status_writer(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            self._persist()

            def latest() -> dict[str, Any] | None:
                self._changed.clear()  # what changed so far is in this status
                status = self.status()
                if status == self._last_published:
                    return None
                self._pending = status
                return status

            if self.status() != self._last_published:
                try:
                    await self.host.publish_status(self.pod, latest)
                    if self._pending is not None:
                        self._last_published, self._pending = self._pending, None
                except Exception as exc:  # keep the pod running; the next round retries
                    log.warning("status of pod %s not published: %s", self.pod.key, exc)
                    self._changed.set()
                    await asyncio.sleep(1.0)
            if self._finished.is_set() and not self._changed.is_set():
                return

    # ---- life cycle ---------------------------------------------------------------

    async def run(self) -> None:
        """Run the pod to its end (or until :meth:`stop`); returns once the final status is published."""
        writer = asyncio.create_task(self._status_writer())
        try:
            if self.failure is None and not (self.slots and all(s.done for s in self.slots)):
                await self._run()
        finally:
            for s in [*self.init_slots, *self.slots]:
                s.ready = False
            if self._deadline_message and self.failure is None:
                self.failure = ("DeadlineExceeded", self._deadline_message)
            self._finished.set()
            self._touch()
            await writer

    async def _run(self) -> None:
        if self.start_time is None:
            self.start_time = now_rfc3339()
            self._started_at = time.time()
        self._persist()  # from now on a restarted agent knows this pod was started here
        self._touch()
        if self.bwrap is None:
            await self.host.event(
                self.pod,
                "Warning",
                "RunningUnisolated",
                "bubblewrap is not installed on this node; the pod's containers run unisolated",
            )
        deadline = self._deadline_task()
        try:
            try:
                await self._prepare()
            except ContainerConfigError as exc:
                self._fail_waiting(exc)
                return
            if self.stopping:
                return
            if self.egress is not None:
                try:
                    await self._network()
                except OSError as exc:
                    self.failure = ("NetworkSetupFailed", str(exc))
                    self._touch()
                    return
            for slot in self.init_slots:
                if slot.done and slot.state.get("terminated", {}).get("exitCode") == 0:
                    continue
                code = await self._supervise(slot)
                if self.stopping or self.failure is not None:
                    return
                if code != 0:
                    self.failure = ("InitContainerFailed", f"init container {slot.spec.name!r} exited with code {code}")
                    self._touch()
                    return
            self.initialized = True
            self._touch()
            supervisors = [asyncio.create_task(self._supervise(s)) for s in self.slots if not s.done]
            self._tasks = [*supervisors, *(asyncio.create_task(self._readiness(s)) for s in self.slots)]
            await asyncio.gather(*supervisors)
        finally:
            for t in self._tasks:
                t.cancel()
            if deadline is not None:
                deadline.cancel()

    def _deadline_task(self) -> asyncio.Task[None] | None:
        seconds = self.pod.spec.active_deadline_seconds
        if seconds is None or self.start_time is None:
            return None
        started = datetime.strptime(self.start_time, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        # startTime has whole seconds; a pod started in this process knows the exact instant.
        started = self._started_at or started

        async def expire() -> None:
            await asyncio.sleep(max(0.0, started + seconds - time.time()))
            # The phase turns Failed once the containers are stopped (see run()).
            self._deadline_message = f"Pod was active on the node longer than the specified deadline ({seconds}s)"
            await self.host.event(self.pod, "Normal", "DeadlineExceeded", self._deadline_message)
            await self.stop(self.pod.spec.termination_grace_period_seconds)

        return asyncio.create_task(expire())

    async def _prepare(self) -> None:
        """Check every image, fetch referenced objects, materialise volumes (retrying missing refs)."""
        for slot in [*self.init_slots, *self.slots]:
            try:
                resolve_image(slot.spec.image, self.config)
                resolve_argv(slot.spec.name, slot.spec.image, slot.spec.command, slot.spec.args)
            except ContainerConfigError as exc:
                slot.state = {"waiting": {"reason": exc.reason, "message": str(exc)}}
                raise
        retry = _WAIT_RETRY.start()
        while True:
            try:
                for kind, name in sorted(referenced_objects(self.pod)):
                    self._objects[(kind, name)] = await self.host.fetch(self.pod.metadata.namespace, kind, name)
                for volume in self.pod.spec.volumes:
                    materialise(volume, self.dir.volumes, self._lookup)
                for slot in [*self.init_slots, *self.slots]:
                    container_env(self.pod, slot.spec, self._lookup, self.pod_ip)
                return
            except ReferenceNotFound as exc:
                if self.stopping:
                    return
                for slot in [*self.init_slots, *self.slots]:
                    slot.state = {"waiting": {"reason": exc.reason, "message": str(exc)}}
                self._touch()
                await asyncio.sleep(_pause(retry))

    async def _network(self) -> None:
        """The pod's namespaces and portal (adopted when a previous agent set them up)."""
        assert self.egress is not None
        sandboxed = {
            s.spec.name
            for s in [*self.init_slots, *self.slots]
            if not isinstance(resolve_image(s.spec.image, self.config), PythonEnvImage)
        }
        self.net = podnet.plan(self.pod, sandboxed)
        wanted = [a for a in self.pod.metadata.annotations.get(ANNOTATION_EGRESS, "").split(",") if a.strip()]
        try:
            own = await asyncio.to_thread(parse_egress, wanted, f"annotation {ANNOTATION_EGRESS}")
        except ValueError as exc:
            raise OSError(str(exc)) from exc
        egress = list(dict.fromkeys([*self.egress, *own]))
        links = podnet.links(self.pod, self.net, self.pod_ip, egress)
        await self._portal.start(self.net, links, tuple(h for h, _ in egress))

    def _lookup(self, kind: str, name: str) -> Mapping[str, bytes] | None:
        return self._objects.get((kind, name))

    def _fail_waiting(self, exc: ContainerConfigError) -> None:
        self.failure = (exc.reason, str(exc))
        self._touch()

    def _restart_wanted(self, slot: ContainerSlot, code: int) -> bool:
        if self.stopping or self.failure is not None:
            return False
        policy = self.pod.spec.restart_policy
        if slot.init:
            return code != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    async def _supervise(self, slot: ContainerSlot) -> int:
        """Run one container (adopting a live one), restarting it as restartPolicy says; return its last exit code."""
        retry = _WAIT_RETRY.start()
        while True:
            proc = self._adopt(slot)
            if proc is None:
                try:
                    proc = await self._launch(slot)
                except ReferenceNotFound as exc:
                    # Deleted since the pod started; the kubelet waits for it to come back.
                    slot.state = {"waiting": {"reason": exc.reason, "message": str(exc)}}
                    self._touch()
                    await asyncio.sleep(_pause(retry))
                    for kind, name in list(self._objects):
                        self._objects[(kind, name)] = await self.host.fetch(self.pod.metadata.namespace, kind, name)
                    if self.stopping:
                        return 128
                    continue
                except ContainerConfigError as exc:
                    slot.state = {"waiting": {"reason": exc.reason, "message": str(exc)}}
                    self.failure = (exc.reason, str(exc))
                    self._touch()
                    return 128
            slot.process = proc
            self._touch()
            if self.stopping:  # stop() ran while this container was being created
                await proc.terminate(self._stop_grace)
            oom = asyncio.create_task(self._end_on_oom(slot.spec, proc))
            try:
                code = await proc.wait()
            finally:
                oom.cancel()
            started = slot.state.get("running", {}).get("startedAt", now_rfc3339())
            reason = "Completed" if code == 0 else "Error"
            if code != 0 and memory_limits().oom_killed(self._cgroup(slot.spec)):
                reason = "OOMKilled"  # past resources.limits.memory, as a kubelet reports it
            memory_limits().remove(self._cgroup(slot.spec))
            slot.state = {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "startedAt": started,
                    "finishedAt": now_rfc3339(),
                    "containerID": f"local://{proc.pid}",
                }
            }
            slot.ready = False
            restart = self._restart_wanted(slot, code)
            slot.done = not restart
            self._persist()  # the outcome is on disk before the record of the process goes
            self._touch()
            (self.dir.container(slot.spec.name) / "process.json").unlink(missing_ok=True)
            if not restart:
                return code
            await asyncio.sleep(_pause(retry))
            if self.stopping or self.failure is not None:
                slot.done = True
                return code
            slot.last_state = slot.state
            slot.restart_count += 1

    def _adopt(self, slot: ContainerSlot) -> ContainerProcess | None:
        record = ProcessRecord.load(self.dir.container(slot.spec.name) / "process.json")
        if record is None:
            return None
        proc = ContainerProcess.adopt(record)
        context = ExecContext.load(self.dir.container(slot.spec.name) / EXEC_CONTEXT_FILE)
        if context is not None:
            self._probe_context[slot.spec.name] = context
        if not proc.alive() and not Path(record.exit_file).exists():
            # Neither running nor ended normally: the process is gone and its outcome lost.
            Path(record.exit_file).write_text("137\n")
        if "running" not in slot.state:
            slot.state = {"running": {"startedAt": now_rfc3339()}}
        return proc

    async def _launch(self, slot: ContainerSlot) -> ContainerProcess:
        c = slot.spec
        image = resolve_image(c.image, self.config)
        env = container_env(self.pod, c, self._lookup, self.pod_ip)
        argv = [expand(a, env) for a in resolve_argv(c.name, c.image, c.command, c.args)]
        ctr_dir = self.dir.container(c.name)
        ctr_dir.mkdir(parents=True, exist_ok=True)
        mounts = self._mounts(c)
        python_env = self.config.python_bin_dir.parent
        workdir = PurePosixPath(c.working_dir) if c.working_dir else None
        base_env = {
            "HOSTNAME": self.pod.metadata.name,
            "HOME": "/tmp" if self.bwrap else str(ctr_dir / "tmp"),
            POD_LOOPBACK_ENV: self.pod_ip,
        }
        if isinstance(image, PythonEnvImage):
            base_env["PATH"] = f"{image.bin_dir}:{_SYSTEM_PATH}"
            base_env["VIRTUAL_ENV"] = str(python_env)
        else:
            base_env["PATH"] = f"{_SYSTEM_PATH}:{self.config.python_bin_dir}"
            task_env = await self._task_env(c.name, image.repo)
            if task_env is not None:
                # The task's own environment first: its python, its packages (docs/dev-mode.md).
                base_env["PATH"] = f"{task_env / 'bin'}:{base_env['PATH']}"
                base_env["VIRTUAL_ENV"] = str(task_env)
                mounts.append(Mount(task_env, PurePosixPath(task_env), read_only=True))
            workdir = workdir or PurePosixPath(DEFAULT_TASK_WORKDIR)
            repo_copy = self.dir.checkout(c.name)
            repo_copy.parent.mkdir(parents=True, exist_ok=True)
            await checkout(image.repo, repo_copy, env.get(BASE_COMMIT_ENV, "HEAD"))
            mounts.append(Mount(repo_copy, workdir, read_only=False))
        full_env = {**base_env, **env}
        tmp = ctr_dir / "tmp"
        tmp.mkdir(exist_ok=True)
        if self.bwrap is not None:
            exposed = visible_host_paths(
                self.config.python_bin_dir,
                runner_image=isinstance(image, PythonEnvImage),
                runner_paths=self.config.runner_paths,
            )
            private = await asyncio.to_thread(private_entries)
            prefix = bwrap_argv(
                self.bwrap,
                exposed=exposed,
                private=private,
                masks=Masks.write(self.config.mask_dir),
                hidden=[self.config.root_dir, *self.config.hidden_paths, *HOST_RUNTIME_DIRS],
                mounts=mounts,
                private_tmp=tmp,
                workdir=workdir or PurePosixPath("/tmp"),
                hostname=self.pod.metadata.name,
                keep_visible=exposed,
                seccomp_file=self.config.seccomp_file,
            )
            cwd = ctr_dir
            launch = [*prefix, *argv]
        else:
            prefix = []
            mount_root = ctr_dir / "root"
            host_workdir = map_unisolated(mount_root, mounts, workdir)
            full_env[MOUNT_ROOT_ENV] = str(mount_root)
            cwd = host_workdir or tmp
            launch = argv
        if self.net is not None:
            prefix = [*netns.enter_prefix(self.net.of(c.name)), *prefix]
            launch = [*netns.enter_prefix(self.net.of(c.name)), *launch]
        limit = c.resources.limits.get("memory")
        procs = await asyncio.to_thread(memory_limits().create, self._cgroup(c), limit) if limit else None
        if procs is not None:
            launch = ["/bin/sh", "-c", JOIN, str(procs), *launch]
        slot.state = {"waiting": {"reason": "ContainerCreating"}}
        log = self.dir.log(c.name, slot.restart_count)
        proc = ContainerProcess.spawn(
            launch,
            env=full_env,
            cwd=cwd,
            log_path=log,
            exit_file=ctr_dir / "exit",
            own_pid_namespace=self.bwrap is not None,
        )
        proc.record.dump(ctr_dir / "process.json")
        slot.process = proc
        slot.state = {"running": {"startedAt": now_rfc3339()}}
        context = ExecContext(full_env, str(cwd), prefix)
        context.dump(ctr_dir / EXEC_CONTEXT_FILE)
        self._probe_context[c.name] = context
        self._prune_logs(c.name, slot.restart_count)
        await self.host.event(self.pod, "Normal", "Started", f"Started container {c.name}")
        return proc

    async def _task_env(self, container: str, repo: Path) -> Path | None:
        """The task image's own Python environment, built (once per requirements set) if it names one."""
        requirements = requirements_file(repo)
        if not requirements.is_file():
            return None
        try:
            return await asyncio.to_thread(ensure_task_env, requirements, self.config.python_bin_dir)
        except (TaskEnvError, OSError, subprocess.SubprocessError) as exc:
            raise ContainerConfigError(
                f"container {container!r}: the task environment of {requirements} cannot be built: {exc}",
                reason="CreateContainerError",
            ) from exc

    async def _end_on_oom(self, c: Container, proc: ContainerProcess) -> None:
        """The OOM killer ended a process of the container: the whole container ends, as a
        kubelet has it (memory.oom.group): a sandbox is not left half killed."""
        name = self._cgroup(c)
        if not (memory_limits().enforced and c.resources.limits.get("memory")):
            return
        while not memory_limits().oom_killed(name):
            await asyncio.sleep(OOM_POLL_SECONDS)
        log.info("pod %s container %s: OOM-killed past its memory limit", self.pod.metadata.name, c.name)
        kill_tree(proc.pid)

    def _cgroup(self, c: Container) -> str:
        return f"{self.pod.metadata.uid}_{c.name}"

    def _prune_logs(self, container: str, current: int) -> None:
        for old in self.dir.container(container).glob("*.log"):
            if old.stem.isdigit() and int(old.stem) < current - 1:
                old.unlink(missing_ok=True)

    def _mounts(self, c: Container) -> list[Mount]:
        names = {v.name for v in self.pod.spec.volumes}
        mounts = []
        for vm in c.volume_mounts:
            if vm.name not in names:
                raise ContainerConfigError(f"container {c.name!r}: volumeMount {vm.name!r} names no volume of the pod")
            if not vm.mount_path.startswith("/"):
                raise ContainerConfigError(f"container {c.name!r}: mountPath {vm.mount_path!r} must be absolute")
            source = self.dir.volumes / vm.name
            if vm.sub_path:
                source = source / vm.sub_path
                if not source.exists():
                    source.mkdir(parents=True)
            mounts.append(Mount(source, PurePosixPath(vm.mount_path), vm.read_only))
        return mounts

    async def _readiness(self, slot: ContainerSlot) -> None:
        """Keep ``slot.ready`` current: true while running when there is no probe, else what the probe says."""
        probe = slot.spec.readiness_probe
        while True:
            while "running" not in slot.state:
                slot.changed.clear()
                await slot.changed.wait()
            if probe is None:
                if not slot.ready:
                    slot.ready = True
                    self._touch()
                while "running" in slot.state:
                    slot.changed.clear()
                    await slot.changed.wait()
                continue
            await asyncio.sleep(probe.initial_delay_seconds)
            successes = failures = 0
            period = self.config.probe_period_seconds or probe.period_seconds
            while "running" in slot.state:
                context = self._probe_context.get(slot.spec.name) or ExecContext({}, "/", [])
                env, cwd, prefix = context.env, context.cwd, context.prefix
                try:
                    ns = netns.path_of(self.net.of(slot.spec.name)) if self.net is not None else None
                    # Bounded past the probe's own timeout too: a run that hangs where no
                    # timeout reaches (starting its process) is an error, said, not a stuck prober.
                    async with asyncio.timeout(max(probe.timeout_seconds, 0.1) + 10):
                        ok = await probe_once(
                            probe, slot.spec, env=env, cwd=cwd, exec_prefix=prefix, pod_ip=self.pod_ip, netns=ns
                        )
                except Exception as exc:  # noqa: BLE001 - a probe that errs has failed; the prober goes on
                    # As a kubelet has it: the probe errored, which counts as a failure. Without
                    # this, one error ended the loop, and the pod stayed unready with nothing said.
                    log.warning(
                        "pod %s container %s: readiness probe errored: %s: %s",
                        self.pod.metadata.name,
                        slot.spec.name,
                        type(exc).__name__,
                        exc,
                    )
                    ok = False
                successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
                if failures and failures % 30 == 0:  # a container that never comes up says so, now and then
                    log.warning(
                        "pod %s container %s: readiness probe failed %d times in a row",
                        self.pod.metadata.name,
                        slot.spec.name,
                        failures,
                    )
                ready = slot.ready
                if ok and successes >= probe.success_threshold:
                    ready = True
                elif not ok and failures >= probe.failure_threshold:
                    ready = False
                if ready != slot.ready and "running" in slot.state:
                    slot.ready = ready
                    self._touch()
                await asyncio.sleep(period)

    async def stop(self, grace_seconds: float) -> None:
        """Graceful termination of every container (SIGTERM, SIGKILL after the grace period)."""
        self.stopping = True
        self._stop_grace = grace_seconds
        running = [s for s in [*self.init_slots, *self.slots] if s.process is not None and s.process.alive()]
        if running:
            names = ", ".join(s.spec.name for s in running)
            await self.host.event(self.pod, "Normal", "Killing", f"Stopping container(s) {names}")
        await asyncio.gather(*(s.process.terminate(grace_seconds) for s in running if s.process is not None))

    def end_terminated(self) -> bool:
        """After stop(): make the phase terminal, as a kubelet does for a deleted pod, whatever
        point it had reached (stopped while preparing, never started here, adopted without its
        processes). Controllers that keep a finalizer on the object, such as Kueue's, wait for
        that phase. True when the phase changed from what was last published."""
        if self.phase not in ("Succeeded", "Failed"):
            self.failure = ("Terminated", "the pod was deleted before its containers ended")
        return (self._last_published or {}).get("phase") != self.phase

    def kill_leftovers(self) -> None:
        """Best effort at teardown: nothing the pod started may outlive it."""
        for s in [*self.init_slots, *self.slots]:
            record = ProcessRecord.load(self.dir.container(s.spec.name) / "process.json")
            if record is not None:
                proc = ContainerProcess.adopt(record)
                if proc.alive():
                    kill_tree(record.pid)

    def remove_files(self) -> None:
        podnet.teardown(self.dir)
        shutil.rmtree(self.dir.path, ignore_errors=True)
