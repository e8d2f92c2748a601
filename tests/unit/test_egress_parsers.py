"""The egress proxy's parsers and its policy: the bytes are the agent's, so fuzzed.

Real ClientHellos come from Python's own TLS stack (a memory BIO), real DNS queries
are built by hand as resolvers send them.
"""

from __future__ import annotations

import ssl
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.jail import dnsmsg, egresspolicy, httphead, tlshello

# The shipped probes' own hello builder (probe A70 sends what these tests parse).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "verification"))
from probes import hello_with_extension


def hello(name: str | None) -> bytes:
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_the_server_name_of_a_real_hello() -> None:
    assert tlshello.server_name(hello("Registry.NPMJS.org")) == "registry.npmjs.org"
    data = hello("example.test")
    for cut in (1, 5, 40, len(data) - 1):
        with pytest.raises(tlshello.Incomplete):
            tlshello.server_name(data[:cut])


@pytest.mark.parametrize("kind", [0xFE0D, 0xFFCE])
def test_an_encrypted_hello_is_refused_whatever_its_outer_name(kind: int) -> None:
    # The outer name may be any allowed one on the front end that holds the ECH key;
    # the inner hello, which it routes by, names the agent's own site.
    plain = hello("registry.npmjs.org")
    grease = hello_with_extension(plain, 0x4469, b"\x00")
    assert tlshello.server_name(grease) == "registry.npmjs.org"
    with pytest.raises(tlshello.Malformed, match="encrypted ClientHello"):
        tlshello.server_name(hello_with_extension(plain, kind, b"\x00" * 40))


def test_a_hello_without_a_name_or_with_an_address() -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    assert tlshello.server_name(outgoing.read()) is None
    # Python sends no SNI for an address; a hand-made one is refused.
    with pytest.raises(tlshello.Malformed):
        tlshello.hostname(b"198.51.100.7")


def test_not_tls_is_malformed() -> None:
    for data in (b"GET / HTTP/1.1\r\n\r\n", b"\x16\x02\x00\x00\x05hello", bytes(64)):
        with pytest.raises(tlshello.Malformed):
            tlshello.server_name(data)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=600), st.integers(min_value=0, max_value=600))
def test_fuzzed_hellos_only_parse_or_refuse(noise: bytes, at: int) -> None:
    base = bytearray(hello("fuzz.example.test"))
    at = min(at, len(base))
    mutated = bytes(base[:at]) + noise + bytes(base[at + len(noise):])
    try:
        name = tlshello.server_name(mutated)
    except (tlshello.Malformed, tlshello.Incomplete):
        return
    assert name is None or set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-.")


def test_http_host() -> None:
    head = b"GET /x HTTP/1.1\r\nHost: Example.TEST:8080\r\nAccept: */*\r\n\r\nbody"
    assert httphead.host(head) == ("example.test", 8080)
    assert httphead.host(b"POST / HTTP/1.0\r\nhost: a.b\r\n\r\n") == ("a.b", None)
    with pytest.raises(httphead.Incomplete):
        httphead.host(b"GET / HTTP/1.1\r\nHost: a")
    for bad in (b"GET / HTTP/1.1\r\nHost: a.b\r\nHost: c.d\r\n\r\n",  # two hosts
                b"GET / HTTP/1.1\r\n\r\n",  # none
                b"CONNECT a.b:443 HTTP/1.1\r\nHost: a.b\r\n\r\n",
                b"GET http://a.b/ HTTP/1.1\r\nHost: a.b\r\n\r\n",
                b"GET / HTTP/1.1\r\nHost : a.b\r\n\r\n",
                b"GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n",
                b"GET / HTTP/1.1\r\nHost: a.b:0\r\n\r\n"):
        with pytest.raises(httphead.Malformed):
            httphead.host(bad)
    with pytest.raises(httphead.Malformed):
        httphead.host(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 10000)
    assert httphead.looks_like_http(b"GE") and httphead.looks_like_http(b"GET /")
    assert not httphead.looks_like_http(b"\x16\x03\x01") and not httphead.looks_like_http(b"")
    assert httphead.forbidden("no").startswith(b"HTTP/1.1 403 ")


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzzed_heads_only_parse_or_refuse(data: bytes) -> None:
    try:
        name, port = httphead.host(b"GET / HTTP/1.1\r\nHost: " + data + b"\r\n\r\n")
    except (httphead.Malformed, httphead.Incomplete):
        return
    assert name and (port is None or 0 < port < 65536)


def query(name: bytes, qtype: int = 1, ident: int = 0x1234) -> bytes:
    labels = b"".join(bytes((len(part),)) + part for part in name.split(b".")) + b"\0"
    return (ident.to_bytes(2, "big") + b"\x01\x00" + b"\x00\x01" + bytes(6) + labels
            + qtype.to_bytes(2, "big") + b"\x00\x01")


