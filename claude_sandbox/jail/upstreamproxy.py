"""The proxy the network requires: where the egress proxy sends what it allowed, when the
launching environment names one (HTTPS_PROXY and the others), so that a corporate proxy
keeps working with the jail on.

The egress proxy judges every connection by name first (egresspolicy); only then, for
a name NO_PROXY does not exempt, does it ask the upstream proxy with HTTP CONNECT to the
name it judged (or the address, for a connection it allowed by number). The agent never
talks to the upstream proxy itself: its TCP to that address is redirected to the egress
proxy like any other and refused (`refuses_agent`), and only the egress proxy's marked
sockets leave the jail (netfilter.py). The route plan lets exactly that one address out
(routes.build_plan, as for allow-ip), whatever its class.

Only an `http://` proxy is taken (TLS to the proxy and SOCKS are not); a value that is
not one is named at launch and not used. Pure, except `handshake`, which speaks to the
proxy over a connected socket.
"""

from __future__ import annotations

import _socket
import binascii

from claude_sandbox.core.record import record
from claude_sandbox.jail import cidr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

# In the order tools read them: the HTTPS one first, since almost all traffic is TLS.
VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY",
             "http_proxy")
EXEMPT = ("NO_PROXY", "no_proxy")
_REPLY_MAX = 16 << 10  # a CONNECT answer's head; a longer one is not a proxy's
_HOST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-._")
_EXEMPT = _HOST | frozenset("*/:")


class UpstreamError(ValueError):
    """A proxy variable the egress proxy cannot use; the message says why."""


@record
class Upstream:
    """One upstream proxy, as the launch found it."""

    host: str  # as the variable names it
    port: int
    auth: str  # base64 of user:password, for Proxy-Authorization; "" for none
    exempt: tuple[str, ...]  # NO_PROXY's entries, lower case
    origin: str  # the variable that named it
    address: str = ""  # resolved at launch: the one address the route plan lets out

    def encode(self) -> str:
        """One frame field for the proxy's control socket (no part holds a space)."""
        return " ".join((self.address, str(self.port), self.auth, ",".join(self.exempt),
                         self.host, self.origin))

    @classmethod
    def decode(cls, text: str) -> Upstream | None:
        if not text:
            return None
        address, port, auth, exempt, host, origin = text.split(" ")
        return cls(host, int(port), auth, tuple(filter(None, exempt.split(","))), origin,
                   address)


def from_environ(environ: Mapping[str, str]) -> Upstream | None:
    """The first proxy variable set, parsed; None when none is. UpstreamError names the
    variable when its value is not a proxy the egress proxy can use."""
    for name in VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            exempt = next((environ[n] for n in EXEMPT if environ.get(n)), "")
            return parse(value, name, exempt)
    return None


def parse(value: str, origin: str, exempt: str = "") -> Upstream:
    scheme, sep, rest = value.partition("://")
    if not sep:
        scheme, rest = "http", value  # curl's reading of a bare host:port
    if scheme.lower() != "http":
        raise UpstreamError(f"{origin}: a {scheme}:// proxy; the egress proxy chains only to "
                            "an http:// one")
    authority = rest.split("/", 1)[0]
    user, at, hostport = authority.rpartition("@")
    host, colon, port_text = hostport.rpartition(":")
    if not colon:
        host, port_text = hostport, "80"
    if hostport.startswith("["):
        raise UpstreamError(f"{origin}: an IPv6 proxy address; the jail has IPv4 only")
    if not host or not set(host.lower()) <= _HOST:
        raise UpstreamError(f"{origin}: no proxy host in {_shown(value)}")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UpstreamError(f"{origin}: {port_text!r} is not a port")
    auth = ""
    if at:
        from urllib.parse import unquote

        auth = binascii.b2a_base64(unquote(user).encode(), newline=False).decode()
    return Upstream(host.lower(), int(port_text), auth, _exemptions(exempt), origin)


def _shown(value: str) -> str:
    """The value without its user part: a proxy password is not printed."""
    scheme, sep, rest = value.partition("://")
    authority, slash, path = rest.partition("/")
    return f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}" if sep else \
        value.rpartition("@")[2]


def shown(upstream: Upstream) -> str:
    return f"http://{upstream.host}:{upstream.port}" + (" (with a login)" if upstream.auth
                                                        else "")


def _exemptions(text: str) -> tuple[str, ...]:
    found = []
    for entry in text.replace(" ", ",").split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry != "*" and not entry.startswith("[") and entry.count(":") == 1:
            entry = entry.partition(":")[0]  # a port is not told apart: the host is exempt
        found.append(entry.lstrip("*").lstrip(".") if entry != "*" else "*")
    return tuple(dict.fromkeys(e for e in found if e and set(e) <= _EXEMPT))


def in_cidr(address: str, network: str) -> bool:
    """Whether `address` lies in `network` (a bare address is a /32 or a /128); False
    for anything that is not an address or a network in plain text (cidr.py)."""
    try:
        return cidr.subnet_of(cidr.network(address), cidr.network(network))
    except ValueError:
        return False


def exempt(upstream: Upstream, name: str | None, address: str) -> bool:
    """Whether NO_PROXY sends this connection direct: a name equal to or below an entry,
    the address itself, or an address in an entry's CIDR range."""
    for entry in upstream.exempt:
        if entry == "*":
            return True
        if "/" in entry:
            if in_cidr(address, entry):
                return True
        elif entry == address or (name and (name == entry or name.endswith("." + entry))):
            return True
    return False


def connect_request(upstream: Upstream, target: str, port: int) -> bytes:
    """The CONNECT request for `target:port`; `target` is a judged name or an address."""
    head = f"CONNECT {target}:{port} HTTP/1.1\r\nHost: {target}:{port}\r\n"
    if upstream.auth:
        head += f"Proxy-Authorization: Basic {upstream.auth}\r\n"
    return (head + "\r\n").encode("ascii")


def status_of(head: bytes) -> int:
    """The status of a CONNECT answer's head; ValueError when it is not HTTP."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    version, _, rest = line.partition(" ")
    if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
        raise ValueError(f"not an HTTP answer: {line[:60]!r}")
    return int(rest[:3])


def handshake(sock: _socket.socket, upstream: Upstream, target: str, port: int) -> None:
    """CONNECT through the proxy on `sock`; OSError says why it did not open. Reads the
    answer's head and not a byte more: a server that speaks first (ssh) is not cut."""
    sock.sendall(connect_request(upstream, target, port))
    seen = b""
    while True:
        chunk = sock.recv(4096, _socket.MSG_PEEK)
        if not chunk:
            raise OSError(f"the upstream proxy closed the CONNECT to {target}:{port}")
        end = (seen + chunk).find(b"\r\n\r\n")
        if end >= 0:
            while len(seen) < end + 4:  # what was peeked is there: recv returns it
                seen += sock.recv(end + 4 - len(seen))
            break
        seen += sock.recv(len(chunk))
        if len(seen) > _REPLY_MAX:
            raise OSError("the upstream proxy's answer is too long")
    try:
        status = status_of(seen)
    except ValueError as exc:
        raise OSError(f"the upstream proxy: {exc}") from None
    if status != 200:
        raise OSError(f"the upstream proxy answered {status} to CONNECT {target}:{port}")
