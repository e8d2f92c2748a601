"""The test internet: a network namespace behind a veth pair, with named hosts on
198.51.100.0/24 whose servers (tests/jail/inet_server.py) log what reached them.

Nothing of it reaches beyond this machine. The fixture is registered in the root
conftest, so one namespace serves every suite in a run.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"
SYSTEM_PY = "/usr/bin/python3"


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True)


# What the network fixtures add to the host beside their own csbx-named namespaces and
# links: addresses and local routes on lo (test_egress's AnyIP test) and the route to the
# test internet (gone with its veth, named here in case the veth went first).
_HOST_LEFTOVERS = (("addr", "del", "198.51.100.130/32", "dev", "lo"),
                   ("route", "del", "local", "198.51.100.64/26", "dev", "lo"),
                   ("route", "del", "198.51.100.0/24"))


@pytest.fixture(scope="session", autouse=True)
def no_leftovers_from_an_earlier_run() -> None:
    """A run killed before its teardown (a time limit, SIGKILL) leaves its namespaces,
    veths and routes behind, and the next run's set-up then collides with them
    (`ip route add`: File exists). One run at a time owns these names (the session also
    takes over /etc/claude-sandbox.conf), so every csbx-named namespace or link found
    at the start is an earlier run's."""
    if os.getuid() != 0:
        return
    listed = subprocess.run([IP, "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        if line.startswith("csbx"):
            subprocess.run([IP, "netns", "del", line.split()[0]], capture_output=True)
    links = subprocess.run([IP, "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(": ")[1].split("@")[0]
        if name.startswith("csbx"):
            subprocess.run([IP, "link", "del", name], capture_output=True)
    for args in _HOST_LEFTOVERS:
        subprocess.run([IP, *args], capture_output=True)


@dataclass(frozen=True)
class Internet:
    """The test internet: three named hosts, their names in `hosts` (a hosts file the
    test shows the jail in place of /etc/hosts), and what each one received."""

    hosts: str
    log: str
    ca: str  # the servers' certificate, for a client that verifies
    namespace: str  # its `ip netns` name: a test may open a listener of its own there

    def received(self) -> list[str]:
        with open(self.log) as f:
            return f.read().splitlines()

    def clear(self) -> None:
        open(self.log, "w").close()


INTERNET_NAMES = {"allowed.test": "198.51.100.10", "other.test": "198.51.100.20",
                  "evil.test": "198.51.100.30", "mock-api.test": "198.51.100.40",
                  "private.test": "10.213.99.9"}


@pytest.fixture(scope="session")
def test_internet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Internet]:
    """A namespace over a veth pair (203.0.113.1/30 here, .2 there) holding
    198.51.100.10/.20/.30 and their servers (inet_server.py); 198.51.100.0/24 is
    routed to it. Nothing of it reaches beyond this machine."""
    base = tmp_path_factory.mktemp("inet")
    cert, key = str(base / "cert.pem"), str(base / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=allowed.test", "-addext",
                    "subjectAltName=DNS:allowed.test,DNS:other.test,DNS:evil.test",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    hosts = base / "hosts"
    hosts.write_text("127.0.0.1 localhost\n" + "".join(
        f"{address} {name}\n" for name, address in INTERNET_NAMES.items()))
    log = base / "received.log"
    log.write_text("")
    ns, veth = f"csbxinet{os.getpid() % 100000}", f"csbxi{os.getpid() % 100000}"
    server = None
    routed = False
    try:
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("addr", "add", "203.0.113.1/30", "dev", veth)
        _ip("link", "set", veth, "up")
        _ip("-n", ns, "addr", "add", "203.0.113.2/30", "dev", "eth0")
        for address in ("198.51.100.10", "198.51.100.20", "198.51.100.30", "198.51.100.40"):
            _ip("-n", ns, "addr", "add", f"{address}/32", "dev", "lo")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "route", "add", "default", "via", "203.0.113.1")
        _ip("route", "add", "198.51.100.0/24", "via", "203.0.113.2")
        routed = True
        script = os.path.join(os.path.dirname(__file__), "jail", "inet_server.py")
        server = subprocess.Popen([IP, "netns", "exec", ns, SYSTEM_PY, script, str(log), cert,
                                   key], stdout=subprocess.PIPE)
        assert server.stdout is not None and server.stdout.readline().strip() == b"up"
        yield Internet(str(hosts), str(log), cert, ns)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        if routed:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("route", "del", "198.51.100.0/24")
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", veth)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", ns)


ECHO_HOST, ECHO_OTHER = "api.cred.test", "other.cred.test"


def _echo(listener: socket.socket, context: ssl.SSLContext | None, log: str) -> None:
    """Answer every request with its head and body, as JSON; keep-alive. Each request's
    headers are also logged, one JSON line, for a client that cannot show the answer."""
    while True:
        try:
            raw, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_echo_one, args=(raw, context, log), daemon=True).start()


def _echo_one(raw: socket.socket, context: ssl.SSLContext | None, log: str) -> None:
    try:
        conn = context.wrap_socket(raw, server_side=True) if context else raw
        conn.settimeout(15)
        reader = conn.makefile("rb")
        while True:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = reader.readline()
                if not line:
                    return
                head += line
            headers = [line.decode() for line in head.split(b"\r\n")[1:] if line]
            fields = {h.split(":", 1)[0].lower(): h.split(":", 1)[1].strip() for h in headers}
            body = b""
            if fields.get("transfer-encoding") == "chunked":
                while (size := int(reader.readline().split(b";")[0], 16)):
                    body += reader.read(size)
                    reader.readline()
                reader.readline()
            else:
                body = reader.read(int(fields.get("content-length", "0")))
            data = json.dumps({"headers": headers, "body": body.decode()}).encode()
            with open(log, "a") as handle:
                handle.write(json.dumps(headers) + "\n")
            if b"/info/refs" in head.split(b"\r\n")[0] and "authorization" not in fields:
                # As a git host does: a challenge, so that git asks its credential helper.
                conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic "
                             b"realm=\"echo\"\r\nContent-Length: 0\r\n\r\n")
                continue
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    except (OSError, ssl.SSLError, ValueError):
        pass
    finally:
        raw.close()


