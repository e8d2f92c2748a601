"""The credential broker in real namespaces: sentinels in, real values out, for its hosts only.

An echo server on the test internet (198.51.100.40) answers as api.cred.test, the
credential's host, and as other.cred.test, an allowed host that is not, over TLS with
a certificate of the test's own; the proxy trusts it through a private trust file,
never the machine's. It echoes each request's head, so each test sees what arrived.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Sequence
from typing import Any

import pytest

from claude_sandbox.jail import egresspolicy, egressrecord
from claude_sandbox.jail import session as jail
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.launch.facts import credentials
from claude_sandbox.launch.session import tlsca
from tests.netfixtures import ECHO_HOST as HOST
from tests.netfixtures import ECHO_OTHER as OTHER

from .conftest import SYSTEM_PY, jail_available
from .test_jail import assert_torn_down

pytestmark = [
    pytest.mark.jail,
    pytest.mark.skipif(jail_available() is not None, reason=str(jail_available())),
]

REAL = "ghp_" + "R3alT0kenValue" * 2 + "ab"

CLIENT = r"""
import base64, json, socket, ssl, sys
ca, sentinel = sys.argv[1], sys.argv[2]

def exchange(name, port, requests, tls=True, verify=True):
    raw = socket.create_connection(("198.51.100.40", port), timeout=15)
    sock, issuer = raw, {}
    if tls:
        context = ssl.create_default_context(cafile=ca)
        if not verify:
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        sock = context.wrap_socket(raw, server_hostname=name)
        if verify:
            issuer = dict(x[0] for x in sock.getpeercert()["issuer"])
    answers = []
    reader = sock.makefile("rb")
    for request in requests:
        sock.sendall(request.replace(b"@S", sentinel.encode()))
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = reader.readline()
            if not line:
                break
            head += line
        sizes = [h.split(b":")[1] for h in head.split(b"\r\n")
                 if h.lower().startswith(b"content-length")]
        answers.append(json.loads(reader.read(int(sizes[0]))))
    sock.close()
    return {"issuer": issuer.get("commonName", ""), "answers": answers}

def req(name, headers, body=b"", chunked=False):
    lines = ["POST / HTTP/1.1", f"Host: {name}", *headers]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        parts = (body[:5], body[5:])
        data = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p) + b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
        data = body
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data

basic = base64.b64encode(("x-access-token:" + sentinel).encode()).decode()
host, other = "api.cred.test", "other.cred.test"
cases = [
    ("bearer", host, 443, True,
     [req(host, ["Authorization: Bearer @S", "X-Other: @S"], b"hello world", chunked=True),
      req(host, ["x-api-key: @S", "PRIVATE-TOKEN: @S", "Authorization: Basic " + basic])]),
    ("other", other, 443, True, [req(other, ["Authorization: Bearer @S"])]),
    ("fronted", host, 443, True, [req(other, ["Authorization: Bearer @S"])]),
    ("plain", host, 80, False, [req(host, ["Authorization: Bearer @S"])]),
]
results = {}
for label, name, port, tls, requests in cases:
    try:
        results[label] = exchange(name, port, requests, tls, verify=label != "other")
    except (OSError, ssl.SSLError, IndexError, ValueError) as exc:
        results[label] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(results), flush=True)
