"""The workspace's exit: git works inside as outside, and what the agent leaves in `.git`
never makes the user's own git, run outside afterwards, write, run or follow it.

Real launches through the installed shim, as root and as an unprivileged user, with
the real git run outside after each session, as the user would (ADR 0010, check 70).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

import pytest

from .conftest import Launcher

pytestmark = pytest.mark.integration

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x",
           "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"}


def outside(launcher: Launcher, *argv: str, cwd: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """The user's own git, outside the sandbox, with a home of its own (never the real one)."""
    home = tempfile.mkdtemp(prefix="cs-githome-")
    os.chown(home, launcher.uid, launcher.uid)
    env = {"PATH": "/usr/bin:/bin", "HOME": home, **GIT_ENV}
    command = ["git", "-c", "safe.directory=*", *argv]
    if launcher.user != "root":
        command = ["setpriv", f"--reuid={launcher.uid}", f"--regid={launcher.uid}",
                   "--init-groups", *command]
    try:
        result = subprocess.run(command, cwd=cwd or launcher.workspace, env=env, text=True,
                                capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
                                check=False)
    finally:
        subprocess.run(["rm", "-rf", home], check=False)
    if check:
        assert result.returncode == 0, (argv, result.stderr)
    return result


@pytest.fixture
def repo(launcher: Launcher) -> str:
    """The workspace as a repository with one commit, made by the user outside."""
    outside(launcher, "init", "-q", "-b", "main")
    with open(os.path.join(launcher.workspace, "README"), "w") as handle:
        handle.write("hello\n")
    os.chown(os.path.join(launcher.workspace, "README"), launcher.uid, launcher.uid)
    outside(launcher, "add", "README")
    outside(launcher, "commit", "-qm", "first")
    return launcher.workspace


def inside(launcher: Launcher, script: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**GIT_ENV, **kwargs.pop("env", {})}  # type: ignore[dict-item]
    result = launcher.shell("/bin/sh", "-c", script, env=env, **kwargs)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_a_link_planted_in_git_never_makes_the_users_git_write_through_it(
        launcher: Launcher, repo: str) -> None:
    victim = tempfile.mktemp(prefix="cs-victim-", dir="/tmp")
    with open(victim, "w") as handle:
        handle.write("# the user's start-up file\n")
    os.chown(victim, launcher.uid, launcher.uid)
    try:
        planted = {".git/logs/HEAD": victim, ".git/ORIG_HEAD": victim,
                   ".git/refs/heads/evil": victim, ".git/COMMIT_EDITMSG": victim}
        links = " ; ".join(f"rm -f {rel} ; ln -s {target} {rel}"
                           for rel, target in planted.items())
        result = inside(launcher, f"{links} ; mkfifo .git/FETCH_HEAD ; "
                        "git checkout -qb 'x;touch${IFS}/tmp/cs-pwned'")
        assert result.returncode == 0, result.stderr
        assert "not applied" in result.stderr  # named at session end
        for rel in (*planted, ".git/FETCH_HEAD"):
            path = os.path.join(repo, rel)
            assert not os.path.islink(path), rel
            assert not os.path.lexists(path) or os.path.isfile(path), rel
        # The user's ordinary git outside, afterwards: nothing reaches the victim.
        outside(launcher, "checkout", "-q", "-b", "after")
        outside(launcher, "commit", "-q", "--allow-empty", "-m", "second")
        outside(launcher, "status", "--short")
        with open(victim) as handle:
            assert handle.read() == "# the user's start-up file\n"
    finally:
        os.unlink(victim)


