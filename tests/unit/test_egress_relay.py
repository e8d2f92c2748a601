"""The egress proxy's relay over real TCP on loopback: every byte, both ways, in order.

A client talks to the relay's near end; the relay's far end is connected to a server.
Nothing here needs a namespace: the relay itself knows only two sockets.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading

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
