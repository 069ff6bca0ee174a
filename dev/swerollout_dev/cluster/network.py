"""Host networking of the cluster, built so that nothing can leave the machine.

- The node IP lives on an interface of its own (a bridge without ports, (``swr-node0``): pods reach
  the API server, the kubelet and cluster DNS there, and it is no one else's address).
- Pods sit on the CNI bridge ``swr0`` (10.244.0.0/24) and get routes only to the
  service range and the node range, no default route: a pod that dials anything
  else fails at once with "network unreachable".
- The node, pod and service ranges get host routes of type blackhole; the more
  specific routes of the bridge and of the node IP win, so a ClusterIP that
  kube-proxy did not rewrite, or an unused pod address, is dropped, never sent to
  the default gateway.
- No masquerading of pod traffic (the bridge plugin runs with ``ipMasq: false``)
  and a filter chain of ours drops whatever a pod forwards to an address outside
  the pod range, and whatever reaches the node IP or the API server's port from
  outside this machine.

Forwarding (``net.ipv4.ip_forward``, for service traffic DNAT-ed back onto the
bridge) and ``bridge-nf-call-iptables`` (so kube-proxy sees pod-to-service
traffic between pods on the same bridge) are switched on; `cluster down` puts
back the values it found.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from .config import ClusterConfig

GUARD_CHAIN = "SWEROLLOUT-GUARD"
SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/bridge/bridge-nf-call-iptables": "1",
}
# Chains of the kubelet and kube-proxy (and ours) that `cluster down` removes.
OWNED_CHAIN_PREFIXES = ("KUBE-", "SWEROLLOUT-")
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle", "raw")


class NetworkError(RuntimeError):
    pass


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False, timeout=60)
    if check and proc.returncode != 0:
        raise NetworkError(f"`{' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _link_exists(name: str) -> bool:
    return _run("ip", "link", "show", "dev", name, check=False).returncode == 0


def set_up(config: ClusterConfig, api_port: int, saved_sysctls: Path) -> None:
    """Node interface, blackhole routes, guard rules and sysctls (idempotent)."""
    if not _link_exists(config.node_link):
        # A bridge without ports: these kernels lack the dummy driver, and an address on
        # an up bridge is a local address like any other.
        _run("ip", "link", "add", config.node_link, "type", "bridge")
    _run("ip", "addr", "replace", f"{config.node_ip}/32", "dev", config.node_link)
    _run("ip", "link", "set", config.node_link, "up")
    for cidr in config.blackholes():
        _run("ip", "route", "replace", "blackhole", cidr)
    _install_guard(config, api_port)
    _set_sysctls(saved_sysctls)


def _install_guard(config: ClusterConfig, api_port: int) -> None:
    _run("iptables", "-N", GUARD_CHAIN, check=False)
    _run("iptables", "-F", GUARD_CHAIN)
    not_local = ["-m", "addrtype", "!", "--src-type", "LOCAL", "!", "-s", config.pod_range]
    rules = [
        # Pods may only talk to pods (directly or after kube-proxy's DNAT) and to the node.
        ["-s", config.pod_range, "!", "-d", config.pod_range, "-j", "DROP"],
    ]
    for rule in rules:
        _run("iptables", "-A", GUARD_CHAIN, *rule)
    # INPUT side: the node IP and the API server (bound to all addresses so pods can
    # reach it) answer only this machine and its pods.
    _run("iptables", "-N", GUARD_CHAIN + "-IN", check=False)
    _run("iptables", "-F", GUARD_CHAIN + "-IN")
    _run("iptables", "-A", GUARD_CHAIN + "-IN", "-d", config.node_ip, *not_local, "-j", "DROP")
    _run("iptables", "-A", GUARD_CHAIN + "-IN", "-p", "tcp", "--dport", str(api_port), *not_local, "-j", "DROP")
    for builtin, chain in (("FORWARD", GUARD_CHAIN), ("INPUT", GUARD_CHAIN + "-IN")):
        if _run("iptables", "-C", builtin, "-j", chain, check=False).returncode != 0:
            _run("iptables", "-I", builtin, "1", "-j", chain)


def _set_sysctls(saved: Path) -> None:
    previous: dict[str, str] = json.loads(saved.read_text()) if saved.is_file() else {}
    for key, value in SYSCTLS.items():
        path = Path("/proc/sys") / key
        if not path.exists():
            raise NetworkError(f"/proc/sys/{key} is missing; the kernel needs bridge netfilter (br_netfilter)")
        previous.setdefault(key, path.read_text().strip())
        path.write_text(value)
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(previous))


def tear_down(config: ClusterConfig, saved_sysctls: Path) -> list[str]:
    """Remove everything set_up, the kubelet, kube-proxy and the CNI bridge left; returns
    what could not be removed (empty when clean)."""
    problems: list[str] = []
    for cidr in config.blackholes():
        _run("ip", "route", "del", "blackhole", cidr, check=False)
    for link in (config.bridge, config.node_link):
        if _link_exists(link):
            proc = _run("ip", "link", "del", link, check=False)
            if proc.returncode != 0:
                problems.append(f"interface {link}: {proc.stderr.strip()}")
    problems += remove_owned_chains()
    if saved_sysctls.is_file():
        for key, value in json.loads(saved_sysctls.read_text()).items():
            try:
                (Path("/proc/sys") / key).write_text(value)
            except OSError as exc:
                problems.append(f"sysctl {key}: {exc}")
        saved_sysctls.unlink()
    return problems


def owned_chains(tool: str, table: str) -> list[str]:
    dump = _run(f"{tool}-save", "-t", table, check=False).stdout
    return [
        line[1:].split()[0]
        for line in dump.splitlines()
        if line.startswith(":") and line[1:].startswith(OWNED_CHAIN_PREFIXES)
    ]


def remove_owned_chains() -> list[str]:
    """Delete every KUBE-*/SWEROLLOUT-* chain, and the rules that jump to them, in all
    tables of iptables and ip6tables. (The kubelet leaves KUBE-FIREWALL and its canaries
    behind when it stops; kube-proxy leaves its service chains.)"""
    problems = []
    for tool in IPTABLES:
        for table in TABLES:
            chains = owned_chains(tool, table)
            if not chains:
                continue
            dump = _run(f"{tool}-save", "-t", table, check=False).stdout
            # Rules in built-in chains that jump into ours: delete by their own spec.
            for line in dump.splitlines():
                if not line.startswith("-A "):
                    continue
                parts = line.split()
                chain = parts[1]
                if chain.startswith(OWNED_CHAIN_PREFIXES):
                    continue
                if any(p.startswith(OWNED_CHAIN_PREFIXES) for p in parts[2:]):
                    _run(tool, "-t", table, "-D", *shlex.split(line)[1:], check=False)
            for chain in chains:
                _run(tool, "-t", table, "-F", chain, check=False)
            for chain in chains:
                _run(tool, "-t", table, "-X", chain, check=False)
            left = owned_chains(tool, table)
            if left:
                problems.append(f"{tool} -t {table}: chains left {left}")
    return problems
