"""Brokered credentials through the real launcher, as root and as a user.

The credential's host and another allowed host are the echo server of the test
internet (tests/netfixtures.py, echo_hosts); the launch sees its names in a private
/etc/hosts and its certificate in a private copy of the system's trust bundle.
"""

from __future__ import annotations

import base64
import json
import os
import shutil

import pytest

from tests.jail.conftest import jail_available
from tests.netfixtures import ECHO_HOST, ECHO_OTHER

from .conftest import Launcher

pytestmark = pytest.mark.skipif(jail_available() is not None, reason=str(jail_available()))

REAL = "ghp_" + "Integr4tionRealValue" * 2
CONFIG = (f"credential = ECHO_TOKEN {ECHO_HOST}\nallow-domain = {ECHO_HOST}\n"
          f"allow-domain = {ECHO_OTHER}\n")
# Inside: what the variable holds, and what each host received, by the tools' own trust
# (SSL_CERT_FILE for Python, the bundle for curl).
INSIDE = r"""
import json, os, subprocess, urllib.request
token = os.environ.get("ECHO_TOKEN", "")
out = {"token": token, "cafile": os.environ.get("SSL_CERT_FILE", "")}
for label, url in (("host", "https://api.cred.test/"), ("other", "https://other.cred.test/"),
                   ("plain", "http://api.cred.test/")):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            out[label] = json.loads(answer.read())["headers"]
    except OSError as exc:
        out[label] = str(exc)
curl = subprocess.run(["curl", "-sS", "-H", f"Authorization: Bearer {token}",
                       "https://api.cred.test/"], capture_output=True, text=True)
out["curl"] = json.loads(curl.stdout)["headers"] if curl.returncode == 0 else curl.stderr
print(json.dumps(out))
"""


def _auth(headers: object) -> str:
    assert isinstance(headers, list), headers
    return next(h.split(":", 1)[1].strip() for h in headers
                if h.lower().startswith("authorization:"))


