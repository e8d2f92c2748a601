"""An agent plants everything it can from inside; the real agents started outside run none.

The plants are written from inside a real sandbox (as root and as the test user), where
an agent would: its own settings with hooks and env, MCP servers for claude and codex,
a pi extension, poisoned caches, start-up files, and every workspace control file. Then
claude, codex and pi run unwrapped, directly, in the same workspace and with the user's
own home, against a local mock API, and git runs there as a shell prompt would. Each
plant names a marker file it would create: none may exist afterwards. A control run
proves the markers work: the same plants written directly into a copy of the home and a
copy of the workspace do fire.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from claude_sandbox.launch.overlay import gitrepo
from claude_sandbox.tools import agentrun, mockapi

pytestmark = pytest.mark.integration
AGENTS = ("claude", "codex", "pi")
SHELL = "/usr/local/bin/claude-sandbox"


def home_plants(markers: str) -> dict[str, str]:
    def touch(name: str) -> str:
        return f"/usr/bin/touch {markers}/{name}"
    hook = {"hooks": [{"type": "command", "command": touch("claude-user-hook")}]}
    return {
        ".claude/settings.json": json.dumps({"hooks": {"SessionStart": [hook]},
                                             "env": {"CLAUDE_CODE_SIMPLE": "1"},
                                             "apiKeyHelper": touch("claude-apikeyhelper")}),
        ".claude.json": json.dumps({"mcpServers": {"csbx": {
            "type": "stdio", "command": "/usr/bin/touch",
            "args": [f"{markers}/claude-user-mcp"]}}}),
        ".codex/config.toml": f'notify = ["/usr/bin/touch", "{markers}/codex-notify"]\n'
                              f'[mcp_servers.csbx]\ncommand = "/usr/bin/touch"\n'
                              f'args = ["{markers}/codex-user-mcp"]\n',
        ".pi/agent/extensions/csbx.ts": "import { execSync } from 'node:child_process';\n"
                                        f"execSync('{touch('pi-user-extension')}');\n"
                                        "export default function () {}\n",
        ".bashrc": touch("bashrc") + "\n",
        ".local/bin/git": f"#!/bin/sh\n{touch('local-bin-git')}\n",
        ".cache/uv/planted": "poisoned\n",
    }


def workspace_plants(markers: str) -> dict[str, str]:
    import sys
    sys.path.insert(0, "/usr/libexec/claude-sandbox/verification")
    from test_checks import plants  # the plants check 54 makes, shared

    return plants(markers)


WRITE = """
import json, os, sys
for path, text in json.load(open(sys.argv[1])).items():
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as f:
            f.write(text)
        print("wrote", path)
    except OSError as e:
        print("refused", path, e.strerror)
