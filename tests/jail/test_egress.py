"""Egress by name in real namespaces: the proxy, its DNS and its record, against a test internet.

Every target is a host the test_internet fixture made (198.51.100.0/24 in a
namespace behind a veth pair); its servers log what reached them, so each test
proves where a connection went, and where it did not.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from claude_sandbox.core.errors import EXIT_JAIL, SandboxError
from claude_sandbox.jail import egresspolicy, egressrecord
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.spec import JailSpec
from tests.netfixtures import Internet

from .conftest import SYSTEM_PY, jail_available
from .test_jail import assert_torn_down

pytestmark = [
    pytest.mark.jail,
    pytest.mark.skipif(jail_available() is not None, reason=str(jail_available())),
]

ALLOWED, OTHER, EVIL = "198.51.100.10", "198.51.100.20", "198.51.100.30"

# The agent's side: each argument is `kind:target`, each result one JSON line.
CLIENT = r"""
import json, socket, ssl, sys

def http(address, port, host, family=socket.AF_INET):
    with socket.socket(family) as s:
        s.settimeout(15)
        s.connect((address, port))
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = data.split(b" ", 2)[1].decode() if data else "-"
    return {"status": status, "body": data.partition(b"\r\n\r\n")[2].decode(errors="replace")}

def tls(address, port, name):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((address, port), timeout=15) as raw:
        with context.wrap_socket(raw, server_hostname=name) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    return {"body": data.partition(b"\r\n\r\n")[2].decode(errors="replace")}

def banner(address, port):
    with socket.create_connection((address, port), timeout=15) as s:
        return {"banner": s.recv(100).decode(errors="replace")}

def udp(address, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"quic?", (address, port))
    return {"sent": True}