@pytest.fixture
def echo_hosts(test_internet: Internet, tmp_path: str) -> Iterator[dict[str, str]]:
    """An echo server on 198.51.100.40 (443 over TLS, 80 in the clear) answering as
    ECHO_HOST and ECHO_OTHER; a hosts file with their names, the echo's certificate
    (`trust`) and a private copy of the system bundle with it added (`bundle`), for a
    launch to see in place of the machine's, which no test changes."""
    base = str(tmp_path)
    cert, key = os.path.join(base, "echo.pem"), os.path.join(base, "echo.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", f"/CN={ECHO_HOST}", "-addext",
                    f"subjectAltName=DNS:{ECHO_HOST},DNS:{ECHO_OTHER}",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    hosts = os.path.join(base, "hosts")
    with open(test_internet.hosts) as f, open(hosts, "w") as out:
        out.write(f.read() + f"198.51.100.40 {ECHO_HOST} {ECHO_OTHER}\n")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listeners = [listening_in(test_internet.namespace, "198.51.100.40", 443),
                 listening_in(test_internet.namespace, "198.51.100.40", 80)]
    log = os.path.join(base, "echo.log")
    open(log, "w").close()
    for listener, ctx in zip(listeners, (context, None), strict=True):
        threading.Thread(target=_echo, args=(listener, ctx, log), daemon=True).start()
    try:
        bundle = os.path.join(base, "bundle.pem")
        with open("/etc/ssl/certs/ca-certificates.crt") as system, open(cert) as mine, \
                open(bundle, "w") as out:
            out.write(system.read() + mine.read())
        for path in (base, hosts, cert, bundle):
            os.chmod(path, 0o755 if os.path.isdir(path) else 0o644)
        yield {"hosts": hosts, "trust": cert, "bundle": bundle, "log": log}
    finally:
        for listener in listeners:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() a thread is in
            listener.close()


def listening_in(namespace: str, address: str, port: int) -> socket.socket:
    """A TCP listener made in the test internet's namespace (198.51.100.40 is free for
    one): a thread joins the namespace only to make it, and a socket keeps the
    namespace it was made in, so this process serves it from anywhere."""
    made: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:  # NEWNET
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            made.append(socket.create_server((address, port)))
        except BaseException as error:
            made.append(error)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]
