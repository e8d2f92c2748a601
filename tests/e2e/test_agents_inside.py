"""Each real agent works inside the sandbox out of the box, as root and as a user:
one prompt against the local mock API, whose first answer asks the agent to run a
command, which must then have run (in the workspace, inside the sandbox).

codex as root used to fail every command (its own sandbox cannot start inside ours);
inside, its managed configuration makes this sandbox its sandbox (codexconfig.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from claude_sandbox.launch.session import state
from claude_sandbox.tools import agentrun, mockapi
from tests.netfixtures import Internet, listening_in

pytestmark = pytest.mark.integration
CONFIG = ("env-may-widen = egress-jail\npass-env = ANTHROPIC_API_KEY\n"
          "pass-env = ANTHROPIC_BASE_URL\npass-env = CODEX_MOCK_API_KEY\n"
          "pass-env = CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC\n")


@pytest.fixture(params=["root", "sbxuser"])
def user(request: pytest.FixtureRequest) -> pwd.struct_passwd:
    if os.getuid() != 0:
        pytest.skip("needs root to act as root and as the test user")
    return pwd.getpwnam(request.param)


@pytest.fixture
def workspace(user: pwd.struct_passwd) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="csbx-inside-")
    os.chown(path, user.pw_uid, user.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def conf() -> Iterator[str]:
    with _conf_file("") as path:
        yield path


@contextlib.contextmanager
def _conf_file(extra: str) -> Iterator[str]:
    """The suite's configuration and `extra` lines, in a file a test user can read."""
    directory = tempfile.mkdtemp(prefix="csbx-conf-")
    path = os.path.join(directory, "claude-sandbox.conf")
    with open(path, "w") as handle:
        handle.write(CONFIG + extra)
    os.chmod(directory, 0o755)
    os.chmod(path, 0o644)
    try:
        yield path
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _as(user: pwd.struct_passwd) -> list[str]:
    return [] if user.pw_uid == 0 else ["setpriv", f"--reuid={user.pw_uid}",
                                        f"--regid={user.pw_gid}", "--init-groups"]