def dns(server, name):
    query = (b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
             + b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0\0\1\0\1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(10)
        s.sendto(query, (server, 53))
        reply = s.recv(4096)
    return {"rcode": reply[3] & 15, "answers": int.from_bytes(reply[6:8], "big")}

for arg in sys.argv[1:]:
    kind, *rest = arg.split("|")
    try:
        if kind == "http":
            result = http(rest[0], int(rest[1]), rest[2])
        elif kind == "http6":
            result = http(rest[0], int(rest[1]), rest[2], socket.AF_INET6)
        elif kind == "tls":
            result = tls(rest[0], int(rest[1]), rest[2])
        elif kind == "banner":
            result = banner(rest[0], int(rest[1]))
        elif kind == "udp":
            result = udp(rest[0], int(rest[1]))
        elif kind == "dns":
            result = dns(rest[0], rest[1])
        elif kind == "wait":
            open(rest[0], "w").close()
            while not __import__("os").path.exists(rest[1]):
                __import__("time").sleep(0.01)
            continue
    except (OSError, ssl.SSLError) as exc:
        result = {"error": type(exc).__name__, "why": str(exc)}
    print(json.dumps({"arg": arg, **result}), flush=True)
"""


def _spec(internet: Internet, lines: Sequence[str] = ("allowed.test",),
          policy: str = "allow-list", allow_ip: Sequence[str] = ()) -> JailSpec:
    rules = tuple(rule for line in lines for rule in egresspolicy.parse_rule(line))
    return JailSpec(tuple(allow_ip), (), (), egress_policy=policy, rules=rules, agent="claude",
                    hosts_file=internet.hosts)


def run_agent(spec: JailSpec, internet: Internet, args: Sequence[str], tmp_path: str,
              during: object = None, client: str = CLIENT,
              ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Run CLIENT jailed under `spec`; (results by argument, the session's record)."""
    out = os.path.join(tmp_path, f"out-{time.monotonic_ns()}")
    where = os.path.join(tmp_path, f"record-{time.monotonic_ns()}")
    os.mkdir(where, 0o700)
    path, record_fd = egressrecord.create(where, {"session": "test", "agent": "claude",
                                                  "policy": spec.egress_policy})
    argv = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--ro-bind", internet.hosts, "/etc/hosts",
            "--bind", tmp_path, tmp_path, SYSTEM_PY, "-c", client, *args]
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    saved = os.dup(1)
    try:
        os.dup2(fd, 1)
        j = jail.start(spec)
        private_dir = j.private_dir
        helper = None
        if callable(during):
            helper = threading.Thread(target=during, args=(j,), daemon=True)
            helper.start()
        status = j.run(argv, {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, record_fd=record_fd)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
        os.close(record_fd)
    assert_torn_down(j, private_dir)
    with open(out) as f:
        text = f.read()
    assert status == 0, text
    results = {entry["arg"]: entry for entry in map(json.loads, text.splitlines())}
    return results, egressrecord.read(path)[1:]


def test_an_unlisted_name_is_refused_over_http_and_tls_with_the_reason(
        test_internet: Internet, tmp_path: str) -> None:
    test_internet.clear()
    args = [f"http|{EVIL}|80|evil.test", f"tls|{EVIL}|443|evil.test",
            f"http|{ALLOWED}|80|allowed.test", f"tls|{ALLOWED}|443|allowed.test"]
    results, record = run_agent(_spec(test_internet), test_internet, args, str(tmp_path))
    refused_http = results[args[0]]
    assert refused_http["status"] == "403"
    assert "evil.test:80 is not on the allow-list" in str(refused_http["body"])
    assert "allow-domain = evil.test" in str(refused_http["body"])
    assert "ACCESS_DENIED" in str(results[args[1]].get("why", "")).upper()
    assert results[args[2]]["body"] == "allowed host=allowed.test"
    assert str(results[args[3]]["body"]).startswith("allowed sni=allowed.test")
    assert not [line for line in test_internet.received() if line.startswith(EVIL)]
    verdicts = {(e["kind"], e["name"], e["verdict"]) for e in record}
    assert ("http", "evil.test", "refused") in verdicts
    assert ("tls", "evil.test", "refused") in verdicts
    assert ("tls", "allowed.test", "allowed") in verdicts
    allowed = [e for e in record if e["name"] == "allowed.test" and e["kind"] == "tls"]
    assert allowed[0]["received"] > 0 and allowed[0]["sent"] > 0


def test_dns_answers_no_unlisted_name_and_no_query_leaves(
        test_internet: Internet, tmp_path: str) -> None:
    test_internet.clear()
    made_up = "c2VjcmV0.exfil.evil.test"
    args = [f"dns|169.254.1.53|{made_up}", f"dns|{EVIL}|{made_up}", f"dns|8.8.8.8|{made_up}"]
    results, record = run_agent(_spec(test_internet), test_internet, args, str(tmp_path))
    for arg in args:
        assert results[arg] == {"arg": arg, "rcode": 3, "answers": 0}, results[arg]
    # The query to the test internet's own resolver address was answered here.
    assert not [line for line in test_internet.received() if " 53 " in line]
    assert [e["verdict"] for e in record if e["kind"] == "dns"] == ["refused"] * 3


def test_an_allowed_name_sent_to_another_address_reaches_the_allowed_host_only(
        test_internet: Internet, tmp_path: str) -> None:
    test_internet.clear()
    args = [f"tls|{OTHER}|443|allowed.test", f"http|{EVIL}|80|allowed.test"]
    results, record = run_agent(_spec(test_internet), test_internet, args, str(tmp_path))
    assert str(results[args[0]]["body"]).startswith("allowed sni=allowed.test")
    assert results[args[1]]["body"] == "allowed host=allowed.test"
    received = test_internet.received()
    assert not [line for line in received if line.startswith((OTHER, EVIL))], received
    assert {e["upstream"] for e in record} == {ALLOWED}


def test_other_tcp_needs_a_line_with_its_port(test_internet: Internet, tmp_path: str) -> None:
    test_internet.clear()
    args = [f"banner|{ALLOWED}|2222", f"banner|{OTHER}|2222"]
    spec = _spec(test_internet, ("allowed.test", "other.test", "allowed.test:2222"))
    results, record = run_agent(spec, test_internet, args, str(tmp_path))
    assert results[args[0]]["banner"] == "allowed-banner\n"
    assert results[args[1]].get("banner", "") == "" or "error" in results[args[1]]
    assert not [line for line in test_internet.received() if line.startswith(OTHER)]
    refused = [e for e in record if e["verdict"] == "refused"]
    assert refused and refused[0]["fix"] == "allow-domain = other.test:2222"


def test_udp_other_than_dns_raw_addresses_and_private_names_go_nowhere(
        test_internet: Internet, tmp_path: str) -> None:
    test_internet.clear()
    args = [f"udp|{ALLOWED}|443", f"http|{ALLOWED}|80|{ALLOWED}",
            f"http6|::ffff:{EVIL}|80|{EVIL}", f"http|{EVIL}|80|private.test",
            "http|10.213.99.9|80|allowed.test"]
    spec = _spec(test_internet, ("allowed.test", "private.test"))
    results, _ = run_agent(spec, test_internet, args, str(tmp_path))
    assert results[args[0]].get("error") == "PermissionError", results[args[0]]
    assert results[args[1]]["status"] == "403"
    assert "an address, not a name" in str(results[args[1]]["body"])
    assert results[args[2]]["status"] == "403", results[args[2]]
    assert results[args[3]]["status"] == "403"
    assert "private network" in str(results[args[3]]["body"])
    assert "error" in results[args[4]] or results[args[4]].get("status") == "-"
    assert test_internet.received() == []


def test_a_killed_proxy_ends_the_agents_reach(test_internet: Internet, tmp_path: str) -> None:
    ready, go = os.path.join(tmp_path, "ready"), os.path.join(tmp_path, "go")
    args = [f"http|{ALLOWED}|80|allowed.test", f"wait|{ready}|{go}",
            f"http|{ALLOWED}|80|allowed.test|after"]

    def kill_proxy(j: jail.Jail) -> None:
        while not os.path.exists(ready):
            time.sleep(0.01)
        pid = j.started["proxy"]
        pidfd = os.pidfd_open(pid)
        os.kill(pid, signal.SIGKILL)
        select.select([pidfd], [], [], 5)  # readable once it has exited
        os.close(pidfd)
        open(go, "w").close()

    results, _ = run_agent(_spec(test_internet), test_internet, args, str(tmp_path), kill_proxy)
    assert results[args[0]].get("body") == "allowed host=allowed.test", results
    after = results[args[2]]
    assert "error" in after, after


def test_a_proxy_killed_before_the_first_connection_ends_the_agents_reach(
        test_internet: Internet, tmp_path: str) -> None:
    """The proxy loads its handlers on the first connection (egressstart.py); until then
    its listeners alone stand between the agent and the network, and its death closes
    them: nothing gets out either way."""
    test_internet.clear()
    ready, go = os.path.join(tmp_path, "ready"), os.path.join(tmp_path, "go")
    args = [f"wait|{ready}|{go}", f"http|{ALLOWED}|80|allowed.test", f"dns|{ALLOWED}|allowed.test"]

    def kill_proxy(j: jail.Jail) -> None:
        while not os.path.exists(ready):
            time.sleep(0.01)
        pidfd = os.pidfd_open(j.started["proxy"])
        os.kill(j.started["proxy"], signal.SIGKILL)
        select.select([pidfd], [], [], 5)
        os.close(pidfd)
        open(go, "w").close()

    results, record = run_agent(_spec(test_internet), test_internet, args, str(tmp_path),
                                kill_proxy)
    assert "error" in results[args[1]], results
    assert "error" in results[args[2]], results
    assert test_internet.received() == []
    assert record == []


def test_a_proxy_that_fails_at_its_first_connection_refuses_it_and_says_why(
        test_internet: Internet, tmp_path: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """What the proxy loads on first use can still fail (here its serving half raises):
    the connection is refused, nothing reaches the internet, and the launch says why at
    the session's end."""
    from claude_sandbox.jail import egressproxy

    def broken(*_: object) -> None:
        raise RuntimeError("the test's")

    monkeypatch.setattr(egressproxy, "start", broken)  # the proxy is this process's fork
    test_internet.clear()
    args = [f"http|{ALLOWED}|80|allowed.test"]
    results, record = run_agent(_spec(test_internet), test_internet, args, str(tmp_path))
    assert "error" in results[args[0]], results
    assert test_internet.received() == [] and record == []
    said = capsys.readouterr().err
    assert "the egress proxy failed during the session (RuntimeError: the test's)" in said


def test_the_proxy_collects_what_it_makes_and_never_what_it_inherited(
        test_internet: Internet, tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch sets up with the collector off (__main__.py). The proxy serves through
    the session, so it turns the collector on at its start, with what it inherited
    frozen: a pass that freed a socket the holder dropped would close, by number, a
    descriptor the proxy opened since."""
    from claude_sandbox.jail import egressproxy

    seen = os.path.join(tmp_path, "collector")
    real = egressproxy.start

    def noting(*args: Any) -> Any:
        with open(seen, "w") as out:
            out.write(f"{gc.isenabled()} {gc.get_freeze_count()}")
        return real(*args)

    monkeypatch.setattr(egressproxy, "start", noting)  # runs in the proxy, this one's fork
    test_internet.clear()
    args = [f"http|{ALLOWED}|80|allowed.test"]
    gc.disable()  # as a launch runs its set-up
    try:
        results, _ = run_agent(_spec(test_internet), test_internet, args, str(tmp_path))
    finally:
        gc.enable()
    assert results[args[0]].get("body") == "allowed host=allowed.test", results
    with open(seen) as handle:
        enabled, frozen = handle.read().split()
    assert enabled == "True" and int(frozen) > 0


def test_a_session_that_opens_nothing_leaves_a_record_of_nothing(
        test_internet: Internet, tmp_path: str) -> None:
    results, record = run_agent(_spec(test_internet), test_internet, [], str(tmp_path))
    assert results == {} and record == []


def test_a_policy_the_proxy_cannot_read_refuses_the_launch_before_the_agent_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: str) -> None:
    """What the proxy checks before it says it serves still refuses the launch: a
    policy that does not parse, here one the launcher garbles on its way."""
    monkeypatch.setattr(egresspolicy.Policy, "fields", lambda self: ["no-such-mode", "x", "0"])
    marker = os.path.join(tmp_path, "ran")
    j = jail.start(JailSpec((), (), (), agent="claude"))
    private_dir = j.private_dir
    with pytest.raises(SandboxError) as info:
        j.run(["/usr/bin/touch", marker], {"PATH": "/usr/bin:/bin"})
    assert info.value.status == EXIT_JAIL
    assert "does not parse" in info.value.message
    assert not os.path.exists(marker)
    assert_torn_down(j, private_dir)


def test_open_reaches_every_public_name_and_records_it(
        test_internet: Internet, tmp_path: str) -> None:
    test_internet.clear()
    args = [f"http|{EVIL}|80|evil.test", f"banner|{OTHER}|2222", "http|10.213.99.9|80|x.test"]
    results, record = run_agent(_spec(test_internet, (), "learn"), test_internet, args,
                                str(tmp_path))
    assert results[args[0]]["body"] == "evil host=evil.test"
    assert results[args[1]]["banner"] == "other-banner\n"
    assert "error" in results[args[2]] or results[args[2]].get("status") in ("-", "403")
    assert egressrecord.learned(record) == ["allow-domain = evil.test",
                                            "allow-domain = other.test:2222"]


def test_a_flood_of_silent_and_malformed_clients_does_not_stop_the_proxy(
        test_internet: Internet, tmp_path: str) -> None:
    flood = r"""
import socket, sys, json
held = []
for i in range(1000):
    s = socket.create_connection(("198.51.100.30", 443 if i % 2 else 80), timeout=15)
    if i % 3 == 0:
        s.sendall(b"\x16\x03\x01\xff\xff" + b"\x01" * 64)  # a hello longer than it is
    elif i % 3 == 1:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")  # two Hosts
    held.append(s)
s = socket.create_connection(("198.51.100.10", 80), timeout=15)
s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
print(json.dumps({"arg": "flood", "body": data.partition(b"\r\n\r\n")[2].decode()}))
"""
    results, _ = run_agent(_spec(test_internet), test_internet, [], str(tmp_path), client=flood)
    assert results["flood"]["body"] == "allowed host=allowed.test"


def _host_service() -> tuple[socket.socket, list[str]]:
    """A service of "the host" (this namespace, where the launch runs) on every address:
    what the jail must never reach, whichever of the host's addresses it is asked at."""
    server = socket.create_server(("0.0.0.0", 0))
    server.settimeout(0.2)
    seen: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            seen.append(peer[0])
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server, seen


def test_the_hosts_local_ranges_and_an_address_it_gains_mid_session_go_nowhere(
        test_internet: Internet, tmp_path: str) -> None:
    """An AnyIP range the host answers for is blackholed at launch; an address the host
    gains after the launch is refused by the proxy, which asks the host's routing table at
    connect time. Both are the test's own (198.51.100.64/26, 198.51.100.130), under
    `open`, where every public name would be reached."""
    from claude_sandbox.jail import routes

    server, seen = _host_service()
    port = server.getsockname()[1]
    ready, go = os.path.join(tmp_path, "ready"), os.path.join(tmp_path, "go")
    args = [f"http|198.51.100.70|{port}|x.test", f"wait|{ready}|{go}",
            f"http|198.51.100.130|{port}|x.test"]
    added = []

    def gain_an_address(_: jail.Jail) -> None:
        while not os.path.exists(ready):
            time.sleep(0.01)
        subprocess.run(["ip", "addr", "add", "198.51.100.130/32", "dev", "lo"], check=True)
        added.append(True)
        open(go, "w").close()

    subprocess.run(["ip", "route", "add", "local", "198.51.100.64/26", "dev", "lo"], check=True)
    try:
        with open("/proc/net/fib_trie") as trie, open("/proc/net/route") as table:
            host = routes.host_addresses(trie.read(), table.read())
        assert "198.51.100.64/26" in host, host
        spec = JailSpec((), (), (), host=host, egress_policy="open", agent="claude",
                        hosts_file=test_internet.hosts)
        results, record = run_agent(spec, test_internet, args, str(tmp_path), gain_an_address)
    finally:
        subprocess.run(["ip", "route", "del", "local", "198.51.100.64/26", "dev", "lo"],
                       check=False)
        if added:
            subprocess.run(["ip", "addr", "del", "198.51.100.130/32", "dev", "lo"], check=False)
        server.close()
    assert "error" in results[args[0]], results[args[0]]  # the route plan's blackhole
    assert results[args[2]].get("status") != "200", results[args[2]]
    assert seen == [], f"the host's service was reached from {seen}"
    refused = [e for e in record if e.get("address") == "198.51.100.130"]
    assert refused and refused[0]["verdict"] == "refused", record
    assert "the host's own now (local route)" in refused[0]["rule"], refused[0]


def test_the_resolvers_answers_leave_from_its_own_address_whenever_it_starts() -> None:
    """The proxy starts before pasta has brought the namespace's loopback up: its UDP
    resolver, bound then, must still answer from 127.0.0.1, or a client connected to it
    drops every answer (one launch in five lost all its lookups that way)."""
    import sys

    code = f"""
import socket, sys
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(__file__)))!r})
from claude_sandbox.jail import egresslisten, netfilter
tcp, udp, tcp_dns = egresslisten.listeners()  # in a new namespace: lo is down until now
client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
client.connect(("127.0.0.1", netfilter.RESOLVER_PORT))
client.settimeout(5)
client.send(b"query")
data, peer = udp.recvfrom(100)
udp.sendto(b"answer", peer)
print(client.recv(100).decode())
"""
    ran = subprocess.run(["unshare", "-rn", sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, check=False)
    assert ran.stdout.strip() == "answer", (ran.stdout, ran.stderr)


# A corporate proxy on a private address: answers every CONNECT with 200, then serves
# the tunnel itself, naming the target it was asked for. Logs each request head.
UPSTREAM_PROXY = r"""
import socket, sys, threading
log = sys.argv[1]
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("10.213.88.2", 13128))
server.listen(16)
print("up", flush=True)

def serve(conn):
    with conn:
        reader = conn.makefile("rb")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = reader.readline()
            if not line:
                return
            head += line
        with open(log, "a") as f:
            f.write(head.decode().replace("\r\n", " | ") + "\n")
        first = head.split(b" ")
        if first[0] != b"CONNECT":
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        while not reader.readline() in (b"\r\n", b""):
            pass
        body = b"via-proxy " + first[1]
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                     % len(body) + body)

while True:
    conn, _ = server.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@pytest.fixture
def corporate_proxy(tmp_path: str) -> Any:
    """The proxy at 10.213.88.2:13128, in a namespace behind a veth pair of its own."""
    from tests.netfixtures import IP

    tag = os.getpid() % 100000
    ns, veth = f"csbxup{tag}", f"csbxu{tag}"
    log = os.path.join(tmp_path, "proxy.log")
    open(log, "w").close()
    server = None

    def ip(*args: str) -> None:
        subprocess.run([IP, *args], check=True, capture_output=True)

    try:
        ip("netns", "add", ns)
        ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("addr", "add", "10.213.88.1/30", "dev", veth)
        ip("link", "set", veth, "up")
        ip("-n", ns, "addr", "add", "10.213.88.2/30", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        server = subprocess.Popen([IP, "netns", "exec", ns, SYSTEM_PY, "-c", UPSTREAM_PROXY,
                                   log], stdout=subprocess.PIPE)
        assert server.stdout is not None and server.stdout.readline().strip() == b"up"
        yield log
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run([IP, "link", "del", veth], capture_output=True)
        subprocess.run([IP, "netns", "del", ns], capture_output=True)


def test_an_upstream_proxy_carries_what_is_allowed_and_nothing_else(
        test_internet: Internet, corporate_proxy: str, tmp_path: str) -> None:
    """HTTPS_PROXY names a proxy on a private address: what the egress proxy allowed goes
    through it by CONNECT to the judged name, with the login; what it refused never
    reaches it; NO_PROXY's names go direct; and the agent cannot use the proxy itself."""
    from claude_sandbox.jail import upstreamproxy

    test_internet.clear()
    chained = upstreamproxy.parse("http://alice:s3cret@10.213.88.2:13128", "HTTPS_PROXY",
                                  "other.test")
    chained = upstreamproxy.Upstream(chained.host, chained.port, chained.auth, chained.exempt,
                                     chained.origin, "10.213.88.2")
    rules = tuple(r for line in ("allowed.test", "other.test")
                  for r in egresspolicy.parse_rule(line))
    spec = JailSpec((), (), (), egress_policy="allow-list", rules=rules, agent="claude",
                    hosts_file=test_internet.hosts, upstream=chained.encode())
    args = [f"http|{ALLOWED}|80|allowed.test", f"http|{EVIL}|80|evil.test",
            f"http|{OTHER}|80|other.test", "http|10.213.88.2|13128|allowed.test"]
    results, record = run_agent(spec, test_internet, args, str(tmp_path))
    assert results[args[0]]["body"] == "via-proxy allowed.test:80", results[args[0]]
    assert results[args[1]]["status"] == "403"
    assert results[args[2]]["body"] == "other host=other.test"  # NO_PROXY: direct
    assert results[args[3]].get("status") != "200", results[args[3]]
    with open(corporate_proxy) as f:
        seen = f.read().splitlines()
    assert len(seen) == 1 and seen[0].startswith("CONNECT allowed.test:80 HTTP/1.1"), seen
    import base64

    assert f"Proxy-Authorization: Basic {base64.b64encode(b'alice:s3cret').decode()}" \
        in seen[0]
    received = test_internet.received()
    assert not [line for line in received if line.startswith((ALLOWED, EVIL))], received
    assert [line for line in received if line.startswith(OTHER)], received
    upstreams = {e["name"]: e["upstream"] for e in record if e["verdict"] == "allowed"}
    assert upstreams["allowed.test"] == "allowed.test through 10.213.88.2:13128"
    refused = [e for e in record if e["address"] == "10.213.88.2"]
    assert refused and refused[0]["verdict"] == "refused", record


def test_under_open_the_upstream_proxy_is_asked_for_the_checked_address(
        test_internet: Internet, corporate_proxy: str, tmp_path: str) -> None:
    """Under open the agent chooses every name: a name answered publicly here and
    privately at the proxy (DNS rebinding) would reach the network behind it, so the
    CONNECT names the address the egress proxy checked."""
    from claude_sandbox.jail import upstreamproxy

    chained = upstreamproxy.Upstream("10.213.88.2", 13128, "", (), "HTTPS_PROXY",
                                     "10.213.88.2")
    spec = JailSpec((), (), (), egress_policy="open", agent="claude",
                    hosts_file=test_internet.hosts, upstream=chained.encode())
    args = [f"http|{ALLOWED}|80|allowed.test"]
    results, _ = run_agent(spec, test_internet, args, str(tmp_path))
    assert results[args[0]]["body"] == f"via-proxy {ALLOWED}:80", results[args[0]]
    with open(corporate_proxy) as f:
        assert f.read().startswith(f"CONNECT {ALLOWED}:80 HTTP/1.1")
