"""The credential broker's cost: a terminated, injected request against a spliced one.

A TLS server in a namespace of its own (198.51.100.10, behind a veth pair, as the jail
tests' test internet) answers as bench.test and as cred.bench.test with one
certificate; `GET /N` gets N bytes. A jailed client, inside bwrap as the agent is,
makes REQUESTS requests to each name, each on a new connection with its own handshake:
to bench.test the proxy splices, to cred.bench.test (a credential's host) it
terminates TLS, puts the real value back and opens its own TLS. It reports:

- the median time of a whole request (connect, handshake, request, answer) on each
  path, and what termination adds (target: at most 5 ms);
- the throughput of one SIZE-byte answer on each path (reported).

Root only (it makes the namespace and the route). Not a test:

    python3 bench/bench_inject.py [--size BYTES] [--requests N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_egress
from claude_sandbox.jail import egresspolicy
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.launch.facts import credentials
from claude_sandbox.launch.session import tlsca

SERVER_ADDRESS = bench_egress.SERVER_ADDRESS
ADDED_TARGET_MS = 5.0
IP = bench_egress.IP
REAL = "ghp_" + "BenchRealValue00" * 2 + "zz"

SERVER = r"""
import socket, ssl, sys, threading
block = b"\0" * (1 << 20)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[2], sys.argv[3])
def handle(raw):
    try:
        conn = context.wrap_socket(raw, server_side=True)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        size = int(head.split(b" ")[1][1:])
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        while size:
            size -= conn.send(block[:min(size, len(block))])
        conn.close()
    except (OSError, ssl.SSLError):
        pass
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 443)); s.listen(1024); print("up", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
"""

CLIENT = r"""
import json, socket, ssl, sys, time
cafile, sentinel, size, requests = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
context = ssl.create_default_context(cafile=cafile)
def get(name, path):
    raw = socket.create_connection(("198.51.100.10", 443))
    s = context.wrap_socket(raw, server_hostname=name)
    s.sendall(f"GET /{path} HTTP/1.1\r\nHost: {name}\r\nAuthorization: Bearer {sentinel}"
              "\r\n\r\n".encode())
    got, buffer = 0, bytearray(1 << 20)
    while n := s.recv_into(buffer):
        got += n
    s.close()
    return got
result = {}
for label, name in (("spliced", "bench.test"), ("terminated", "cred.bench.test")):
    times = []
    for _ in range(requests):
        t = time.perf_counter()
        get(name, "1")
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    got = get(name, str(size))
    result[label] = {"request": sorted(times)[len(times) // 2],
                     "rate": got / (time.perf_counter() - t)}
print(json.dumps(result), flush=True)
"""


def _network(work: str) -> tuple[subprocess.Popen[bytes], str, str, str]:
    """bench_egress's namespace and route, with this TLS server and its certificate."""
    cert, key = os.path.join(work, "server.pem"), os.path.join(work, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=bench.test", "-addext",
                    "subjectAltName=DNS:bench.test,DNS:cred.bench.test", "-keyout", key,
                    "-out", cert], check=True, capture_output=True)
    server, ns, veth = bench_egress._network(SERVER, cert, key)
    return server, ns, veth, cert


def _session(work: str, cert: str, size: int, requests: int) -> dict[str, dict[str, float]]:
    hosts = os.path.join(work, "hosts")
    Path(hosts).write_text(f"{SERVER_ADDRESS} bench.test cred.bench.test\n")
    store = os.path.join(work, "store")
    os.makedirs(store, mode=0o700, exist_ok=True)
    leaf = tlsca.ensure(store, ("cred.bench.test",))
    trust = os.path.join(work, "trust.pem")
    Path(trust).write_text(Path(cert).read_text() + leaf.ca)
    sentinel = credentials.sentinel(REAL)
    broker = [leaf.chain, leaf.key, cert, "1", sentinel, REAL, "cred.bench.test"]
    rules = tuple(r for line in ("bench.test", "cred.bench.test")
                  for r in egresspolicy.parse_rule(line))
    out = os.path.join(work, f"out-{time.monotonic_ns()}")
    argv = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--bind", work, work, sys.executable, "-c", CLIENT, trust,
            sentinel, str(size), str(requests)]
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    saved = os.dup(1)
    os.dup2(fd, 1)
    try:
        j = jail.start(JailSpec((), (), (), rules=rules, agent="bench", hosts_file=hosts))
        status = j.run(argv, {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, broker=broker)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
    text = Path(out).read_text()
    if status != 0 or not text.strip():
        raise SystemExit(f"the session failed ({status}): {text[-500:]}")
    result: dict[str, dict[str, float]] = json.loads(text.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256 << 20)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_inject: run as root (it makes a namespace and a route)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="csbx-bench-") as work:
        os.chmod(work, 0o755)
        server, ns, veth, cert = _network(work)
        try:
            result = _session(work, cert, args.size, args.requests)
        finally:
            server.kill()
            server.wait()
            subprocess.run([IP, "route", "del", f"{SERVER_ADDRESS}/32"], capture_output=True)
            subprocess.run([IP, "link", "del", veth], capture_output=True)
            subprocess.run([IP, "netns", "del", ns], capture_output=True)
    spliced, terminated = result["spliced"], result["terminated"]
    added = (terminated["request"] - spliced["request"]) * 1000
    print(f"a whole request: spliced {spliced['request'] * 1000:.2f} ms, terminated and "
          f"injected {terminated['request'] * 1000:.2f} ms, added {added:.2f} ms "
          f"(target <= {ADDED_TARGET_MS})")
    print(f"throughput: spliced {spliced['rate'] / 1e6:.0f} MB/s, terminated "
          f"{terminated['rate'] / 1e6:.0f} MB/s, ratio "
          f"{terminated['rate'] / spliced['rate']:.2f} (reported)")
    met = added <= ADDED_TARGET_MS
    print("target met" if met else "target NOT met")
    return 0 if met else 2


if __name__ == "__main__":
    raise SystemExit(main())