"""


@pytest.fixture(params=["root", "sbxuser"])
def user(request: pytest.FixtureRequest) -> pwd.struct_passwd:
    if os.getuid() != 0:
        pytest.skip("needs root to act as root and as the test user")
    try:
        return pwd.getpwnam(request.param)
    except KeyError:
        pytest.fail("the test user sbxuser is missing: .ci/run creates it")


@pytest.fixture
def workspace(user: pwd.struct_passwd) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="csbx-e2e-")
    subprocess.run(["git", "init", "-q", path], check=True)
    os.makedirs(os.path.join(path, "markers"))
    os.chmod(os.path.join(path, "markers"), 0o777)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", path], check=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _as(user: pwd.struct_passwd) -> list[str]:
    if user.pw_uid == 0:
        return []
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]


def _plant_inside(user: pwd.struct_passwd, workspace: str, plants: dict[str, str]) -> str:
    spec = os.path.join(workspace, "plants.json")
    with open(spec, "w") as handle:
        json.dump(plants, handle)
    os.chmod(spec, 0o644)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": user.pw_dir, "USER": user.pw_name,
           "CLAUDE_SANDBOX_EGRESS_JAIL": "0"}
    result = subprocess.run([*_as(user), SHELL, "shell", "--", "/usr/bin/python3", "-c", WRITE,
                             spec], cwd=workspace, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    os.unlink(spec)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _run_outside(user: pwd.struct_passwd, workspace: str, home: str) -> list[str]:
    ran = []
    with mockapi.serve("csbx-e2e") as api:
        for agent in AGENTS:
            if not agentrun.is_installed(agent):
                continue
            try:
                agentrun.run_agent(agent, "hello", api=api, home=home, cwd=workspace,
                                   argv_prefix=_as(user), program=agentrun.real_path(agent),
                                   timeout=120)
            except subprocess.TimeoutExpired:
                pass
            ran.append(agent)
    subprocess.run([*_as(user), "git", "-C", workspace, "status"], capture_output=True,
                   check=False, env={"PATH": "/usr/bin:/bin", "HOME": home})
    return ran


def _text(path: str) -> str:
    return gitrepo.read_small(path, 1 << 20) or ""  # never blocks on a planted FIFO


def _snapshot(home: str) -> dict[str, bytes | None]:
    saved: dict[str, bytes | None] = {}
    for relative in home_plants("x"):
        path = os.path.join(home, relative)
        try:
            with open(path, "rb") as handle:
                saved[path] = handle.read()
        except OSError:
            saved[path] = None
    return saved


def _restore(saved: dict[str, bytes | None]) -> None:
    for path, data in saved.items():
        if data is None:
            if os.path.isfile(path):
                os.unlink(path)
        else:
            with open(path, "wb") as handle:
                handle.write(data)


def test_plants_from_inside_run_nowhere_outside(user: pwd.struct_passwd, workspace: str) -> None:
    markers = os.path.join(workspace, "markers")
    home = user.pw_dir
    before = _snapshot(home)
    try:
        plants = {os.path.join(home, k): v for k, v in home_plants(markers).items()}
        plants.update({os.path.join(workspace, k): v
                       for k, v in workspace_plants(markers).items()})
        report = _plant_inside(user, workspace, plants)
        assert "wrote" in report  # the home plants land, in the agent's own store
        # The workspace plants land inside too (git and control directories are
        # overlays; a control path the session made is moved to the store): none of
        # them may be in the real workspace afterwards.
        for relative in (".git/config", ".git/hooks/post-checkout", ".mcp.json",
                         ".claude/settings.json", ".codex/config.toml",
                         ".pi/extensions/csbx.ts"):
            path = os.path.join(workspace, relative)
            assert f"wrote {path}" in report, report
            assert plants[path] not in _text(path), f"{relative} reached the real workspace"
        after = _snapshot(home)
        assert after == before, "a plant reached the user's real home"
        ran = _run_outside(user, workspace, home)
        assert ran, "no agent installed"
        assert os.listdir(markers) == [], f"ran outside: {os.listdir(markers)}"
    finally:
        _restore(before)
        # The plants stay in the agents' stores, where they would run in the next
        # sandboxed session: gone, so that later tests meet clean homes.
        for agent in AGENTS:
            shutil.rmtree(os.path.join(home, ".local/state/claude-sandbox", agent),
                          ignore_errors=True)


def test_the_same_plants_written_outside_do_fire(user: pwd.struct_passwd,
                                                workspace: str) -> None:
    """The control: without the sandbox the plants run, so their absence above means
    something. A copy of a home and the workspace itself take them directly."""
    markers = os.path.join(workspace, "markers")
    home = tempfile.mkdtemp(prefix="csbx-e2e-home-")
    try:
        for relative, text in home_plants(markers).items():
            path = os.path.join(home, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as handle:
                handle.write(text)
        with open(os.path.join(workspace, ".git/config"), "a") as handle:
            handle.write(f"[core]\n\tfsmonitor = /usr/bin/touch {markers}/git-fsmonitor\n")
        subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", home, workspace],
                       check=True)
        _run_outside(user, workspace, home)
        fired = set(os.listdir(markers))
        assert {"git-fsmonitor", "pi-user-extension"} <= fired, fired
        # Claude Code's user hooks and MCP servers stay off outside the sandbox even when
        # they are in the real home: the unwrapped-only managed policy.
        assert not {"claude-user-hook", "claude-user-mcp"} & fired, fired
    finally:
        shutil.rmtree(home, ignore_errors=True)