def _run_inside(agent: str, user: pwd.struct_passwd, workspace: str, conf: str,
                command: str, env: dict[str, str] | None = None,
                internet: Internet | None = None, tls: dict[str, str] | None = None,
                seen: list[str] | None = None, pi_key: str = "mock-key",
                ) -> subprocess.CompletedProcess[str]:
    """One prompt to the real `agent` in the sandbox, whose answer runs `command`.

    `internet`: the jail stays on, and the mock answers as mock-api.test on the test
    internet, reached through the egress proxy like any API host; `tls`: over HTTPS on
    443, with this certificate (`cert`, `key`) and the private trust bundle holding it
    (`bundle`) seen by the launch in place of the system's. `seen` gets the API keys the
    mock received."""
    as_user = _as(user)
    binds = f"mount --bind {conf} /etc/claude-sandbox.conf"
    served: dict[str, object] = {}
    if internet is not None:
        binds += f" && mount --bind {internet.hosts} /etc/hosts"
        served = {"listener": listening_in(internet.namespace, "198.51.100.40",
                                           443 if tls else 80), "name": "mock-api.test"}
        env = {"CLAUDE_SANDBOX_EGRESS_JAIL": "1", **(env or {})}
    if tls is not None:
        binds += f" && mount --bind {tls['bundle']} /etc/ssl/certs/ca-certificates.crt"
        served["tls"] = (tls["cert"], tls["key"])
    prefix = ["unshare", "-m", "sh", "-c", f'{binds} && exec "$@"', "sh", *as_user]
    with mockapi.serve("csbx-inside", tool_command=command, **served) as api:  # type: ignore[arg-type]
        if agent == "pi":
            # pi reads its providers from its home, which inside is its state store.
            root = state.store_root(None, user.pw_dir, user.pw_uid)
            home = state.ensure_home(root, "pi", user.pw_dir, (), user.pw_uid,
                                     default_root=True) if user.pw_uid == 0 else None
            if home is None:
                subprocess.run([*as_user, "/usr/local/bin/claude-sandbox", "state", "import",
                                "--agent", "pi"], check=True, capture_output=True,
                               env={"HOME": user.pw_dir, "PATH": "/usr/bin:/bin"})
                home = state.agent_home(root, "pi")
            agentrun.prepare_home("pi", api, home, api_key=pi_key)
        try:
            return agentrun.run_agent(
                agent, "run it", api=api, home=user.pw_dir, cwd=workspace, argv_prefix=prefix,
                program=f"/usr/local/bin/{agent}",
                env={"CLAUDE_SANDBOX_EGRESS_JAIL": "0", **(env or {})}, timeout=150)
        finally:
            if seen is not None:
                seen.extend(api.keys)


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_the_agent_reaches_its_api_through_the_egress_proxy(
        agent: str, user: pwd.struct_passwd, workspace: str, test_internet: Internet) -> None:
    """The default allow-list plus the mock's name: the real CLI, its API by name through
    the proxy, and the record says so."""
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    os.chmod(test_internet.hosts, 0o644)
    marker = os.path.join(workspace, f"ran-{agent}")
    with _conf_file("allow-domain = mock-api.test\n") as conf:
        result = _run_inside(agent, user, workspace, conf, f"touch {marker}",
                             internet=test_internet)
        assert os.path.exists(marker), (result.returncode, result.stdout[-2000:],
                                        result.stderr[-2000:])
        shown = subprocess.run(
            ["unshare", "-m", "sh", "-c",
             f'mount --bind {conf} /etc/claude-sandbox.conf && exec "$@"', "sh", *_as(user),
             "/usr/local/bin/claude-sandbox", "log", "--agent", agent, "--json"],
            cwd=workspace, capture_output=True, text=True, check=False,
            env={"HOME": user.pw_dir, "PATH": "/usr/local/bin:/usr/bin:/bin"})
        entries = json.loads(shown.stdout)["entries"]
        # A connection the agent kept open to the end is recorded as cut, with no counts.
        assert any(e["kind"] == "http" and e["name"] == "mock-api.test"
                   and e["verdict"] == "allowed" and (e.get("received", 0) > 0 or e.get("cut"))
                   for e in entries), entries


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_the_agent_runs_a_command_inside(agent: str, user: pwd.struct_passwd, workspace: str,
                                         conf: str) -> None:
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    marker = os.path.join(workspace, f"ran-{agent}")
    result = _run_inside(agent, user, workspace, conf, f"touch {marker}")
    assert os.path.exists(marker), (result.returncode, result.stdout[-2000:],
                                    result.stderr[-2000:])


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_the_agent_runs_a_command_under_harsh(agent: str, user: pwd.struct_passwd,
                                              workspace: str) -> None:
    """harsh: no exec and no executable mapping where the sandbox writes (check 90); the
    real agent, its tools and its command still work."""
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    marker = os.path.join(workspace, f"ran-{agent}")
    with _conf_file("hardening = harsh\n") as conf:
        result = _run_inside(agent, user, workspace, conf, f"touch {marker}")
        assert os.path.exists(marker), (result.returncode, result.stdout[-2000:],
                                        result.stderr[-2000:])