def test_the_daily_git_workflows_work_inside_and_land_outside(
        launcher: Launcher, repo: str) -> None:
    remote = os.path.join(repo, "remote.git")
    outside(launcher, "init", "-q", "--bare", remote)
    lib = os.path.join(repo, "lib-src")
    outside(launcher, "init", "-q", "-b", "main", lib)
    outside(launcher, "-C", lib, "commit", "-q", "--allow-empty", "-m", "lib")
    # origin names a network host, as a forge's remote does; `local`, the bare repository
    # beside, is pushed to inside but never lands in the config outside: git runs a
    # local remote's own hooks at a push (ADR 0010's amendment of 2026-12-06).
    script = " && ".join([
        "git config user.email agent@example.com",
        "git remote add origin https://csbx-test.invalid/r.git",
        f"git remote add local {remote}",
        "echo two > two && git add two && git commit -qm two",
        "git push -q local main",
        "git update-ref refs/remotes/origin/main HEAD",
        "git branch -q -u origin/main main",
        f"git -c protocol.file.allow=always submodule add -q {lib} sub 2>&1",
        "git commit -qm sub",
        "git worktree add -q -b side wt",
        "git status --short",
    ])
    result = inside(launcher, script)
    assert result.returncode == 0, result.stderr + result.stdout
    assert outside(launcher, "config", "user.email").stdout.strip() == "agent@example.com"
    assert outside(launcher, "remote", "get-url", "origin").stdout.strip() == \
        "https://csbx-test.invalid/r.git"
    assert outside(launcher, "config", "--get", "remote.local.url", check=False).stdout == ""
    assert "remote.local.url not applied" in result.stderr, result.stderr
    assert "must be a network URL" in result.stderr, result.stderr
    assert outside(launcher, "rev-parse", "--abbrev-ref", "main@{upstream}").stdout.strip() \
        == "origin/main"
    log = outside(launcher, "log", "--oneline").stdout
    assert "two" in log and "sub" in log
    assert outside(launcher, "submodule", "status").returncode == 0
    assert "side" in outside(launcher, "branch", "--list").stdout
    assert outside(launcher, "-C", remote, "log", "--oneline", "main").stdout.count("\n") >= 2
    assert outside(launcher, "fsck", "--no-progress").returncode == 0


def test_config_that_runs_programs_is_not_applied(launcher: Launcher, repo: str) -> None:
    marker = f"/tmp/cs-fsmonitor-{os.getpid()}"
    result = inside(launcher, f"git config core.fsmonitor 'touch {marker}' && "
                    "git config core.hooksPath /tmp && git config alias.st '!touch /tmp/x' && "
                    "printf '#!/bin/sh\\ntouch %s\\n' > .git/hooks/post-checkout && "
                    "chmod +x .git/hooks/post-checkout && git config remote.o.url https://h/x"
                    % marker)
    assert result.returncode == 0, result.stderr
    assert "core.fsmonitor not applied" in result.stderr
    outside(launcher, "status")
    outside(launcher, "checkout", "-q", "-b", "z")
    assert not os.path.exists(marker)
    assert not os.path.exists(os.path.join(repo, ".git/hooks/post-checkout"))
    assert outside(launcher, "config", "remote.o.url").stdout.strip() == "https://h/x"
    assert outside(launcher, "config", "core.fsmonitor", check=False).returncode == 1


def test_nothing_the_sandbox_makes_shows_outside_during_a_session(
        launcher: Launcher, repo: str) -> None:
    os.makedirs(os.path.join(repo, ".claude"))
    before = sorted(os.listdir(repo))
    git_before = sorted(os.listdir(os.path.join(repo, ".git")))
    flag = os.path.join(repo, "started")
    command = [
        "/usr/local/bin/claude-sandbox", "shell", "--", "/bin/sh", "-c",
        "touch started; echo x > .claude/settings.local.json; sleep 3"]
    if launcher.user != "root":
        command = ["setpriv", f"--reuid={launcher.uid}", f"--regid={launcher.uid}",
                   "--init-groups", *command]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": launcher.home,
           "CLAUDE_SANDBOX_EGRESS_JAIL": "0"}
    session = subprocess.Popen(command, cwd=repo, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.05)
        during = sorted(os.listdir(repo))
        assert during == sorted([*before, "started"]), during
        assert sorted(os.listdir(os.path.join(repo, ".git"))) == git_before
        assert os.listdir(os.path.join(repo, ".claude")) == []  # the agent's copy is its own
    finally:
        session.communicate(timeout=60)
    assert os.listdir(os.path.join(repo, ".claude")) == []
    again = inside(launcher, "cat .claude/settings.local.json")
    assert again.stdout == "x\n"  # the next sandboxed session sees its own copy


def test_a_hostile_git_directory_costs_the_launch_nothing(launcher: Launcher, repo: str) -> None:
    """An include of /dev/tty and a FIFO at HEAD: the launcher runs no git that reads them."""
    with open(os.path.join(repo, ".git/config"), "a") as handle:
        handle.write("[include]\n\tpath = /dev/tty\n")
    head = os.path.join(repo, ".git/HEAD")
    os.unlink(head)
    os.mkfifo(head)
    os.chown(head, launcher.uid, launcher.uid)
    started = time.monotonic()
    result = inside(launcher, "true", timeout=60)
    assert time.monotonic() - started < 30  # a hang guard, not a benchmark
    assert result.returncode == 0, result.stderr
    assert "a FIFO" in result.stderr and "to put it back" in result.stderr
    assert os.path.isfile(head)  # a HEAD git can read again


