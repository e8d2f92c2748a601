"""The egress proxy in a real jail, against the same jail without it, in the same run.

A server in a namespace of its own (198.51.100.10, behind a veth pair, as the jail
tests' test internet) answers `GET /N` with N bytes. The same client runs as a
jail's session twice: once as the agent does (its connections redirected to the
proxy), and once with the proxy's mark on its sockets (a session the holder execs
directly keeps its capabilities over the namespace), which skips the redirect and
goes straight through pasta: the floor. It reports, as ratios against that floor:

- throughput of one SIZE-byte transfer (target: at least 0.90 of the floor), as the
  median of the ratios of each pair of runs (a run through the proxy and the floor's run
  just before it): the floor alone drifts by a fifth from run to run on two cores, and a
  pair shares its moment;
- the median time from connect() to the first byte of a one-byte answer, over
  REQUESTS requests (target: at most 1 ms added);
- 1,000 connections held at once through the proxy, and the proxy's resident
  memory while they are (reported).

Root only (it makes the namespace and the route). Not a test:

    python3 bench/bench_egress.py [--size BYTES] [--requests N] [--held N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from claude_sandbox.jail import egresspolicy
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.spec import JailSpec

SERVER_ADDRESS = "198.51.100.10"
THROUGHPUT_TARGET = 0.90
LATENCY_TARGET_MS = 1.0
IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "/sbin/ip"

SERVER = r"""
import socket, sys, threading
block = b"\0" * (1 << 20)
def handle(conn):
    try:
        serve(conn)
    except OSError:  # a client that closes before the whole answer (the first-byte rows)
        conn.close()
def serve(conn):
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            return conn.close()
        head += chunk
    path = head.split(b" ")[1].decode()
    if path == "/hold":
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nx")
        conn.recv(1)
        return conn.close()
    size = int(path[1:])
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
    while size:
        size -= conn.send(block[:min(size, len(block))])
    conn.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 80)); s.listen(4096); print("up", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
"""

CLIENT = r"""
import json, socket, sys, time, os
mark, marker = sys.argv[1] == "1", sys.argv[5]
size, requests, held = (int(x) for x in sys.argv[2:5])
def connect():
    s = socket.socket()
    if mark:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, 0x6373)
    s.connect(("198.51.100.10", 80))
    return s
def get(path):
    s = connect()
    s.sendall(b"GET /" + path.encode() + b" HTTP/1.1\r\nHost: bench.test\r\n\r\n")
    return s
result = {}
start = time.perf_counter()
s = get(str(size)); got = 0; buffer = bytearray(1 << 20)
while n := s.recv_into(buffer):
    got += n
result["seconds"] = time.perf_counter() - start
result["bytes"] = got
s.close()
firsts = []
for _ in range(requests):
    t = time.perf_counter()
    s = get("1")
    s.recv(1)
    firsts.append(time.perf_counter() - t)
    s.close()
