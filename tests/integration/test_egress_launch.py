"""Egress by name through the real launcher, as root and as a user.

The package registries are the one outside place these machines reach: npm and pip
reach them through their ordinary clients under the default allow-list. Everything
else is the test internet (tests/jail/conftest.py), whose names the launch sees in a
private /etc/hosts.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.jail.conftest import jail_available
from tests.netfixtures import Internet

from .conftest import Launcher

pytestmark = pytest.mark.skipif(jail_available() is not None, reason=str(jail_available()))

JAILED = {"CLAUDE_SANDBOX_EGRESS_JAIL": "1"}

CLIENT = r"""
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            print(url, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print(url, e.code, e.read().decode().strip())
    except OSError as e:
        print(url, "error", e)
"""


def _log(launcher: Launcher, config: str | None = None) -> dict[str, object]:
    shown = launcher.run(["/usr/local/bin/claude-sandbox", "log", "--json"], config=config,
                         env=JAILED)
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)  # type: ignore[no-any-return]


def test_npm_and_pip_install_from_the_registries_under_the_default_policy(
        launcher: Launcher) -> None:
    script = ("set -e; python3 -m venv /tmp/v; /tmp/v/bin/pip install -q "
              "--disable-pip-version-check six==1.16.0; /tmp/v/bin/python -c 'import six'; "
              "npm install --no-audit --no-fund --loglevel=error is-number@7.0.0; "
              "test -f node_modules/is-number/package.json; echo installed")
    ran = launcher.shell("sh", "-c", script, env=JAILED, timeout=300,
                         config="# the defaults only\n")
    assert "installed" in ran.stdout, ran.stdout + ran.stderr
    assert "egress:" not in ran.stderr, ran.stderr  # nothing was refused
    entries = _log(launcher, "# the defaults only\n")["entries"]
    names = {e["name"] for e in entries if e["kind"] == "tls"}  # type: ignore[index]
    assert {"pypi.org", "files.pythonhosted.org", "registry.npmjs.org"} <= names, names


def test_a_refused_name_is_said_at_the_end_and_logged(
        launcher: Launcher, test_internet: Internet) -> None:
    config = "allow-domain = allowed.test\n"
    os.chmod(test_internet.hosts, 0o644)
    ran = launcher.shell("python3", "-c", CLIENT, "http://evil.test/", "http://allowed.test/",
                         env=JAILED, config=config, hosts=test_internet.hosts)
    assert "http://allowed.test/ 200 allowed host=allowed.test" in ran.stdout, ran.stdout
    assert "http://evil.test/ 403" in ran.stdout and "allow-domain = evil.test" in ran.stdout
    assert "egress: 1 connection or query refused (evil.test:80)" in ran.stderr, ran.stderr
    record = _log(launcher, config)
    refused = [e for e in record["entries"]  # type: ignore[attr-defined]
               if e["verdict"] == "refused"]
    assert [(e["name"], e["fix"]) for e in refused] == [("evil.test", "allow-domain = evil.test")]
    assert record["session"]["policy"] == "allow-list"  # type: ignore[index]


def test_learn_ends_with_the_lines_that_would_allow_the_session(
        launcher: Launcher, test_internet: Internet) -> None:
    os.chmod(test_internet.hosts, 0o644)
    ran = launcher.shell("python3", "-c", CLIENT, "http://evil.test/", "http://other.test/",
                         env=JAILED, config="egress-policy = learn\n", hosts=test_internet.hosts)
    assert "http://evil.test/ 200 evil host=evil.test" in ran.stdout, ran.stdout + ran.stderr
    assert "allow-domain = evil.test\n" in ran.stderr and "allow-domain = other.test\n" in \
        ran.stderr, ran.stderr


PIPELINED = r"""
import socket, sys
allowed, other = sys.argv[1], sys.argv[2]
with socket.create_connection((allowed, 80), timeout=20) as sock:
    sock.sendall(f"GET /first HTTP/1.1\r\nHost: {allowed}\r\n\r\n".encode())
    got = sock.recv(65536)  # the first answer, whole: the echo sends it in one write
    sock.sendall(f"POST /c HTTP/1.1\r\nHost: {other}\r\nContent-Length: 6\r\n\r\nsecret"
                 .encode())
    while chunk := sock.recv(65536):
        got += chunk
print("answers", got.count(b"HTTP/1.1 200"))
"""


def test_a_second_request_on_a_kept_alive_connection_for_another_site_never_reaches_it(
        launcher: Launcher, echo_hosts: dict[str, str]) -> None:
    # The echo server answers every Host it is asked for, on a kept-alive connection,
    # as a CDN's front end does: only the proxy stands between the second request and it.
    from tests.netfixtures import ECHO_HOST, ECHO_OTHER

    config = f"allow-domain = {ECHO_HOST}\n"
    ran = launcher.shell("python3", "-c", PIPELINED, ECHO_HOST, ECHO_OTHER, env=JAILED,
                         config=config, hosts=echo_hosts["hosts"])
    assert "answers 1" in ran.stdout, ran.stdout + ran.stderr
    with open(echo_hosts["log"]) as f:
        seen = f.read()
    assert f"Host: {ECHO_HOST}" in seen and ECHO_OTHER not in seen and "secret" not in seen
    entries: list[dict[str, object]] = _log(launcher, config)["entries"]  # type: ignore[assignment]
    ended = [e for e in entries if e["name"] == ECHO_HOST]
    assert ended and "a Host that is not the connection's server name" in str(
        ended[-1]["rule"]), ended
