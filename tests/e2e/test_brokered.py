"""`hardening = brokered` with the real agents: their commands run through the server.

One prompt against the local mock API, whose first answer asks the agent to run a
command: its pid 1 being the server's per-command init (not bwrap's) proves it ran
through the command server, in a sandbox of its own. Another asks the agent to write a
file with its own file tool (Claude's Write, pi's write): the agent's own process
writes the workspace, and runs nothing it writes there (docs/adr/0009). As an
unprivileged user: a root launch is refused with one line (tested below).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from claude_sandbox.launch.session import state
from claude_sandbox.tools import agentrun, mockapi

pytestmark = pytest.mark.integration
CONFIG = ("hardening = brokered\nenv-may-widen = egress-jail\npass-env = ANTHROPIC_API_KEY\n"
          "pass-env = ANTHROPIC_BASE_URL\npass-env = CODEX_MOCK_API_KEY\n"
          "pass-env = CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC\n")
SHIM_DIR = "/usr/local/bin"


@pytest.fixture
def user() -> pwd.struct_passwd:
    if os.getuid() != 0:
        pytest.skip("needs root to bind the configuration and act as the test user")
    return pwd.getpwnam("sbxuser")


@pytest.fixture
def workspace(user: pwd.struct_passwd) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="csbx-brokered-")
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


def _prefix(conf: str, user: pwd.struct_passwd | None) -> list[str]:
    as_user = [] if user is None else ["setpriv", f"--reuid={user.pw_uid}",
                                       f"--regid={user.pw_gid}", "--init-groups"]
    return ["unshare", "-m", "sh", "-c",
            f'mount --bind {conf} /etc/claude-sandbox.conf && exec "$@"', "sh", *as_user]


def _run(agent: str, user: pwd.struct_passwd, workspace: str, conf: str,
         api: mockapi.MockAPI, prompt: str) -> subprocess.CompletedProcess[str]:
    """One prompt to the real agent under brokered, against `api`."""
    # pi names its API in a file of its own, which the launch does not read: a service
    # the agent itself must reach on another port than 443 is a local-port.
    with open(conf, "a") as handle:
        handle.write(f"local-port = {api.port}\n")
    if agent == "pi":
        root = state.store_root(None, user.pw_dir, user.pw_uid)
        subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                        "--init-groups", f"{SHIM_DIR}/claude-sandbox", "state", "import",
                        "--agent", "pi"], check=True, capture_output=True,
                       env={"HOME": user.pw_dir, "PATH": "/usr/bin:/bin"})
        agentrun.prepare_home("pi", api, state.agent_home(root, "pi"))
    return agentrun.run_agent(
        agent, prompt, api=api, home=user.pw_dir, cwd=workspace,
        argv_prefix=_prefix(conf, user), program=f"{SHIM_DIR}/{agent}",
        env={"CLAUDE_SANDBOX_EGRESS_JAIL": "0"}, timeout=150)


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_the_agents_commands_run_through_the_server(agent: str, user: pwd.struct_passwd,
                                                     workspace: str, conf: str) -> None:
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    marker = os.path.join(workspace, f"ran-{agent}")
    command = f"tr '\\0' ' ' < /proc/1/cmdline > {marker}"
    with mockapi.serve("csbx-brokered", tool_command=command) as api:
        result = _run(agent, user, workspace, conf, api, "run it")
    assert os.path.exists(marker), (result.returncode, result.stdout[-2000:],
                                    result.stderr[-2000:])
    with open(marker) as handle:
        init = handle.read()
    assert "_enter" in init and "bwrap" not in init, init


@pytest.mark.parametrize("agent", ["claude", "pi"])
def test_the_agents_own_file_tool_writes_the_workspace(agent: str, user: pwd.struct_passwd,
                                                       workspace: str, conf: str) -> None:
    if not agentrun.is_installed(agent):
        pytest.skip(f"{agent} is not installed")
    target = os.path.join(workspace, f"written-by-{agent}.txt")
    with mockapi.serve("csbx-brokered", tool_write=(target, "from the agent's own tool\n")
                       ) as api:
        result = _run(agent, user, workspace, conf, api, "write it")
        assert api.tool_call_requests(), "the mock never asked for the file tool"
    assert os.path.exists(target), (result.returncode, result.stdout[-2000:],
                                    result.stderr[-2000:], api.tool_results())
    with open(target) as handle:
        assert handle.read() == "from the agent's own tool\n"


def test_a_root_launch_is_refused_in_one_line(conf: str, workspace: str) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root")
    result = subprocess.run([*_prefix(conf, None), f"{SHIM_DIR}/claude-sandbox", "shell", "--",
                             "/bin/true"], cwd=workspace, capture_output=True, text=True,
                            timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": "/root",
                                             "CLAUDE_SANDBOX_EGRESS_JAIL": "0"})
    assert result.returncode != 0
    lines = [line for line in result.stderr.strip().splitlines()
             if "egress jail is off" not in line]  # the jail-off warning this test asked for
    assert len(lines) == 1 and "brokered does not run as root" in lines[0], result.stderr
