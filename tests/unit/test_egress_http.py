"""A plain HTTP connection judged by its Host (egresshttp.py), over real TCP on loopback.

The server end stands for a CDN's front end that routes each request by its own Host:
what reaches it is what such a front end would route.
"""

from __future__ import annotations

import socket
import threading

from claude_sandbox.jail import egresshttp

FIRST = b"GET / HTTP/1.1\r\nHost: registry.example\r\n\r\n"


def _pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    return near, far


def _run(rest: bytes, answer: bytes) -> tuple[bytes, bytes, dict[str, object]]:
    """The client sends `rest` after the judged first request, the server answers
    `answer`; (what the server got, what the client got, the record's entry)."""
    client, near = _pair()
    far, server = _pair()
    client.sendall(rest)
    client.shutdown(socket.SHUT_WR)
    got = bytearray()

    def serve() -> None:
        while chunk := server.recv(4096):
            got.extend(chunk)
            if answer and len(got) >= len(FIRST):
                server.sendall(answer)
                break
        server.shutdown(socket.SHUT_WR)
        while chunk := server.recv(4096):
            got.extend(chunk)

    thread = threading.Thread(target=serve)
    thread.start()
    entry: dict[str, object] = {"rule": "allow-domain = registry.example"}
    egresshttp.relay(near, far, FIRST, "registry.example", 80, entry, idle=10)
    for sock in (near, far):
        sock.close()
    thread.join()
    back = bytearray()
    while chunk := client.recv(4096):
        back.extend(chunk)
    for sock in (client, server):
        sock.close()
    return bytes(got), bytes(back), entry


def test_requests_for_the_judged_host_pass_both_ways() -> None:
    second = b"GET /b HTTP/1.1\r\nHost: registry.example:80\r\n\r\n"
    got, back, entry = _run(second, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert got == FIRST + second
    assert back.startswith(b"HTTP/1.1 200 OK")
    assert "ended" not in str(entry["rule"])


def test_a_second_request_for_another_site_on_the_same_front_end_never_reaches_it() -> None:
    second = b"POST /c HTTP/1.1\r\nHost: exfil.example\r\nContent-Length: 6\r\n\r\nsecret"
    got, _, entry = _run(second, b"")
    assert got == FIRST and b"secret" not in got
    assert "a Host that is not the connection's server name" in str(entry["rule"])


def test_a_websocket_the_server_refuses_does_not_open_the_stream() -> None:
    client, near = _pair()
    far, server = _pair()
    upgrade = b"GET /ws HTTP/1.1\r\nHost: registry.example\r\nUpgrade: websocket\r\n\r\n"
    client.sendall(b"GET / HTTP/1.1\r\nHost: exfil.example\r\n\r\n")
    client.shutdown(socket.SHUT_WR)
    server.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    entry: dict[str, object] = {"rule": "r"}
    egresshttp.relay(near, far, upgrade, "registry.example", 80, entry, idle=10)
    far.close()
    got = bytearray()
    while chunk := server.recv(4096):
        got.extend(chunk)
    assert bytes(got) == upgrade and "Host" in str(entry["rule"])
    for sock in (client, near, server):
        sock.close()
