"""The egress proxy's relay over real TCP on loopback: every byte, both ways, in order.

A client talks to the relay's near end; the relay's far end is connected to a server.
Nothing here needs a namespace: the relay itself knows only two sockets.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable

from claude_sandbox.jail import egressrelay


def _pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on loopback: (one end, the other)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


def test_a_large_transfer_both_ways_arrives_whole_and_is_counted() -> None:
    client, relay_near = _pair()
    relay_far, server = _pair()
    upload, download = os.urandom(24 << 20), os.urandom(8 << 20)
    got: dict[str, bytes] = {}

    def server_side() -> None:
        received = bytearray()
        while chunk := server.recv(1 << 20):
            received += chunk
        got["server"] = bytes(received)
        server.sendall(download)
        server.close()

    def client_side() -> None:
        client.sendall(upload)
        client.shutdown(socket.SHUT_WR)  # a half close: the server answers after it
        received = bytearray()
        while chunk := client.recv(1 << 20):
            received += chunk
        got["client"] = bytes(received)
        client.close()

    threads = [threading.Thread(target=server_side), threading.Thread(target=client_side)]
    for thread in threads:
        thread.start()
    counts = egressrelay.relay(relay_near, relay_far, first=b"", idle=30)
    for thread in threads:
        thread.join(timeout=60)
    relay_near.close()
    relay_far.close()
    assert hashlib.sha256(got["server"]).digest() == hashlib.sha256(upload).digest()
    assert hashlib.sha256(got["client"]).digest() == hashlib.sha256(download).digest()
    assert counts == (len(upload), len(download))


def test_what_was_read_to_judge_goes_first() -> None:
    client, relay_near = _pair()
    relay_far, server = _pair()
    client.sendall(b"rest")
    client.shutdown(socket.SHUT_WR)
    thread = threading.Thread(target=lambda: (server.shutdown(socket.SHUT_WR)))
    thread.start()
    counts = egressrelay.relay(relay_near, relay_far, first=b"hello ", idle=10)
    thread.join()
    received = bytearray()
    while chunk := server.recv(4096):
        received += chunk
    assert bytes(received) == b"hello rest" and counts == (10, 0)
    for sock in (client, relay_near, relay_far, server):
        sock.close()


def test_a_reset_ends_the_relay() -> None:
    client, relay_near = _pair()
    relay_far, server = _pair()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()  # RST
    server.close()
    assert egressrelay.relay(relay_near, relay_far, idle=10) == (0, 0)
    relay_near.close()
    relay_far.close()


def test_an_idle_relay_gives_up() -> None:
    client, relay_near = _pair()
    relay_far, server = _pair()
    assert egressrelay.relay(relay_near, relay_far, idle=0.2) == (0, 0)
    for sock in (client, relay_near, relay_far, server):
        sock.close()


def _pipes() -> int:
    """Pipe ends this process holds now."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
        except OSError:
            pass
    return count


def _until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + 10
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_idle_connections_hold_no_pipe_and_bulk_pipes_are_capped() -> None:
    """Pipes count against the user's pages on the whole host: an idle direction gives its
    pipe back, and at most _BULK_MAX directions keep a grown one."""
    before = _pipes()
    count = egressrelay._BULK_MAX + 3
    pairs = [(*_pair(), *_pair()) for _ in range(count)]  # client, near, far, server
    relays = [threading.Thread(target=egressrelay.relay, args=(near, far), daemon=True)
              for _, near, far, _ in pairs]
    for thread in relays:
        thread.start()
    small = pairs[0]
    small[0].sendall(b"hello")
    assert small[3].recv(16) == b"hello"
    assert _until(lambda: _pipes() == before), "an idle relay still holds a pipe"
    bulk = os.urandom(egressrelay._BULK_AFTER + (1 << 20))
    for client, _, _, server in pairs:
        sender = threading.Thread(target=client.sendall, args=(bulk,))
        sender.start()
        received = 0
        while received < len(bulk):
            received += len(server.recv(1 << 20))
        sender.join()
    assert _until(lambda: egressrelay._bulk_held == egressrelay._BULK_MAX)
    assert _until(lambda: _pipes() == before + 2 * egressrelay._BULK_MAX)
    for client, _, _, server in pairs:
        client.close()
        server.close()
    for thread in relays:
        thread.join(timeout=10)
    for _, near, far, _ in pairs:
        near.close()
        far.close()
    assert egressrelay._bulk_held == 0 and _pipes() == before