def test_a_query_and_its_refusal() -> None:
    parsed = dnsmsg.parse_query(query(b"Secret.Exfil.example"))
    assert (parsed.name, parsed.qtype, parsed.ident) == ("secret.exfil.example", 1, 0x1234)
    answer = dnsmsg.refusal(parsed)
    assert answer[:2] == b"\x12\x34" and answer[3] & 0xF == dnsmsg.NXDOMAIN
    assert answer[2] & 0x80 and answer.endswith(parsed.question)
    for bad in (b"", bytes(12), query(b"a")[:-3], b"\x00\x00\x81\x80" + bytes(8)):
        with pytest.raises(dnsmsg.Malformed):
            dnsmsg.parse_query(bad)


def test_addresses_of_an_answer_with_compression() -> None:
    request = query(b"registry.npmjs.org")
    answer = bytearray(request)
    answer[2:4] = b"\x81\x80"
    answer[6:8] = b"\x00\x02"
    record = b"\xc0\x0c" + b"\x00\x01\x00\x01" + b"\x00\x00\x00\x3c" + b"\x00\x04" + bytes(
        (198, 51, 100, 7))
    record6 = b"\xc0\x0c" + b"\x00\x1c\x00\x01" + b"\x00\x00\x00\x3c" + b"\x00\x10" + bytes(16)
    got = dnsmsg.answer_addresses(bytes(answer) + record + record6)
    assert got == [("registry.npmjs.org", bytes((198, 51, 100, 7))),
                   ("registry.npmjs.org", bytes(16))]
    loop = bytes(request[:6]) + b"\x00\x01" + bytes(4) + b"\xc0\x0c"
    with pytest.raises(dnsmsg.Malformed):
        dnsmsg.answer_addresses(loop)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
def test_fuzzed_dns_only_parses_or_refuses(data: bytes) -> None:
    for parse in (dnsmsg.parse_query, dnsmsg.answer_addresses):
        try:
            parse(data)
        except dnsmsg.Malformed:
            pass


def test_rules_and_verdicts() -> None:
    rules = (*egresspolicy.parse_rule("example.test"), *egresspolicy.parse_rule("*.cdn.test"),
             *egresspolicy.parse_rule("db.test:5432"), *egresspolicy.parse_rule("@github"))
    assert egresspolicy.judge(rules, "example.test", 443).allowed
    assert not egresspolicy.judge(rules, "example.test", 22).allowed
    assert egresspolicy.judge(rules, "a.b.cdn.test", 80).allowed
    assert not egresspolicy.judge(rules, "cdn.test", 443).allowed  # the suffix itself: no
    assert not egresspolicy.judge(rules, "evilcdn.test", 443).allowed
    assert egresspolicy.judge(rules, "db.test", 5432).allowed
    assert not egresspolicy.judge(rules, "db.test", 443).allowed
    verdict = egresspolicy.judge(rules, "github.com", 22)
    assert verdict.allowed and "@github" in verdict.rule
    refused = egresspolicy.judge(rules, "attacker.example", 443)
    assert not refused.allowed and refused.fix == "allow-domain = attacker.example"
    assert egresspolicy.judge(rules, "x.example", 8443).fix == "allow-domain = x.example:8443"
    assert not egresspolicy.judge(rules, None, 443).allowed
    names = {rule.pattern for rule in egresspolicy.defaults("claude")}
    assert {"api.anthropic.com", "registry.npmjs.org", "pypi.org", "github.com"} <= names


@pytest.mark.parametrize("bad", ["", "*.", "*", "a.*.b", "x:0", "x:70000", "x:ab", "@nope",
                                 "10.0.0.1", "a..b", "-a.b", "a b", "ä.example"])
def test_bad_rules_say_why(bad: str) -> None:
    with pytest.raises(egresspolicy.RuleError) as caught:
        egresspolicy.parse_rule(bad)
    assert str(caught.value)


def test_a_head_with_a_bare_line_feed_is_not_read_two_ways() -> None:
    # A server that takes a lone LF as a line end would see Host evil.example.
    smuggled = (b"GET / HTTP/1.1\nHost:evil.example\n\nX:\r\nHost: files.pythonhosted.org"
                b"\r\n\r\n")
    with pytest.raises(tlshello.Malformed):
        httphead.host(smuggled)
    with pytest.raises(tlshello.Malformed):
        httphead.host(b"GET / HTTP/1.1\r\nHost: a.example\rX: y\r\n\r\n")
    assert httphead.host(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n") == ("a.example", None)