def test_the_agent_holds_a_sentinel_and_the_host_gets_the_value(
        launcher: Launcher, echo_hosts: dict[str, str]) -> None:
    ran = launcher.shell("python3", "-c", INSIDE, env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1",
                                                       "ECHO_TOKEN": REAL},
                         config=CONFIG, hosts=echo_hosts["hosts"], trust=echo_hosts["bundle"])
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    sentinel = seen["token"]
    assert sentinel.startswith("ghp_") and len(sentinel) == len(REAL) and sentinel != REAL
    assert _auth(seen["host"]) == f"Bearer {REAL}"
    assert _auth(seen["curl"]) == f"Bearer {REAL}"
    assert _auth(seen["other"]) == f"Bearer {sentinel}"
    assert _auth(seen["plain"]) == f"Bearer {sentinel}"
    shown = launcher.run(["/usr/local/bin/claude-sandbox", "explain"], config=CONFIG,
                         env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1", "ECHO_TOKEN": REAL})
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert ["ECHO_TOKEN", ECHO_HOST, "from", "$ECHO_TOKEN"] in rows, shown.stdout[-2000:]
    assert REAL not in shown.stdout


def test_without_the_jail_the_credential_is_not_provided(
        launcher: Launcher, echo_hosts: dict[str, str]) -> None:
    inside = "import os; print(repr(os.environ.get('ECHO_TOKEN')))"
    ran = launcher.shell("python3", "-c", inside, env={"CLAUDE_SANDBOX_EGRESS_JAIL": "0",
                                                       "ECHO_TOKEN": REAL},
                         config=CONFIG + "egress-jail = 0\n")
    assert ran.stdout.strip().splitlines()[-1] == "None", ran.stdout
    assert "credentials not provided (ECHO_TOKEN): the egress jail is off" in ran.stderr
    assert os.environ.get("ECHO_TOKEN") is None


def test_a_forge_token_is_a_sentinel_inside(launcher: Launcher) -> None:
    directory = os.path.join(launcher.home, ".config", "gh")
    os.makedirs(directory, exist_ok=True)
    hosts = os.path.join(directory, "hosts.yml")
    real = "gho_" + "F0rgeTokenValue" * 2 + "xy"
    with open(hosts, "w") as handle:
        handle.write(f"github.com:\n    oauth_token: {real}\n    user: octo\n"
                     "    git_protocol: https\n")
    os.chown(directory, launcher.uid, launcher.uid)
    os.chown(hosts, launcher.uid, launcher.uid)
    try:
        ran = launcher.shell("cat", hosts, env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"},
                             config="# the defaults\n")
        shown = launcher.run(["/usr/local/bin/claude-sandbox", "explain"],
                             env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"}, config="# the defaults\n")
    finally:
        os.unlink(hosts)
    assert ran.returncode == 0, ran.stderr
    assert real not in ran.stdout and "user: octo" in ran.stdout
    token = next(line.split(":", 1)[1].strip() for line in ran.stdout.splitlines()
                 if "oauth_token" in line)
    assert token.startswith("gho_") and len(token) == len(real)
    assert "github.com,api.github.com" in shown.stdout and real not in shown.stdout


def test_git_over_https_sends_the_real_value_to_its_host(
        launcher: Launcher, echo_hosts: dict[str, str]) -> None:
    """git's own HTTPS, trusting the broker through GIT_SSL_CAINFO, with a Basic header as
    a credential helper's answer makes it: the host receives the real value."""
    script = ('auth=$(printf "x-access-token:%s" "$ECHO_TOKEN" | base64 -w0); '
              'git -c "http.extraHeader=Authorization: Basic $auth" ls-remote '
              f'https://{ECHO_HOST}/repo.git >/dev/null 2>&1; echo done')
    ran = launcher.shell("sh", "-c", script, env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1",
                                                  "ECHO_TOKEN": REAL},
                         config=CONFIG, hosts=echo_hosts["hosts"], trust=echo_hosts["bundle"])
    assert "done" in ran.stdout, ran.stderr

    with open(echo_hosts["log"]) as handle:
        sent = [h for line in handle for h in json.loads(line)
                if h.lower().startswith("authorization: basic")]
    assert sent, "git sent no request"
    assert base64.b64decode(sent[0].split()[-1]) == f"x-access-token:{REAL}".encode()


def test_gh_and_its_git_helper_hand_out_the_sentinel_and_the_host_gets_the_value(
        launcher: Launcher, echo_hosts: dict[str, str]) -> None:
    """gh's stored token for a host (an Enterprise host here: the echo), brokered without
    any line: `gh api` and git through `gh auth git-credential` send the sentinel, and
    the host receives the real value."""
    gh = shutil.which("gh")
    if gh is None:
        pytest.skip("gh is not installed (.ci/run installs it)")
    directory = os.path.join(launcher.home, ".config", "gh")
    os.makedirs(directory, exist_ok=True)
    hosts = os.path.join(directory, "hosts.yml")
    real = "gho_" + "GhStoredToken00" * 2 + "ab"
    with open(hosts, "w") as handle:
        handle.write(f"{ECHO_HOST}:\n    oauth_token: {real}\n    user: octo\n"
                     "    git_protocol: https\n")
    os.chown(directory, launcher.uid, launcher.uid)
    os.chown(hosts, launcher.uid, launcher.uid)
    script = (f"GH_HOST={ECHO_HOST} {gh} api /user >/dev/null 2>&1; "
              f"git -c 'credential.https://{ECHO_HOST}.helper=!{gh} auth git-credential' "
              f"ls-remote https://{ECHO_HOST}/repo.git >/dev/null 2>&1; echo done")
    open(echo_hosts["log"], "w").close()
    try:
        ran = launcher.shell("sh", "-c", script, env={"CLAUDE_SANDBOX_EGRESS_JAIL": "1"},
                             config=f"allow-domain = {ECHO_HOST}\n", hosts=echo_hosts["hosts"],
                             trust=echo_hosts["bundle"])
    finally:
        os.unlink(hosts)
    assert "done" in ran.stdout, ran.stderr
    with open(echo_hosts["log"]) as handle:
        sent = [h.split(":", 1)[1].strip() for line in handle for h in json.loads(line)
                if h.lower().startswith("authorization:")]
    assert f"token {real}" in sent, sent  # gh api
    basics = [base64.b64decode(v.split()[1]) for v in sent if v.startswith("Basic ")]
    assert f"octo:{real}".encode() in basics or f"x-access-token:{real}".encode() in basics, sent
