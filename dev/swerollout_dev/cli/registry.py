"""The commands this distribution adds to `swerollout` (entry point group `swerollout.commands`).

Kept free of imports so that listing the commands (`swerollout --help`) loads none of them.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, str]] = {
    "policy-server": (
        "swerollout_dev.cli.policy_server",
        "run the SGLang-compatible policy server (tiny-lm, oracle, null)",
    ),
    "dev": ("swerollout_dev.cli.dev", "run the embedded default on this machine: dev up | status | down"),
    "cluster": (
        "swerollout_dev.cli.cluster",
        "run a real single-node Kubernetes on this machine (root): cluster up | status | down",
    ),
    "logs": ("swerollout_dev.cli.logs", "print a dev-mode pod container's output (-f to follow)"),
    "tasks": ("swerollout_dev.cli.tasks", "list and materialize the bundled SWE tasks"),
}