"""


def run_brokered(echo: dict[str, str], tmp_path: str, args: Sequence[str],
                 hosts: tuple[str, ...] = (HOST,), trust: str | None = None,
                 policy: str = "allow-list") -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """CLIENT jailed, with REAL brokered for `hosts`; (results, record, sentinel)."""
    store = os.path.join(tmp_path, "store")
    os.makedirs(store, mode=0o700, exist_ok=True)
    leaf = tlsca.ensure(store, hosts)
    ca = os.path.join(tmp_path, "broker-ca.pem")
    with open(ca, "w") as f:
        f.write(leaf.ca)
    sentinel = credentials.sentinel(REAL)
    broker = [leaf.chain, leaf.key, trust or echo["trust"], "1", sentinel, REAL, ",".join(hosts)]
    rules = tuple(r for line in (HOST, OTHER) for r in egresspolicy.parse_rule(line))
    spec = JailSpec((), (), (), egress_policy=policy, rules=rules if policy == "allow-list"
                    else (), agent="claude", hosts_file=echo["hosts"])
    where = os.path.join(tmp_path, f"record-{time.monotonic_ns()}")
    os.mkdir(where, 0o700)
    path, record_fd = egressrecord.create(where, {"session": "t", "agent": "claude",
                                                  "policy": "allow-list"})
    out = os.path.join(tmp_path, f"out-{time.monotonic_ns()}")
    argv = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--ro-bind", echo["hosts"], "/etc/hosts", "--bind", tmp_path,
            tmp_path, SYSTEM_PY, "-c", CLIENT, ca, sentinel, *args]
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
    saved = os.dup(1)
    try:
        os.dup2(fd, 1)
        j = jail.start(spec)
        private_dir = j.private_dir
        status = j.run(argv, {"PATH": "/usr/bin:/bin"}, record_fd=record_fd, broker=broker)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
        os.close(record_fd)
    assert_torn_down(j, private_dir)
    with open(out) as f:
        text = f.read()
    assert status == 0, text
    return json.loads(text.strip().splitlines()[-1]), egressrecord.read(path)[1:], sentinel


def _headers(answer: dict[str, Any]) -> dict[str, str]:
    return {h.split(":", 1)[0].lower(): h.split(":", 1)[1].strip() for h in answer["headers"]}


def test_the_real_value_reaches_the_credentials_host_only(
        echo_hosts: dict[str, str], tmp_path: str) -> None:
    import base64

    results, record, sentinel = run_brokered(echo_hosts, str(tmp_path), [])
    assert sentinel != REAL and len(sentinel) == len(REAL) and sentinel.startswith("ghp_")
    bearer = results["bearer"]
    assert bearer.get("issuer") == "claude-sandbox credential broker", bearer
    first, second = (_headers(a) for a in bearer["answers"])
    assert first["authorization"] == f"Bearer {REAL}"
    assert first["x-other"] == sentinel  # a header the broker does not rewrite
    assert bearer["answers"][0]["body"] == "hello world"  # a chunked body, whole
    assert second["x-api-key"] == REAL and second["private-token"] == REAL
    assert base64.b64decode(second["authorization"].split()[1]) == f"x-access-token:{REAL}".encode()
    # Another allowed host, and the credential's host in the clear: the sentinel arrives.
    assert _headers(results["other"]["answers"][0])["authorization"] == f"Bearer {sentinel}"
    assert _headers(results["plain"]["answers"][0])["authorization"] == f"Bearer {sentinel}"
    by_name = {(e["name"], e["port"]): e for e in record if "ended" not in e.get("rule", "")}
    assert by_name[(HOST, 443)]["terminated"] is True and by_name[(HOST, 443)]["injected"] == 4
    assert "terminated" not in by_name[(OTHER, 443)]
    assert by_name[(HOST, 80)]["other_sentinels"] == 1
    assert REAL not in json.dumps(record)
    # Domain fronting: the credential's name in TLS, another in Host: nothing goes out.
    assert "error" in results["fronted"], results["fronted"]
    fronted = [e for e in record if e["name"] == HOST and "ended" in e.get("rule", "")]
    assert fronted and "Host" in fronted[0]["rule"] and fronted[0]["sent"] == 0


def test_an_untrusted_host_gets_no_value(echo_hosts: dict[str, str], tmp_path: str) -> None:
    """The proxy verifies the real host: with a trust store that does not hold its
    certificate, the agent gets a 502 and nothing is sent."""
    other_trust = os.path.join(str(tmp_path), "empty-trust.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=nobody", "-keyout", os.path.join(str(tmp_path), "n.key"),
                    "-out", other_trust], check=True, capture_output=True)
    results, record, _ = run_brokered(echo_hosts, str(tmp_path), [], trust=other_trust)
    assert "error" in results["bearer"], results["bearer"]
    entry = next(e for e in record if (e["name"], e["port"]) == (HOST, 443))
    assert "the host's TLS failed" in entry["rule"] and entry["sent"] == 0


def test_under_open_the_credentials_host_is_still_terminated_and_reached_by_name(
        echo_hosts: dict[str, str], tmp_path: str) -> None:
    results, record, sentinel = run_brokered(echo_hosts, str(tmp_path), [], policy="open")
    first = _headers(results["bearer"]["answers"][0])
    assert first["authorization"] == f"Bearer {REAL}"
    assert _headers(results["other"]["answers"][0])["authorization"] == f"Bearer {sentinel}"
    entry = next(e for e in record if (e["name"], e["port"]) == (HOST, 443))
    assert entry["terminated"] is True and entry["upstream"] == "198.51.100.40"
