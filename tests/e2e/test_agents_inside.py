"""Each real agent works inside the sandbox out of the box, as root and as a user:
one prompt against the local mock API, whose first answer asks the agent to run a
command, which must then have run (in the workspace, inside the sandbox).

codex as root used to fail every command (its own sandbox cannot start inside ours);
inside, its managed configuration makes this sandbox its sandbox (codexconfig.py).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from claude_sandbox.launch import state
from claude_sandbox.tools import agentrun, mockapi

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
    directory = tempfile.mkdtemp(prefix="csbx-conf-")
    path = os.path.join(directory, "claude-sandbox.conf")
    with open(path, "w") as handle:
        handle.write(CONFIG)
    os.chmod(directory, 0o755)
    os.chmod(path, 0o644)
    yield path
    shutil.rmtree(directory)


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_the_agent_runs_a_command_inside(agent: str, user: pwd.struct_passwd, workspace: str,
                                         conf: str) -> None:
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    marker = os.path.join(workspace, f"ran-{agent}")
    as_user = [] if user.pw_uid == 0 else ["setpriv", f"--reuid={user.pw_uid}",
                                           f"--regid={user.pw_gid}", "--init-groups"]
    prefix = ["unshare", "-m", "sh", "-c",
              f'mount --bind {conf} /etc/claude-sandbox.conf && exec "$@"', "sh", *as_user]
    with mockapi.serve("csbx-inside", tool_command=f"touch {marker}") as api:
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
            agentrun.prepare_home("pi", api, home)
        result = agentrun.run_agent(
            agent, "run it", api=api, home=user.pw_dir, cwd=workspace, argv_prefix=prefix,
            program=f"/usr/local/bin/{agent}", env={"CLAUDE_SANDBOX_EGRESS_JAIL": "0"},
            timeout=150)
    assert os.path.exists(marker), (result.returncode, result.stdout[-2000:],
                                    result.stderr[-2000:])
