"""The broker's request framing and header rewriting (httpinject.py), fed real bytes."""

from __future__ import annotations

import base64
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claude_sandbox.jail.httpinject import Malformed, Requests

S, R = b"ghp_SENTINELsentinel00", b"ghp_REALVALUErealval11"
HOST = b"api.x.com"


def feed_all(data: bytes, sizes: list[int] | None = None,
             other: bytes = b"") -> tuple[bytes, Requests]:
    stream = Requests({S: R}, (other,) if other else (), HOST)
    out, at = b"", 0
    for size in sizes or [len(data)]:
        out += stream.feed(data[at:at + size])
        at += size
    out += stream.feed(data[at:])
    return out, stream


def req(method: bytes = b"GET", headers: bytes = b"", body: bytes | None = None,
        chunked: bool = False) -> bytes:
    head = method + b" / HTTP/1.1\r\nHost: api.x.com\r\n" + headers
    if chunked:
        parts = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + parts
    if body is not None:
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    return head + b"\r\n"


def test_credential_headers_get_the_real_value_and_others_do_not() -> None:
    basic = base64.b64encode(b"x-access-token:" + S)
    data = (req(headers=b"Authorization: Bearer " + S + b"\r\nX-Api-Key: " + S
                + b"\r\nPrivate-Token: " + S + b"\r\nX-Other: " + S + b"\r\n")
            + req(b"POST", b"Authorization: Basic " + basic + b"\r\n"))
    out, stream = feed_all(data)
    assert b"Authorization: Bearer " + R in out and b"X-Api-Key: " + R in out
    assert b"Private-Token: " + R in out and b"X-Other: " + S in out
    assert b"Authorization: Basic " + base64.b64encode(b"x-access-token:" + R) in out
    assert stream.injected == 4


def test_bodies_pass_whole_and_are_never_rewritten() -> None:
    body = b"Authorization: Bearer " + S
    data = (req(b"POST", body=body) + req(b"POST", body=body, chunked=True)
            + req(headers=b"Authorization: token " + S + b"\r\n"))
    out, stream = feed_all(data)
    assert out.count(S) == 2 and out.count(R) == 1 and stream.injected == 1
    one_by_one, _ = feed_all(data, [1] * len(data))  # byte by byte: the same bytes
    assert one_by_one == out


