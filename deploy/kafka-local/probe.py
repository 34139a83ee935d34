"""Is a Kafka broker there? A real Metadata (v4) round trip, standard library only, for kafka.sh's
readiness check and for with_broker.py's "is this port a Kafka broker?".

    python3 probe.py HOST PORT [NODE_ID]

Exit 0 when HOST:PORT answers a Metadata request with live brokers, and NODE_ID among them when given (a
node registered with the KRaft controller and unfenced: in a cluster another node's being live is not
enough); exit 1 otherwise, with one line on stdout saying why. An open port is not enough: silence, a
refused connection or another protocol's answer (HTTP, TLS) is a no.
"""

from __future__ import annotations

import socket
import struct
import sys

TIMEOUT_S = 2.0
_CORRELATION_ID = 7


def live_brokers(host: str, port: int, timeout_s: float = TIMEOUT_S) -> list[int]:
    """The node ids of the live brokers ``host:port`` lists. Raises OSError or EOFError when it cannot
    be asked, and ValueError when what answers does not speak Kafka."""
    client_id = b"kafka-local-probe"
    # RequestHeader v1 (api key 3 Metadata, version 4) + MetadataRequest v4: topics=[] (none),
    # allow_auto_topic_creation=false.
    body = struct.pack(">hhih", 3, 4, _CORRELATION_ID, len(client_id)) + client_id + struct.pack(">ib", 0, 0)
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _read(sock, 4))
        if not 12 <= size <= 1_000_000:  # e.g. "HTTP" read as a length
            raise ValueError(f"an answer of {size} bytes is not Kafka's")
        answer = _read(sock, size)
    corr, _throttle_ms, count = struct.unpack(">iii", answer[:12])
    if corr != _CORRELATION_ID:
        raise ValueError("the answer is not to this request")
    live, pos = [], 12
    try:
        for _ in range(max(count, 0)):  # node_id, host, port, rack (nullable)
            node_id, host_len = struct.unpack_from(">ih", answer, pos)
            pos += 6 + host_len + 4
            (rack_len,) = struct.unpack_from(">h", answer, pos)
            pos += 2 + max(rack_len, 0)
            live.append(node_id)
    except struct.error as exc:
        raise ValueError("a Metadata answer cut short") from exc
    return live


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed by the broker")
        buf += chunk
    return buf


def main(argv: list[str]) -> int:
    host, port = argv[0], int(argv[1])
    node_id = int(argv[2]) if len(argv) > 2 else None
    try:
        live = live_brokers(host, port)
    except (OSError, EOFError, ValueError) as exc:
        print(f"metadata probe: {exc}")
        return 1
    if not live or (node_id is not None and node_id not in live):
        missing = f", not node {node_id}" if node_id is not None else ""
        print(f"metadata probe: live brokers {live}{missing}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
