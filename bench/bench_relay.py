"""The egress proxy's relay against a direct connection, on loopback, in the same run.

A server sends SIZE bytes (1 GiB by default) to a client, once over a direct TCP
connection (the floor) and once through egressrelay.relay between two connection
pairs, alternating, RUNS times each. It prints each median throughput and the ratio.
Target: the relayed transfer at least 90 % of the direct one. Not a test:

    python3 bench/bench_relay.py [--size BYTES] [--runs N]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from claude_sandbox.jail import egressrelay

TARGET = 0.90
_BLOCK = b"\0" * (1 << 20)


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


def _send(sock: socket.socket, size: int) -> None:
    left = size
    while left:
        left -= sock.send(_BLOCK[:min(left, len(_BLOCK))])
    sock.close()


def _receive(sock: socket.socket) -> int:
    got = 0
    buffer = bytearray(1 << 20)
    while n := sock.recv_into(buffer):
        got += n
    sock.close()
    return got


def direct(size: int) -> float:
    client, server = _pair()
    sender = threading.Thread(target=_send, args=(server, size))
    start = time.perf_counter()
    sender.start()
    assert _receive(client) == size
    sender.join()
    return size / (time.perf_counter() - start)


def relayed(size: int) -> float:
    client, near = _pair()
    far, server = _pair()
    sender = threading.Thread(target=_send, args=(server, size))
    middle = threading.Thread(target=egressrelay.relay, args=(near, far))
    start = time.perf_counter()
    sender.start()
    middle.start()
    client.shutdown(socket.SHUT_WR)
    assert _receive(client) == size
    sender.join()
    middle.join()
    near.close()
    far.close()
    return size / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1 << 30)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    floors, relays = [], []
    for _ in range(options.runs):
        floors.append(direct(options.size))
        relays.append(relayed(options.size))
    floor, through = statistics.median(floors), statistics.median(relays)
    ratio = through / floor
    print(f"direct {floor / 2**20:.0f} MiB/s, relayed {through / 2**20:.0f} MiB/s, "
          f"ratio {ratio:.2f} (target at least {TARGET:.2f})")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