def test_a_launch_from_a_subdirectory_finds_the_repository(
        launcher: Launcher, repo: str) -> None:
    sub = os.path.join(repo, "src")
    os.makedirs(sub)
    os.chown(sub, launcher.uid, launcher.uid)
    result = inside(launcher, "echo x > f && git add f && git commit -qm from-sub && "
                    "git rev-parse --show-toplevel", cwd=sub)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repo
    assert "from-sub" in outside(launcher, "log", "--oneline").stdout


def test_a_link_on_the_way_to_the_git_directory_leads_nowhere_else(launcher: Launcher) -> None:
    """The workspace's .git file names a git directory two levels down (`git init
    --separate-git-dir`). A session renames the directory above it and leaves a link to
    another repository in its place: its git writes are not applied through the link,
    the other repository is unchanged, and the next launch refuses (77) rather than show
    that repository inside."""
    victim = tempfile.mkdtemp(prefix="cs-victim-", dir="/var/tmp")
    os.chown(victim, launcher.uid, launcher.uid)
    try:
        outside(launcher, "init", "-q", "-b", "main", cwd=victim)
        outside(launcher, "remote", "add", "origin", "https://example.com/victim.git",
                cwd=victim)
        config = open(os.path.join(victim, ".git/config")).read()  # noqa: SIM115
        os.mkdir(os.path.join(launcher.workspace, "meta"))
        os.chown(os.path.join(launcher.workspace, "meta"), launcher.uid, launcher.uid)
        outside(launcher, "init", "-q", "-b", "main",
                f"--separate-git-dir={launcher.workspace}/meta/.git")
        outside(launcher, "remote", "add", "origin", "https://example.com/own.git")
        session = inside(launcher, "git remote set-url origin https://evil.example.com/x.git"
                         f" && mv meta meta.moved && ln -s {victim} meta")
        assert "not applied: a symbolic link now stands on the way" in session.stderr
        assert open(os.path.join(victim, ".git/config")).read() == config  # noqa: SIM115
        refused = launcher.shell("/bin/true")
        assert refused.returncode == 77, refused.stderr
        assert "names a git directory through" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        subprocess.run(["rm", "-rf", victim], check=False)


def test_a_name_the_session_chose_reaches_the_terminal_escaped(launcher: Launcher,
                                                                repo: str) -> None:
    """A file the session leaves in .git, named with a terminal's control sequences: the
    launcher's lines about it carry them escaped, never as the bytes a terminal obeys."""
    result = inside(launcher, "touch \".git/z$(printf '\\033]0;OWNED\\007\\033[1A\\r')\"")
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr, result.stderr
    assert "\\x1b]0;OWNED\\x07" in result.stderr


def test_a_repository_put_in_the_git_directorys_place_runs_nothing_outside(
        launcher: Launcher) -> None:
    """The session renames the directory holding the git directory a .git file names and
    makes a repository of its own in its place, with a hook and core.fsmonitor: nothing
    is applied there, and the user's git outside afterwards runs neither."""
    marks = tempfile.mkdtemp(prefix="cs-marks-", dir="/var/tmp")
    os.chown(marks, launcher.uid, launcher.uid)
    try:
        os.mkdir(os.path.join(launcher.workspace, "meta"))
        os.chown(os.path.join(launcher.workspace, "meta"), launcher.uid, launcher.uid)
        outside(launcher, "init", "-q", "-b", "main",
                f"--separate-git-dir={launcher.workspace}/meta/.git")
        session = inside(
            launcher, "mv meta meta.x && mkdir meta && git init -q --bare meta/.git && "
            "git -C meta/.git config core.bare false && "
            f"git -C meta/.git config core.fsmonitor 'touch {marks}/fsmonitor; false' && "
            f"printf '#!/bin/sh\\ntouch {marks}/hook\\n' > meta/.git/hooks/pre-commit && "
            "chmod +x meta/.git/hooks/pre-commit")
        assert "another directory now stands in its place" in session.stderr
        outside(launcher, "status", check=False)
        outside(launcher, "commit", "-q", "--allow-empty", "-m", "after", check=False)
        assert os.listdir(marks) == []
    finally:
        subprocess.run(["rm", "-rf", marks], check=False)
