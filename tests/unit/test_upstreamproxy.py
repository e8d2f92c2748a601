"""The upstream proxy's parsing, NO_PROXY, and the CONNECT handshake over a socket pair."""

from __future__ import annotations

import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.jail import upstreamproxy
from claude_sandbox.jail.egresspolicy import Policy
from claude_sandbox.jail.upstreamproxy import Upstream, UpstreamError


def test_the_https_variable_comes_first_and_no_proxy_goes_with_it() -> None:
    found = upstreamproxy.from_environ({"HTTP_PROXY": "http://other:1", "https_proxy":
                                        "http://u%40x:p%3Aw@Proxy.corp:3128/",
                                        "NO_PROXY": ".internal, example.com:8080,10.0.0.0/8,*.x"})
    assert found is not None
    assert (found.host, found.port, found.origin) == ("proxy.corp", 3128, "https_proxy")
    import base64

    assert base64.b64decode(found.auth) == b"u@x:p:w"
    assert found.exempt == ("internal", "example.com", "10.0.0.0/8", "x")


@pytest.mark.parametrize(("value", "host", "port"), [
    ("proxy:8080", "proxy", 8080), ("http://proxy", "proxy", 80),
    ("http://10.1.2.3:3128", "10.1.2.3", 3128)])
def test_what_curl_reads_as_an_http_proxy_is_one(value: str, host: str, port: int) -> None:
    found = upstreamproxy.parse(value, "HTTPS_PROXY")
    assert (found.host, found.port, found.auth) == (host, port, "")


@pytest.mark.parametrize(("value", "why"), [
    ("socks5://proxy:1080", "socks5://"), ("https://proxy:443", "https://"),
    ("http://[::1]:3128", "IPv6"), ("http://:3128", "no proxy host"),
    ("http://proxy:99999", "not a port"), ("http://proxy:x", "not a port")])
def test_a_proxy_the_egress_proxy_cannot_use_is_named(value: str, why: str) -> None:
    with pytest.raises(UpstreamError) as caught:
        upstreamproxy.parse(value, "ALL_PROXY")
    assert why in str(caught.value) and str(caught.value).startswith("ALL_PROXY")


def test_a_password_is_never_shown() -> None:
    with pytest.raises(UpstreamError) as caught:
        upstreamproxy.parse("http://user:secret@:3128", "HTTPS_PROXY")
    assert "secret" not in str(caught.value)
    found = upstreamproxy.parse("http://user:secret@p:1", "HTTPS_PROXY")
    assert "secret" not in upstreamproxy.shown(found) and "login" in upstreamproxy.shown(found)


@given(st.text(max_size=80))
@settings(max_examples=500, deadline=None)
def test_any_value_parses_or_is_named(value: str) -> None:
    try:
        found = upstreamproxy.parse(value, "HTTPS_PROXY", value)
    except UpstreamError as exc:
        assert str(exc).startswith("HTTPS_PROXY")
        return
    with_address = Upstream(found.host, found.port, found.auth, found.exempt, found.origin,
                            "192.0.2.9")
    assert Upstream.decode(with_address.encode()) == with_address
    assert "\0" not in with_address.encode()  # the control socket's field separator


def test_no_proxy_by_name_suffix_address_and_range() -> None:
    chained = upstreamproxy.parse("p:1", "HTTPS_PROXY", "corp.example,10.0.0.0/8,192.0.2.7")
    assert upstreamproxy.exempt(chained, "git.corp.example", "198.51.100.1")
    assert upstreamproxy.exempt(chained, "corp.example", "198.51.100.1")
    assert not upstreamproxy.exempt(chained, "evilcorp.example", "198.51.100.1")
    assert upstreamproxy.exempt(chained, None, "10.2.3.4")
    assert upstreamproxy.exempt(chained, None, "192.0.2.7")
    assert not upstreamproxy.exempt(chained, None, "192.0.2.8")
    assert upstreamproxy.exempt(upstreamproxy.parse("p:1", "X", "*"), "a", "1.2.3.4")


def test_the_policy_carries_it_to_the_proxy() -> None:
    chained = Upstream("p.corp", 3128, "dTpw", ("x",), "HTTPS_PROXY", "10.9.9.9").encode()
    policy = Policy("allow-list", "claude", (), ("10.1.2.3",), (), "/etc/hosts", chained)
    assert Policy.from_fields(policy.fields()) == policy


def _answer(reply: bytes, after: bytes = b"") -> tuple[socket.socket, list[bytes]]:
    ours, theirs = socket.socketpair()
    seen: list[bytes] = []

    def serve() -> None:
        seen.append(theirs.recv(4096))
        theirs.sendall(reply + after)
        theirs.close()

    threading.Thread(target=serve, daemon=True).start()
    return ours, seen


def test_the_handshake_reads_the_head_and_not_a_byte_more() -> None:
    chained = upstreamproxy.parse("http://u:p@p:1", "HTTPS_PROXY")
    sock, seen = _answer(b"HTTP/1.1 200 Connection established\r\nX: y\r\n\r\n",
                         b"SSH-2.0-server\r\n")
    upstreamproxy.handshake(sock, chained, "github.com", 22)
    assert sock.recv(100) == b"SSH-2.0-server\r\n"  # a server that speaks first is not cut
    assert seen[0].startswith(b"CONNECT github.com:22 HTTP/1.1\r\n")
    assert b"Proxy-Authorization: Basic dTpw\r\n" in seen[0]


@pytest.mark.parametrize("reply", [b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n",
                                   b"SSH-2.0-not-a-proxy\r\n\r\n", b""])
def test_a_refused_connect_is_an_error(reply: bytes) -> None:
    sock, _ = _answer(reply)
    with pytest.raises(OSError):
        upstreamproxy.handshake(sock, upstreamproxy.parse("p:1", "X"), "a.test", 443)
