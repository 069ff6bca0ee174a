"""`swerollout dev up | status | env | down`: the embedded default on this machine.

`up` starts a detached supervisor (see swerollout_dev.stack.supervisor) and waits
until everything is ready; `status` reports each component; `env` prints the exports a
shell needs to use it (`eval "$(swerollout dev env)"`); `down` stops them all and leaves
no process behind.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time

from swerollout.client.aclient import INFERENCE_ADMIN_KEY_ENV
from swerollout_dev.binaries import BinariesError, find_binaries
from swerollout_dev.nodeagent.agent import reap_all
from swerollout_dev.nodeagent.process import kill_tree
from swerollout_dev.stack.paths import DevPaths
from swerollout_dev.stack.state import DevState
from swerollout_dev.stack.stop import stop_supervisor

EXIT_NOT_RUNNING = 3


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start the control plane, CRDs/RBAC, operator, node agent (and policy server)")
    policy = up.add_mutually_exclusive_group()
    policy.add_argument("--sglang-url", help="an SGLang server the rollouts should use")
    policy.add_argument("--policy", choices=["oracle", "null", "tiny-lm"], help="start the bundled policy server")
    up.add_argument("--tasks", help="JSONL of tasks for the policy server (oracle)")
    up.add_argument(
        "--engines", type=int, default=1, metavar="N", help="with --policy: N policy server engines (default 1)"
    )
    up.add_argument(
        "--gateway",
        choices=["smg"],
        help="with --policy: SGLang's gateway (smg, the PyPI wheel) in front of the engines; rollouts use it",
    )
    up.add_argument("--no-operator", action="store_true", help="do not start the operator")
    up.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for readiness (default 300)")
    up.set_defaults(func=up_command)
    status = sub.add_parser("status", help="report each component")
    status.set_defaults(func=status_command)
    env = sub.add_parser(
        "env",
        help="print the exports a shell needs (KUBECONFIG, kubectl/helm on PATH, the endpoint, the admin key): "
        'eval "$(swerollout dev env)"',
    )
    env.set_defaults(func=env_command)
    down = sub.add_parser("down", help="stop everything")
    down.set_defaults(func=down_command)
    for p in (up, status, env, down):
        p.add_argument("--workdir", help="directory holding .swerollout/dev (default: the current directory)")


def _running_state(paths: DevPaths) -> DevState | None:
    state = DevState.read(paths.state)
    return state if state is not None and state.supervisor.alive() else None


def _print_state(state: DevState) -> None:
    print(f"dev environment: {state.status}" + (f" ({state.message})" if state.message else ""))
    print(f"  {'supervisor':<15} {'running' if state.supervisor.alive() else 'dead':<10} pid {state.supervisor.pid}")
    for name, comp in state.components.items():
        status: str = comp.status
        if comp.pid is not None and status == "running" and not comp.alive():
            status = "dead"
        pid = f"pid {comp.pid}" if comp.pid else ""
        restarts = f" restarts={comp.restarts}" if comp.restarts else ""
        print(f"  {name:<15} {status:<10} {pid:<10} {comp.detail}{restarts}")
    print(f"kubeconfig: {state.kubeconfig}")
    if state.sglang_url:
        print(f"sglang: {state.sglang_url}")
    if len(state.engine_urls) > 1 or (state.engine_urls and state.sglang_url not in state.engine_urls):
        print(f"engines: {' '.join(state.engine_urls)}")
    if state.operator_metrics_url:
        print(f"operator metrics: {state.operator_metrics_url}")
    if state.inference_admin_key_secret:
        print(
            f"sglang admin key: Secret default/{state.inference_admin_key_secret.replace('/', ' key ')} "
            "(spec.inference.adminKeySecretRef)"
        )
    if state.inference_api_key_secret:
        print(
            f"sglang api key: Secret default/{state.inference_api_key_secret.replace('/', ' key ')} "
            "(spec.inference.apiKeySecretRef: the gateway requires it of every request)"
        )


def up_command(args: argparse.Namespace) -> int:
    paths = DevPaths.under(args.workdir)
    running = _running_state(paths)
    if running is not None:
        print(
            f"error: a dev environment is already running in {paths.root} (supervisor pid {running.supervisor.pid}); "
            "use `swerollout dev status`, or `swerollout dev down` first",
            file=sys.stderr,
        )
        return 1
    if (args.engines != 1 or args.gateway) and not args.policy:
        print("error: --engines and --gateway start policy server engines: give --policy too", file=sys.stderr)
        return 2
    if not 1 <= args.engines <= 16:
        print(f"error: --engines must be 1 to 16, got {args.engines}", file=sys.stderr)
        return 2
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.state.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "swerollout_dev.stack.supervisor", "--dev-dir", str(paths.root)]
    argv += ["--engines", str(args.engines)]
    if args.gateway:
        argv += ["--gateway", args.gateway]
    if args.sglang_url:
        argv += ["--sglang-url", args.sglang_url]
    if args.policy:
        argv += ["--policy", args.policy]
    if args.tasks:
        argv += ["--tasks", os.path.abspath(args.tasks)]
    if args.no_operator:
        argv.append("--no-operator")
    paths.logs.mkdir(parents=True, exist_ok=True)
    with open(paths.logs / "supervisor.log", "ab") as log, open(os.devnull, "rb") as devnull:
        supervisor = subprocess.Popen(argv, stdin=devnull, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        code = supervisor.poll()
        state = DevState.read(paths.state)
        if state is not None and state.status in ("ready", "failed"):
            break
        if code is not None:
            if code == 3:
                print(f"error: a dev environment is already running in {paths.root}", file=sys.stderr)
            else:
                print(
                    f"error: the dev supervisor exited with code {code}; see {paths.logs / 'supervisor.log'}",
                    file=sys.stderr,
                )
            return 1
        time.sleep(0.2)
    else:
        print(f"error: not ready after {args.timeout:.0f}s; see {paths.logs}; stopping", file=sys.stderr)
        down_command(args)
        return 1
    assert state is not None
    _print_state(state)
    if state.status == "failed":
        print(f"error: dev up failed; logs in {paths.logs}", file=sys.stderr)
        return 1
    print(f"export KUBECONFIG={state.kubeconfig}")
    print('# or everything a shell needs (kubectl and helm, the endpoint, the admin key): eval "$(swerollout dev env)"')
    return 0


def status_command(args: argparse.Namespace) -> int:
    paths = DevPaths.under(args.workdir)
    state = DevState.read(paths.state)
    if state is None:
        print(f"no dev environment in {paths.root}")
        return EXIT_NOT_RUNNING
    _print_state(state)
    return 0 if state.supervisor.alive() and state.status == "ready" else EXIT_NOT_RUNNING


# What `dev env` exports besides KUBECONFIG and PATH. The store and the admin key use the
# names the CLI and the client already read by themselves (--store-url's default, the
# client's inference_admin_key), so after the eval `swerollout results|view|abort` and
# RolloutClient need no flags for them.
ENDPOINT_ENV = "SWEROLLOUT_ENDPOINT"
STORE_URL_ENV = "SWEROLLOUT_STORE_URL"
ADMIN_KEY_SECRET_ENV = "SWEROLLOUT_ADMIN_KEY_SECRET"


def shell_exports(paths: DevPaths, state: DevState, bin_dir: str) -> list[tuple[str, str]]:
    """(name, value) of every export; PATH's value ends in the shell's own ``$PATH``."""
    exports = [
        ("KUBECONFIG", state.kubeconfig),
        ("PATH", f"{bin_dir}{os.pathsep}"),
        (STORE_URL_ENV, paths.store.as_uri()),
    ]
    if state.sglang_url:
        # The policy server (or --sglang-url) as rollout pods reach it: `submit --endpoint`.
        exports.append((ENDPOINT_ENV, state.sglang_url))
    if state.inference_admin_key_secret:
        # `submit --admin-key-secret`: the runners abort their own requests with it.
        exports.append((ADMIN_KEY_SECRET_ENV, state.inference_admin_key_secret))
        try:
            key = paths.inference_admin_key.read_text().strip()
        except OSError:
            key = ""
        if key:
            # The key itself, for the trainer side's /abort_request (`swerollout abort`, client.abort).
            exports.append((INFERENCE_ADMIN_KEY_ENV, key))
    return exports


def env_command(args: argparse.Namespace) -> int:
    paths = DevPaths.under(args.workdir)
    state = _running_state(paths)
    if state is None or state.status != "ready":
        print(f"error: no dev environment is running in {paths.root}: `swerollout dev up` first", file=sys.stderr)
        return EXIT_NOT_RUNNING
    try:
        bin_dir = str(find_binaries(build_if_missing=False).kubectl.parent)
    except BinariesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    print(f'# the dev environment in {paths.root}; use: eval "$(swerollout dev env)"')
    print("\n".join(render_exports(shell_exports(paths, state, bin_dir))))
    return 0


def render_exports(exports: list[tuple[str, str]]) -> list[str]:
    """POSIX shell lines; every value quoted (a workdir may hold spaces or `$`), PATH
    prepended to the shell's own."""
    return [
        f'export PATH={shlex.quote(value)}"$PATH"' if name == "PATH" else f"export {name}={shlex.quote(value)}"
        for name, value in exports
    ]


def down_command(args: argparse.Namespace) -> int:
    paths = DevPaths.under(args.workdir)
    state = DevState.read(paths.state)
    if state is not None and not stop_supervisor(state.supervisor, grace=90):
        print("warning: the supervisor did not stop in 90s; killed it and what it started", file=sys.stderr)
    if state is None:
        print(f"no dev environment running in {paths.root}")
    # Whatever a crashed supervisor left behind.
    leftovers = [c for c in (state.components.values() if state else []) if c.alive()]
    for comp in leftovers:
        assert comp.pid is not None
        kill_tree(comp.pid)
    killed = reap_all(paths.node) if paths.node.exists() else 0
    paths.state.unlink(missing_ok=True)
    if state is not None:
        extra = (
            f" (killed {len(leftovers)} leftover component(s), {killed} pod process(es))" if leftovers or killed else ""
        )
        print(f"dev environment in {paths.root} stopped{extra}")
    return 0
