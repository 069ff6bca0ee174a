"""Cluster DNS, just enough of it: ``<service>.<namespace>.svc.<domain>`` answers the
Service's ClusterIP. Served on the node IP (UDP port 53), the kubelet's clusterDNS.

No registry is reachable for CoreDNS's image, and pods need only Service names (the
chart's ingest URL is ``http://<release>.<namespace>.svc:<port>``). A name outside
the cluster domain is refused, never forwarded: nothing leaves this machine.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

TYPE_A = 1
CLASS_IN = 1
NOERROR, FORMERR, NXDOMAIN, REFUSED = 0, 1, 3, 5
TTL = 5

# (namespace, service) -> ClusterIP, or None when there is no such Service (or it is headless).
ServiceLookup = Callable[[str, str], "str | None"]


def _parse_question(packet: bytes) -> tuple[list[str], int, int, int] | None:
    """(labels, qtype, qclass, end offset) of the first question, or None if malformed."""
    offset, labels = 12, []
    while True:
        if offset >= len(packet):
            return None
        length = packet[offset]
        offset += 1
        if length == 0:
            break
        if length & 0xC0 or offset + length > len(packet):
            return None  # compression in a question is not something resolvers send
        labels.append(packet[offset : offset + length].decode("ascii", errors="replace").lower())
        offset += length
    if offset + 4 > len(packet):
        return None
    qtype, qclass = struct.unpack("!HH", packet[offset : offset + 4])
    return labels, qtype, qclass, offset + 4


def answer(packet: bytes, domain: str, lookup: ServiceLookup) -> bytes | None:
    """The response to one query packet (None for something that is not a query)."""
    if len(packet) < 12:
        return None
    ident, flags, qdcount = struct.unpack("!HHH", packet[:6])
    if flags & 0x8000:
        return None  # a response, not a query
    recursion_desired = flags & 0x0100
    question = _parse_question(packet) if qdcount == 1 else None
    if question is None:
        return struct.pack("!HHHHHH", ident, 0x8000 | recursion_desired | FORMERR, 0, 0, 0, 0)
    labels, qtype, qclass, end = question
    domain_labels = domain.lower().split(".")
    address: str | None = None
    if labels[-len(domain_labels) :] != domain_labels:
        rcode = REFUSED
    else:
        rest = labels[: -len(domain_labels)]
        if len(rest) == 3 and rest[2] == "svc":
            address = lookup(rest[1], rest[0])
        rcode = NOERROR if address is not None else NXDOMAIN
    header_flags = 0x8000 | 0x0400 | recursion_desired | rcode  # QR, AA
    answers = b""
    if address is not None and qtype == TYPE_A and qclass == CLASS_IN:
        answers = struct.pack("!HHHIH", 0xC00C, TYPE_A, CLASS_IN, TTL, 4) + ipaddress.IPv4Address(address).packed
    # Other types of an existing name (AAAA): NOERROR with no answer, so resolvers stop there.
    return struct.pack("!HHHHHH", ident, header_flags, 1, 1 if answers else 0, 0, 0) + packet[12:end] + answers


class DnsServer:
    """A UDP DNS server on ``host:port`` in a daemon thread."""

    def __init__(self, host: str, port: int, domain: str, lookup: ServiceLookup) -> None:
        self.domain, self.lookup = domain, lookup
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self._thread = threading.Thread(target=self._serve, name="cluster-dns", daemon=True)

    def start(self) -> DnsServer:
        self._thread.start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                packet, peer = self.sock.recvfrom(4096)
            except OSError:
                return  # closed
            try:
                reply = answer(packet, self.domain, self.lookup)
            except Exception:  # noqa: BLE001 - one bad lookup must not stop DNS
                log.exception("DNS lookup failed")
                reply = struct.pack("!HHHHHH", struct.unpack("!H", packet[:2])[0], 0x8002, 0, 0, 0, 0)
            if reply is not None:
                self.sock.sendto(reply, peer)

    def close(self) -> None:
        self.sock.close()