def _git(user: pwd.struct_passwd, workspace: str, *argv: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": user.pw_dir, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u",
           "GIT_COMMITTER_EMAIL": "u@x"}
    return subprocess.run([*_as(user), "git", "-c", "safe.directory=*", *argv], cwd=workspace,
                          env=env, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_review_mode_end_to_end(agent: str, user: pwd.struct_passwd, workspace: str,
                                conf: str) -> None:
    """The agent edits and commits in review mode; nothing reaches the workspace until the
    user reviews and applies, and then the edit and the commit both land (check 73)."""
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    with open(os.path.join(workspace, "notes.txt"), "w") as handle:
        handle.write("first\n")
    os.chown(os.path.join(workspace, "notes.txt"), user.pw_uid, user.pw_gid)
    for argv in (["init", "-q", "-b", "main"], ["add", "notes.txt"], ["commit", "-qm", "init"]):
        _git(user, workspace, *argv)
    edit = ("echo agent-edit >> notes.txt && git add notes.txt && git -c user.name=a -c "
            "user.email=a@x commit -qm agent-commit")
    result = _run_inside(agent, user, workspace, conf, edit,
                         env={"CLAUDE_SANDBOX_WORKSPACE_MODE": "review"})
    detail = (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    with open(os.path.join(workspace, "notes.txt")) as handle:
        assert handle.read() == "first\n", detail  # nothing reached the workspace
    assert _git(user, workspace, "log", "--format=%s").split() == ["init"], detail
    review = [*_as(user), "/usr/local/bin/claude-sandbox", "review", "--agent", agent]
    env = {"PATH": "/usr/bin:/bin", "HOME": user.pw_dir}
    shown = subprocess.run(review, cwd=workspace, env=env, capture_output=True, text=True)
    assert "notes.txt" in shown.stdout and "repository" in shown.stdout, (shown, detail)
    applied = subprocess.run([*review, "apply", "--all"], cwd=workspace, env=env,
                             capture_output=True, text=True)
    assert "applied: changed notes.txt" in applied.stdout, applied
    with open(os.path.join(workspace, "notes.txt")) as handle:
        assert handle.read() == "first\nagent-edit\n"
    assert _git(user, workspace, "log", "--format=%s").split() == ["agent-commit", "init"]
    tracked = [line for line in _git(user, workspace, "status", "--porcelain").splitlines()
               if not line.startswith("??")]
    assert tracked == [], tracked


@pytest.fixture
def mock_tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A certificate for mock-api.test, and a private copy of the system bundle with it."""
    base = tmp_path_factory.mktemp("mock-tls")
    cert, key, bundle = (str(base / name) for name in ("mock.pem", "mock.key", "bundle.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=mock-api.test", "-addext", "subjectAltName=DNS:mock-api.test",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    with open("/etc/ssl/certs/ca-certificates.crt") as system, open(cert) as mine, \
            open(bundle, "w") as out:
        out.write(system.read() + mine.read())
    os.chmod(base, 0o755)
    for path in (cert, bundle):
        os.chmod(path, 0o644)
    return {"cert": cert, "key": key, "bundle": bundle}


@pytest.mark.parametrize(("agent", "variable", "real"), [
    ("claude", "ANTHROPIC_API_KEY", "sk-ant-mock"),
    ("codex", agentrun.CODEX_KEY_VAR, "Bearer mock-key"),
    ("pi", "PI_MOCK_API_KEY", "Bearer mock-key"),  # pi's apiKey names the variable
])
def test_the_agent_works_with_a_brokered_api_key_over_tls(
        agent: str, variable: str, real: str, user: pwd.struct_passwd, workspace: str,
        test_internet: Internet, mock_tls: dict[str, str]) -> None:
    """The key is a `credential`: the agent holds a sentinel, trusts the broker through
    the bundle and NODE_EXTRA_CA_CERTS, and the mock, over TLS, receives the real key."""
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    os.chmod(test_internet.hosts, 0o644)
    marker = os.path.join(workspace, f"ran-{agent}")
    keys: list[str] = []
    lines = f"allow-domain = mock-api.test\ncredential = {variable} mock-api.test\n"
    with _conf_file(lines) as conf:
        result = _run_inside(agent, user, workspace, conf, f"touch {marker}",
                             env={"PI_MOCK_API_KEY": "mock-key"}, internet=test_internet,
                             tls=mock_tls, seen=keys, pi_key="PI_MOCK_API_KEY")
    detail = (result.returncode, result.stdout[-2000:], result.stderr[-2000:], keys)
    assert os.path.exists(marker), detail
    assert keys and set(filter(None, keys)) == {real}, detail
