"""The broker's certificates, made by the real openssl: a leaf only its CA vouches for,
for the named hosts only, and no CA key left to sign another."""

from __future__ import annotations

import os
import socket
import ssl
import threading

import pytest

from claude_sandbox.launch.session import tlsca

HOSTS = ("api.example.test", "example.test")


def _handshake(leaf: tlsca.Leaf, ca: str, name: str) -> str:
    """A TLS handshake to a server showing `leaf`, verified against `ca` only."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(leaf.chain, leaf.key)
    client_context = ssl.create_default_context(cafile=ca)
    a, b = socket.socketpair()

    def serve() -> None:
        try:
            with server_context.wrap_socket(b, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(a, server_hostname=name):
            return "verified"
    except ssl.SSLCertVerificationError as error:
        return error.verify_message
    finally:
        thread.join()
        b.close()


def test_the_leaf_verifies_for_its_hosts_only(tmp_path: str) -> None:
    store = str(tmp_path)
    leaf = tlsca.ensure(store, HOSTS)
    ca = os.path.join(store, "ca.pem")
    with open(ca, "w") as handle:
        handle.write(leaf.ca)
    assert _handshake(leaf, ca, "api.example.test") == "verified"
    assert _handshake(leaf, ca, "evil.test") != "verified"
    where = tlsca.directory(store, HOSTS)
    assert sorted(os.listdir(where)) == ["ca.pem", "leaf.key", "leaf.pem"]  # no CA key
    assert os.stat(os.path.join(where, "leaf.key")).st_mode & 0o077 == 0
    assert os.stat(os.path.dirname(where)).st_mode & 0o777 == 0o700


def test_it_is_kept_and_made_again_for_other_hosts(tmp_path: str) -> None:
    store = str(tmp_path)
    first = tlsca.ensure(store, HOSTS)
    assert tlsca.ensure(store, HOSTS) == first
    other = tlsca.ensure(store, ("other.test",))
    assert other.chain != first.chain and other.ca != first.ca


def test_without_openssl_it_says_so(tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tlsca.paths, "find_tool", lambda name: None)
    with pytest.raises(tlsca.CertificateError, match="openssl is not installed"):
        tlsca.ensure(str(tmp_path), HOSTS)
