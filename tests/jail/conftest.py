"""Fixtures for the real-namespace jail tests: a private test network and probes.

Traffic goes only to addresses these fixtures create (a 10.x and a 192.168.x
host in `ip netns` namespaces behind veth pairs, listeners on the container's
127.0.0.1, and a test internet: a namespace behind a veth pair with named hosts
on 198.51.100.0/24, routed from here like any public address), plus the package
index for the real-egress test.
Run them under the shared lock: `flock /tmp/claude-sandbox-ns.lock pytest -m jail`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"
SYSTEM_PY = "/usr/bin/python3"


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True)


def processes_naming(path: str) -> list[int]:
    """Every process whose command line names `path`: the leak check, read from /proc
    independently of the jail's own teardown code."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if path.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def jail_available() -> str | None:
    if os.geteuid() != 0:
        return "the jail tests build veth pairs and need root"
    for tool in ("pasta", "socat", "unshare", "bwrap"):
        if shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin") is None:
            return f"{tool} is not installed"
    try:
        os.close(os.open("/dev/net/tun", os.O_RDWR))
    except OSError:
        return "/dev/net/tun is not usable (chmod 666 /dev/net/tun)"
    return None


@dataclass(frozen=True)
class Host:
    address: str
    port: int


@dataclass(frozen=True)
class PrivateNet:
    private10: Host
    private192: Host


def _serve_in_netns(ns: str, address: str, port: int) -> subprocess.Popen[bytes]:
    code = (
        "import socket\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(({address!r},{port})); s.listen(16); print('up', flush=True)\n"
        "while True:\n"
        "    c,_=s.accept(); c.sendall(b'hello'); c.close()\n"
    )
    proc = subprocess.Popen(
        [IP, "netns", "exec", ns, sys.executable, "-c", code], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    return proc


@pytest.fixture(scope="session")
def private_net() -> Iterator[PrivateNet]:
    """Two hosts in namespaces, 10.213.77.2 and 192.168.213.2, routed from here."""
    tag = f"{os.getpid() % 100000}"
    made: list[tuple[str, str]] = []
    servers: list[subprocess.Popen[bytes]] = []
    try:
        for n, (outer, inner) in enumerate(
            (("10.213.77.1", "10.213.77.2"), ("192.168.213.1", "192.168.213.2"))
        ):
            ns, veth = f"csbxt{tag}n{n}", f"csbx{tag}v{n}"
            _ip("netns", "add", ns)
            made.append((ns, veth))
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("addr", "add", f"{outer}/30", "dev", veth)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{inner}/30", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            servers.append(_serve_in_netns(ns, inner, 18080))
        yield PrivateNet(Host("10.213.77.2", 18080), Host("192.168.213.2", 18080))
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
        for ns, veth in made:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", veth)
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", ns)


class LoopbackServer:
    """A listener on the container's 127.0.0.1 that answers `hello`."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.fixture
def loopback_server() -> Iterator[LoopbackServer]:
    server = LoopbackServer()
    yield server
    server.close()


# A probe run inside the jail: connect to each HOST:PORT, print one line each.
PROBE = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2) as c:
            print(target, "connected", c.recv(5).decode(), flush=True)
    except OSError as e:
        print(target, "refused", type(e).__name__, flush=True)
"""
