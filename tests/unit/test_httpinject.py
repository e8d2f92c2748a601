"""The broker's request framing and header rewriting (httpinject.py), fed real bytes."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claude_sandbox.jail.httpinject import Malformed, Requests

S, R = b"ghp_SENTINELsentinel00", b"ghp_REALVALUErealval11"


def feed_all(data: bytes, sizes: list[int] | None = None,
             other: bytes = b"") -> tuple[bytes, Requests]:
    stream = Requests({S: R}, (other,) if other else ())
    out, at = b"", 0
    for size in sizes or [len(data)]:
        out += stream.feed(data[at:at + size])
        at += size
    out += stream.feed(data[at:])
    return out, stream


def test_credential_headers_get_the_real_value_and_others_do_not() -> None:
    basic = base64.b64encode(b"x-access-token:" + S)
    data = (b"GET / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer " + S + b"\r\nX-Api-Key: "
            + S + b"\r\nPrivate-Token: " + S + b"\r\nX-Other: " + S + b"\r\n\r\n"
            b"POST / HTTP/1.1\r\nAuthorization: Basic " + basic + b"\r\n\r\n")
    out, stream = feed_all(data)
    assert b"Authorization: Bearer " + R in out and b"X-Api-Key: " + R in out
    assert b"Private-Token: " + R in out and b"X-Other: " + S in out
    assert b"Authorization: Basic " + base64.b64encode(b"x-access-token:" + R) in out
    assert stream.injected == 4


def test_bodies_pass_whole_and_are_never_rewritten() -> None:
    body = b"Authorization: Bearer " + S
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    data = (b"POST /a HTTP/1.1\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            + b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
            + b"GET /c HTTP/1.1\r\nAuthorization: token " + S + b"\r\n\r\n")
    out, stream = feed_all(data)
    assert out.count(S) == 2 and out.count(R) == 1 and stream.injected == 1
    # Byte by byte, the same bytes come out.
    one_by_one, _ = feed_all(data, [1] * len(data))
    assert one_by_one == out


@pytest.mark.parametrize("head", [
    b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    b"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
    b"GET / HTTP/2\r\n\r\n",
    b"GET /\r\n\r\n",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
])
def test_what_could_frame_two_ways_ends_the_connection(head: bytes) -> None:
    with pytest.raises(Malformed):
        feed_all(head)


def test_a_head_that_never_ends_is_refused() -> None:
    with pytest.raises(Malformed):
        feed_all(b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 20000)


def test_after_an_upgrade_the_bytes_pass_as_they_are() -> None:
    data = b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05hello" + b"GET / HTTP/1.1"
    out, _ = feed_all(data)
    assert out == data


def test_another_credentials_sentinel_is_noted_not_replaced() -> None:
    other = b"glpat-OTHERsentinel"
    out, stream = feed_all(b"GET / HTTP/1.1\r\nAuthorization: Bearer " + other + b"\r\n\r\n",
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
    data = b""
    for method, body, chunked in requests:
        if chunked:
            data += method + b" /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
            data += (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
        else:
            data += method + b" /x HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    out, stream = feed_all(data, sizes)
    assert out == data.replace(S, R) or S in data
    assert stream.state == "head" and not stream.buffer


def _for_host(data: bytes) -> bytes:
    return Requests({S: R}, (), b"api.x.com").feed(data)


@pytest.mark.parametrize("host", [b"api.x.com", b"API.X.COM:443", b"api.x.com."])
def test_a_request_for_the_connections_name_passes(host: bytes) -> None:
    out = _for_host(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\nAuthorization: token " + S
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
        _for_host(head)
