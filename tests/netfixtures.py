"""The test internet: a network namespace behind a veth pair, with named hosts on
198.51.100.0/24 whose servers (tests/jail/inet_server.py) log what reached them.

Nothing of it reaches beyond this machine. The fixture is registered in the root
conftest, so one namespace serves every suite in a run.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"
SYSTEM_PY = "/usr/bin/python3"


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True)


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