result["first_byte"] = sorted(firsts)[len(firsts) // 2]
if held:
    conns = []
    for _ in range(held):
        c = get("hold")
        conns.append(c)
    answered = sum(1 for c in conns if c.recv(64))
    result["held"] = answered
    open(marker, "w").close()
    while not os.path.exists(marker + ".go"):
        time.sleep(0.01)
    for c in conns:
        c.close()
print(json.dumps(result), flush=True)
"""


def _ip(*args: str) -> None:
    subprocess.run([IP, *args], check=True, capture_output=True)


def _network(script: str = SERVER, *args: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """The server's namespace behind a veth pair, SERVER_ADDRESS routed to it, and the
    server (`script`, given the address and `args`) started there; bench_inject.py too."""
    tag = str(os.getpid() % 100000)
    ns, veth = f"csbxbench{tag}", f"csbxb{tag}"
    _ip("netns", "add", ns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
    _ip("addr", "add", "203.0.113.5/30", "dev", veth)
    _ip("link", "set", veth, "up")
    _ip("-n", ns, "addr", "add", "203.0.113.6/30", "dev", "eth0")
    _ip("-n", ns, "addr", "add", f"{SERVER_ADDRESS}/32", "dev", "lo")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "route", "add", "default", "via", "203.0.113.5")
    _ip("route", "add", f"{SERVER_ADDRESS}/32", "via", "203.0.113.6")
    server = subprocess.Popen([IP, "netns", "exec", ns, sys.executable, "-c", script,
                               SERVER_ADDRESS, *args], stdout=subprocess.PIPE)
    assert server.stdout is not None and server.stdout.readline().strip() == b"up"
    return server, ns, veth


def _session(mark: bool, size: int, requests: int, held: int, work: str) -> dict[str, float]:
    rules = egresspolicy.parse_rule("bench.test")
    hosts = os.path.join(work, "hosts")
    Path(hosts).write_text(f"{SERVER_ADDRESS} bench.test\n")
    marker = os.path.join(work, f"held-{time.monotonic_ns()}")
    out = os.path.join(work, f"out-{time.monotonic_ns()}")
    argv = [sys.executable, "-c", CLIENT, "1" if mark else "0", str(size), str(requests),
            str(held), marker]
    if not mark:  # as the agent: inside bwrap, without capabilities
        argv = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--unshare-pid", "--bind", work, work, *argv]
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    saved = os.dup(1)
    os.dup2(fd, 1)  # before the holder starts: the session inherits its stdout
    j = jail.start(JailSpec((), (), (), rules=rules, agent="bench", hosts_file=hosts))
    rss: list[int] = []

    def watch() -> None:
        while not os.path.exists(marker):
            time.sleep(0.01)
        with open(f"/proc/{j.started['proxy']}/status") as f:
            rss.extend(int(line.split()[1]) for line in f if line.startswith("VmRSS"))
        open(marker + ".go", "w").close()

    if held:
        threading.Thread(target=watch, daemon=True).start()
    try:
        status = j.run(argv, {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
    text = Path(out).read_text()
    if status != 0 or not text.strip():
        raise SystemExit(f"the session failed ({status}): {text[-500:]}")
    result: dict[str, float] = json.loads(text.strip().splitlines()[-1])
    if rss:
        result["proxy_rss_kib"] = rss[0]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1 << 30)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--held", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_egress: run as root (it makes a namespace and a route)", file=sys.stderr)
        return 1
    server, ns, veth = _network()
    try:
        with tempfile.TemporaryDirectory(prefix="csbx-bench-") as work:
            floor, proxied = [], []
            for _ in range(args.runs):  # alternating, so drift hits both alike
                floor.append(_session(True, args.size, args.requests, 0, work))
                proxied.append(_session(False, args.size, args.requests, 0, work))
            held = _session(False, 1 << 20, 10, args.held, work)
    finally:
        server.kill()
        server.wait()
        subprocess.run([IP, "route", "del", f"{SERVER_ADDRESS}/32"], capture_output=True)
        subprocess.run([IP, "link", "del", veth], capture_output=True)
        subprocess.run([IP, "netns", "del", ns], capture_output=True)

    def rate(results: list[dict[str, float]]) -> float:
        return statistics.median(r["bytes"] / r["seconds"] for r in results)

    def first(results: list[dict[str, float]]) -> float:
        return statistics.median(r["first_byte"] for r in results) * 1000

    ratios = sorted((p["bytes"] / p["seconds"]) / (f["bytes"] / f["seconds"])
                    for f, p in zip(floor, proxied, strict=True))
    ratio = statistics.median(ratios)
    spread = f"{ratios[len(ratios) // 4]:.2f} to {ratios[(3 * len(ratios)) // 4]:.2f}"
    added = first(proxied) - first(floor)
    print(f"throughput: floor {rate(floor) / 1e6:.0f} MB/s, through the proxy "
          f"{rate(proxied) / 1e6:.0f} MB/s (medians); ratio {ratio:.2f}, the median of "
          f"{len(ratios)} pairs, middle half {spread} (target >= {THROUGHPUT_TARGET})")
    print(f"connect to first byte: floor {first(floor):.3f} ms, through the proxy "
          f"{first(proxied):.3f} ms, added {added:.3f} ms (target <= {LATENCY_TARGET_MS})")
    print(f"held at once through the proxy: {held.get('held', 0):.0f} of {args.held}; "
          f"the proxy's resident memory then: {held.get('proxy_rss_kib', 0) / 1024:.1f} MiB")
    met = ratio >= THROUGHPUT_TARGET and added <= LATENCY_TARGET_MS and \
        held.get("held", 0) == args.held
    print("targets met" if met else "targets NOT met")
    return 0 if met else 2


if __name__ == "__main__":
    raise SystemExit(main())
