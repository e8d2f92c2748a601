"""The test internet's servers, run in their own network namespace (conftest.test_internet).

Each address answers as a named host: HTTP on 80 and TLS on 443 say which host
answered and which name was asked for; 2222 speaks first with a banner, as ssh
does; 53 (UDP) and 443 (UDP) only listen. Every connection and datagram that
arrives is logged, one line `ADDRESS PORT PROTO DETAIL`, so a test can prove what
did not arrive.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading

HOSTS = {"198.51.100.10": "allowed", "198.51.100.20": "other", "198.51.100.30": "evil"}
_lock = threading.Lock()


def log(path: str, *fields: object) -> None:
    with _lock, open(path, "a") as f:
        f.write(" ".join(str(x) for x in fields) + "\n")


def _head(conn: socket.socket | ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _host_header(head: bytes) -> str:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"host":
            return value.strip().decode(errors="replace")
    return "-"


def _reply(conn: socket.socket | ssl.SSLSocket, body: str) -> None:
    data = body.encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(data)).encode()
                 + b"\r\nConnection: close\r\n\r\n" + data)


def serve_tcp(path: str, address: str, port: int, keys: tuple[str, str] | None) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, port))
    listener.listen(256)
    label = HOSTS[address]

    def handle(conn: socket.socket) -> None:
        try:
            if port == 2222:
                log(path, address, port, "tcp", "-")
                conn.sendall(f"{label}-banner\n".encode())
            elif keys is not None:
                names: list[str] = []
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # one each: its SNI callback
                context.load_cert_chain(*keys)

                def sni(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
                    names.append(name or "-")

                context.sni_callback = sni  # type: ignore[assignment]
                tls = context.wrap_socket(conn, server_side=True)
                head = _head(tls)
                log(path, address, port, "tls", names[0] if names else "-")
                _reply(tls, f"{label} sni={names[0] if names else '-'} "
                       f"host={_host_header(head)}")
                tls.close()
                return
            else:
                head = _head(conn)
                log(path, address, port, "http", _host_header(head))
                _reply(conn, f"{label} host={_host_header(head)}")
        except OSError as exc:
            log(path, address, port, "error", type(exc).__name__)
        finally:
            conn.close()

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def serve_udp(path: str, address: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, port))
    while True:
        data, _ = sock.recvfrom(65535)
        log(path, address, port, "udp", len(data))


def main() -> None:
    path, cert, key = sys.argv[1:4]
    for address in HOSTS:
        for port, tls in ((80, None), (443, (cert, key)), (2222, None)):
            threading.Thread(target=serve_tcp, args=(path, address, port, tls),
                             daemon=True).start()
        for port in (53, 443):
            threading.Thread(target=serve_udp, args=(path, address, port), daemon=True).start()
    print("up", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
