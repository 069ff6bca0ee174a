"""Run a control plane by hand: ``python -m swerollout_dev.controlplane WORKDIR``.

Prints the admin kubeconfig path and the cold start time, then serves until Ctrl-C.
``--measure N`` instead starts and stops N times in fresh workdirs and prints the
start times (the figure quoted in reports as "control plane cold start").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

from swerollout_dev.binaries import find_binaries
from swerollout_dev.controlplane.manager import ControlPlane


def measure(times: int) -> list[float]:
    find_binaries()  # version checks are cached per process; keep them out of the figure
    results = []
    for _ in range(times):
        with tempfile.TemporaryDirectory(prefix="swerollout-cp-") as tmp:
            began = time.monotonic()
            plane = ControlPlane(tmp).start()
            results.append(time.monotonic() - began)
            plane.stop(delete_data=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerollout_dev.controlplane", description=__doc__)
    parser.add_argument("workdir", nargs="?", help="directory for PKI, etcd data, logs and kubeconfig")
    parser.add_argument("--measure", type=int, metavar="N", help="time N cold starts in fresh workdirs and exit")
    args = parser.parse_args(argv)
    if args.measure:
        results = measure(args.measure)
        print(
            f"cold start (PKI + etcd + kube-apiserver ready + kubeconfig), {len(results)} runs: "
            f"median {statistics.median(results):.2f}s, min {min(results):.2f}s, max {max(results):.2f}s"
        )
        return 0
    if not args.workdir:
        parser.error("give a WORKDIR (or --measure N)")
    with ControlPlane(args.workdir) as plane:
        print(f"server {plane.server_url}\nkubeconfig {plane.kubeconfig_path}\nstarted in {plane.startup_seconds:.2f}s")
        print("Ctrl-C to stop", flush=True)
        try:
            while plane.running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