@pytest.mark.parametrize("data", [
    req(b"POST", b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n"),
    req(b"POST", b"Content-Length: 3\r\nContent-Length: 4\r\n"),
    req(b"POST", b"Transfer-Encoding: gzip, chunked\r\n"),
    req(headers=b"X: a\r\n folded\r\n"),
    b"GET / HTTP/2\r\nHost: api.x.com\r\n\r\n",
    b"GET /\r\nHost: api.x.com\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: api.x.com\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST / HTTP/1.1\r\nHost: api.x.com\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"1000000000000\r\n",
    req(b"POST", b"Content-Length: -1\r\n"),
    # A bare LF that a lenient server reads as a line end: a smuggled length.
    req(b"POST", b"X-Pad: a\nContent-Length: 120\r\n"),
    req(headers=b"X-Pad: a\rHost: evil.com\r\n"),
    req(headers=b"X-Nul: a\0b\r\n"),
    b"GET / HTTP/1.1\nHost: api.x.com\r\n\r\n",
    # A trailer with a bare LF, and one that is no header line.
    b"POST / HTTP/1.1\r\nHost: api.x.com\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"0\r\nA: b\n\nPOST / HTTP/1.1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: api.x.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot one\r\n",
    b"POST / HTTP/1.0\r\nHost: api.x.com\r\nTransfer-Encoding: chunked\r\n\r\n",
    req(b"TRACE"), req(b"CONNECT"), req(b"title=a&content=x"),
    req(headers=b"X-Forwarded-Host: evil.com\r\n"),
])
def test_what_could_frame_two_ways_ends_the_connection(data: bytes) -> None:
    with pytest.raises(Malformed):
        feed_all(data)


def test_a_head_that_never_ends_is_refused() -> None:
    with pytest.raises(Malformed):
        feed_all(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 20000)
    with pytest.raises(Malformed):  # nor one that ends, beyond the bound
        feed_all(req(headers=b"X: y\r\n" * 20000))


def test_many_small_chunks_cost_what_one_large_one_does() -> None:
    chunks = b"1\r\nx\r\n" * 50000
    data = b"POST / HTTP/1.1\r\nHost: api.x.com\r\nTransfer-Encoding: chunked\r\n\r\n" + \
        chunks + b"0\r\n\r\n"
    started = time.monotonic()
    out, stream = feed_all(data)
    assert out == data and stream.state == "head"
    assert time.monotonic() - started < 5  # quadratic, it took minutes


def test_after_a_websocket_upgrade_the_bytes_wait_for_the_101_then_pass_as_they_are() -> None:
    head = req(headers=b"Upgrade: websocket\r\n")
    frames = b"\x81\x05hello" + b"GET / HTTP/1.1\r\nHost: exfil.example\r\n\r\n"
    out, stream = feed_all(head + frames)
    assert out == head  # nothing after the upgrade's head goes before the answer
    assert stream.answered(b"HTTP/1.1 10") is None  # the status line, cut short
    assert stream.answered(b"1 Switching Protocols\r\n") == frames
    assert stream.feed(b"\x82\x01x") == b"\x82\x01x"


def test_an_upgrade_the_server_does_not_answer_with_101_stays_framed() -> None:
    # The CDN-fronting case: a request for another site after an upgrade the server
    # never took; it must meet the Host check, not pass as WebSocket bytes.
    stream = Requests({S: R}, (), HOST)
    assert stream.feed(req(headers=b"Upgrade: websocket\r\n")) != b""
    assert stream.feed(b"GET / HTTP/1.1\r\nHost: exfil.example\r\n\r\n") == b""
    with pytest.raises(Malformed, match="Host"):
        stream.answered(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


def test_a_chunk_size_a_32_bit_front_end_would_read_otherwise_is_refused() -> None:
    head = b"POST / HTTP/1.1\r\nHost: api.x.com\r\nTransfer-Encoding: chunked\r\n\r\n"
    for size in (b"80000000", b"100000000", b"000000001"):
        with pytest.raises(Malformed, match="chunk size"):
            feed_all(head + size + b"\r\n")
    out, _ = feed_all(head + b"7fffffff\r\n")
    assert out.endswith(b"7fffffff\r\n")


@pytest.mark.parametrize("data", [
    req(headers=b"Upgrade: h2c\r\n"),  # HTTP/2 would carry requests with their own authority
    req() + req(headers=b"Upgrade: websocket\r\n"),  # not the connection's first request
    req(headers=b"Upgrade: websocket\r\n", body=b"x"),
])
def test_upgrades_that_could_carry_other_requests_are_refused(data: bytes) -> None:
    with pytest.raises(Malformed):
        feed_all(data)


def test_the_client_cannot_pile_up_bytes_while_the_upgrade_waits() -> None:
    stream = Requests({S: R}, (), HOST)
    stream.feed(req(headers=b"Upgrade: websocket\r\n"))
    with pytest.raises(Malformed, match="64 KiB"):
        stream.feed(b"x" * (65 << 10))


def test_plain_http_frames_by_port_80_and_its_own_scheme() -> None:
    stream = Requests({}, (), HOST, 80, b"http")
    head = b"GET / HTTP/1.1\r\nHost: api.x.com\r\n\r\n"
    assert stream.feed(head + b"GET http://api.x.com:80/a HTTP/1.1\r\nHost: api.x.com:80\r\n\r\n")
    for other in (b"Host: api.x.com:443", b"Host: cdn-customer.example"):
        with pytest.raises(Malformed, match="Host"):
            Requests({}, (), HOST, 80, b"http").feed(head + b"GET / HTTP/1.1\r\n" + other
                                                     + b"\r\n\r\n")
    with pytest.raises(Malformed, match="another host"):
        Requests({}, (), HOST, 80, b"http").feed(b"GET https://api.x.com/ HTTP/1.1\r\n"
                                                 b"Host: api.x.com\r\n\r\n")


def test_another_credentials_sentinel_is_noted_not_replaced() -> None:
    other = b"glpat-OTHERsentinel"
    out, stream = feed_all(req(headers=b"Authorization: Bearer " + other + b"\r\n"),
                           other=other)
    assert other in out and stream.elsewhere == 1 and stream.injected == 0


@given(st.binary(max_size=2000), st.lists(st.integers(1, 64), max_size=40))
def test_any_bytes_are_framed_or_refused_cleanly(data: bytes, sizes: list[int]) -> None:
    try:
        feed_all(data, sizes)
    except Malformed:
        pass


_requests = st.lists(st.tuples(st.sampled_from([b"GET", b"POST", b"PUT"]),
                               st.binary(max_size=300), st.booleans()), min_size=1, max_size=5)


@given(_requests, st.lists(st.integers(1, 97), max_size=60))
def test_well_framed_requests_without_a_sentinel_pass_unchanged(
        requests: list[tuple[bytes, bytes, bool]], sizes: list[int]) -> None:
    data = b"".join(req(method, body=body, chunked=chunked) for method, body, chunked in requests)
    out, stream = feed_all(data, sizes)
    assert out == data.replace(S, R) or S in data
    assert stream.state == "head" and not stream.buffer


@pytest.mark.parametrize("host", [b"api.x.com", b"API.X.COM:443", b"api.x.com."])
def test_a_request_for_the_connections_name_passes(host: bytes) -> None:
    out, _ = feed_all(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nAuthorization: token " + S
                      + b"\r\n\r\nGET https://api.x.com/a HTTP/1.1\r\nHost: api.x.com\r\n\r\n")
    assert R in out


@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.1\r\nHost: evil.com\r\nAuthorization: token " + S + b"\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: api.x.com\r\nHost: evil.com\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: api.x.com:8443\r\n\r\n",
    b"GET / HTTP/1.1\r\nAuthorization: token " + S + b"\r\n\r\n",
    b"GET https://evil.com/ HTTP/1.1\r\nHost: api.x.com\r\n\r\n",
    b"GET http://api.x.com/ HTTP/1.1\r\nHost: api.x.com\r\n\r\n",
])
def test_a_request_for_another_host_ends_the_connection(head: bytes) -> None:
    """Behind a front end that routes by Host, the real value would reach another site."""
    with pytest.raises(Malformed):
        feed_all(head)
