"""workspace-mode = review in real launches, as root and as a user (check 73).

A session edits, deletes, creates, plants a link, a FIFO, a hook and an executable,
and commits. The real workspace, .git included, is byte for byte what it was;
the next session sees the changes; a second session at once is refused; `claude-
sandbox review` lists them, flagged first; `apply --all` lands the files and the
commit, never the FIFO or the hook; `discard` drops what is left.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

import pytest

from .conftest import SHIM_DIR, Launcher

pytestmark = pytest.mark.integration
REVIEW = {"CLAUDE_SANDBOX_WORKSPACE_MODE": "review"}
GIT_ENV = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u",
           "GIT_COMMITTER_EMAIL": "u@x", "GIT_CONFIG_NOSYSTEM": "1"}
SESSION = (
    "echo two >> a.txt && rm b.txt && echo new > c.txt && mkdir -p src/deep && "
    "echo deep > src/deep/d.txt && ln -s /etc/passwd out && mkfifo ff && "
    "printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 4755 run.sh && "
    "printf '#!/bin/sh\\ntouch /tmp/csbx-review-hook-ran\\n' > .git/hooks/post-checkout && "
    "chmod +x .git/hooks/post-checkout && git config core.fsmonitor /nonexistent/csbx-fsm && "
    "git remote add origin https://csbx-test.invalid/nowhere.git && "
    "git add a.txt b.txt c.txt src run.sh && git commit -qm agent-commit && echo session-done"
)


def _git(launcher: Launcher, *argv: str) -> subprocess.CompletedProcess[str]:
    return launcher.run(["git", "-c", "safe.directory=*", *argv], env=GIT_ENV)


def _manifest(top: str) -> dict[str, tuple[int, str]]:
    """Every entry under `top`: its mode and content digest, as check 73 takes it."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "verification"))
    import outside  # type: ignore[import-not-found]

    return outside._tree(top)  # type: ignore[no-any-return]


def _repository(launcher: Launcher) -> None:
    for name, text in (("a.txt", "one\n"), ("b.txt", "keep\n")):
        with open(os.path.join(launcher.workspace, name), "w") as handle:
            handle.write(text)
        os.chown(os.path.join(launcher.workspace, name), launcher.uid, launcher.uid)
    for argv in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "init"]):
        assert _git(launcher, *argv).returncode == 0


def _review(launcher: Launcher, *argv: str) -> subprocess.CompletedProcess[str]:
    return launcher.run([f"{SHIM_DIR}/claude-sandbox", "review", *argv])


def test_review_keeps_the_workspace_until_apply(launcher: Launcher) -> None:
    _repository(launcher)
    before = _manifest(launcher.workspace)
    if os.path.exists("/tmp/csbx-review-hook-ran"):
        os.unlink("/tmp/csbx-review-hook-ran")

    result = launcher.shell("/bin/sh", "-c", SESSION, env={**REVIEW, **GIT_ENV})
    assert "session-done" in result.stdout, result.stderr
    assert "wait for review" in result.stderr
    assert _manifest(launcher.workspace) == before  # byte for byte, .git included
    assert sorted(os.listdir(launcher.workspace)) == [".git", "a.txt", "b.txt"]

    # The next session sees the pending changes, and is told about them.
    again = launcher.shell("/bin/sh", "-c", "cat a.txt; git log --format=%s -1",
                           env={**REVIEW, **GIT_ENV})
    assert again.stdout.split() == ["one", "two", "agent-commit"], again.stderr
    assert "from earlier sessions wait for review" in again.stderr

    shown = _review(launcher)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    flagged, _, rest = text.partition("the rest:")
    for path in ("ff", "out", "run.sh", ".git"):
        assert path in flagged, text
    assert "c.txt" in rest and "a.txt" in rest, text
    assert "never applied" in flagged

    applied = _review(launcher, "apply", "--all")
    assert applied.returncode == 1, applied.stdout  # the FIFO stays
    assert "not applied: ff" in applied.stdout
    ws = launcher.workspace
    with open(os.path.join(ws, "a.txt")) as handle:
        assert handle.read() == "one\ntwo\n"
    assert not os.path.exists(os.path.join(ws, "b.txt"))
    assert os.readlink(os.path.join(ws, "out")) == "/etc/passwd"
    assert not os.path.lexists(os.path.join(ws, "ff"))
    mode = os.stat(os.path.join(ws, "run.sh")).st_mode
    assert mode & 0o111 and not mode & 0o4000  # runnable, never set-user-ID
    assert not os.path.exists(os.path.join(ws, ".git/hooks/post-checkout"))
    log = _git(launcher, "log", "--format=%s")
    assert log.stdout.split() == ["agent-commit", "init"]
    assert _git(launcher, "config", "--get", "remote.origin.url").stdout.strip() == \
        "https://csbx-test.invalid/nowhere.git"
    assert _git(launcher, "config", "--get", "core.fsmonitor").stdout == ""
    status = _git(launcher, "status", "--porcelain")
    assert status.stdout.split() == ["??", "out"], status.stdout  # the commit matches the tree
    _git(launcher, "checkout", "-qb", "after")
    assert not os.path.exists("/tmp/csbx-review-hook-ran")

    dropped = _review(launcher, "discard", "ff")
    assert dropped.returncode == 0 and "discarded: ff" in dropped.stdout
    assert "nothing waits" in _review(launcher).stdout


def test_one_review_session_at_a_time(launcher: Launcher) -> None:
    first: dict[str, subprocess.CompletedProcess[str]] = {}
    thread = threading.Thread(target=lambda: first.setdefault(
        "r", launcher.shell("/bin/sleep", "5", env=REVIEW)))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _locked(launcher):
            time.sleep(0.05)
        second = launcher.shell("/bin/true", env=REVIEW)
        assert second.returncode == 77, second.stderr
        assert "one at a time" in second.stderr
    finally:
        thread.join()
    assert first["r"].returncode == 0, first["r"].stderr


def _locked(launcher: Launcher) -> bool:
    """The review store's lock is held (read from outside, as root)."""
    from claude_sandbox.launch.overlay import gitsession
    from claude_sandbox.launch.planner import overlays
    from claude_sandbox.launch.session import state

    root = state.store_root(None, launcher.home, launcher.uid)
    base = overlays.workspace_store(os.path.join(root, "claude"),
                                    os.path.realpath(launcher.workspace))
    lock = os.path.join(gitsession.upper_base(overlays.review_store(base)), "lock")
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_the_environment_may_not_turn_review_off(launcher: Launcher) -> None:
    result = launcher.shell("/bin/true", env={"CLAUDE_SANDBOX_WORKSPACE_MODE": "live"},
                            config="workspace-mode = review\nenv-may-widen = egress-jail\n")
    assert result.returncode == 78, result.stderr
    assert "CLAUDE_SANDBOX_WORKSPACE_MODE" in result.stderr


def test_a_bare_repository_assembled_over_two_sessions_is_applied_by_rule(
        launcher: Launcher) -> None:
    _repository(launcher)
    first = launcher.shell("/bin/sh", "-c", "mkdir -p evil/objects evil/refs && printf "
                           "'[core]\\n\\tfsmonitor = touch /tmp/csbx-bare\\n' > evil/config",
                           env=REVIEW)
    assert first.returncode == 0, first.stderr
    assert _review(launcher, "apply", "evil").returncode == 0
    second = launcher.shell("/bin/sh", "-c", "echo 'ref: refs/heads/main' > evil/HEAD",
                            env=REVIEW)
    assert second.returncode == 0, second.stderr
    shown = _review(launcher)
    assert "repository" in shown.stdout and "evil" in shown.stdout, shown.stdout
    assert _review(launcher, "apply", "--all").returncode == 0
    with open(os.path.join(launcher.workspace, "evil/config")) as handle:
        assert "fsmonitor" not in handle.read()
    if os.path.exists("/tmp/csbx-bare"):
        os.unlink("/tmp/csbx-bare")
    launcher.run(["git", "-C", os.path.join(launcher.workspace, "evil"), "-c",
                  "safe.directory=*", "status"], env=GIT_ENV)
    assert not os.path.exists("/tmp/csbx-bare")


def test_a_repository_file_is_flagged_before_the_repository_is_whole(
        launcher: Launcher) -> None:
    made = launcher.shell("/bin/sh", "-c", "mkdir -p evil/objects evil/refs && echo x > "
                          "evil/config", env=REVIEW)
    assert made.returncode == 0, made.stderr
    flagged, _, _ = _review(launcher).stdout.partition("the rest:")
    assert "evil/config" in flagged


def test_a_file_changed_outside_since_is_not_overwritten_unasked(launcher: Launcher) -> None:
    _repository(launcher)
    path = os.path.join(launcher.workspace, "a.txt")
    made = launcher.shell("/bin/sh", "-c", "echo agent > a.txt", env=REVIEW)
    assert made.returncode == 0, made.stderr
    with open(path, "w") as handle:
        handle.write("mine\n")  # the user's own edit, outside, after the session
    held = _review(launcher, "apply", "--all")
    assert held.returncode == 1 and "changed in the workspace since" in held.stdout, held
    with open(path) as handle:
        assert handle.read() == "mine\n"
    forced = _review(launcher, "apply", "--force", "a.txt")
    assert forced.returncode == 0, forced.stdout
    with open(path) as handle:
        assert handle.read() == "agent\n"
    # Applied: what a later session writes there is compared with the applied file.
    again = launcher.shell("/bin/sh", "-c", "echo later > a.txt", env=REVIEW)
    assert again.returncode == 0, again.stderr
    later = _review(launcher, "apply", "a.txt")
    assert later.returncode == 0, later.stdout
    with open(path) as handle:
        assert handle.read() == "later\n"


def test_bad_review_arguments_give_one_line(launcher: Launcher) -> None:
    for argv, words in ((["apply"], "say what to apply"), (["discard", "--all"], "--yes"),
                        (["apply", "/etc/passwd"], "not inside the workspace"),
                        (["frob"], "invalid choice")):
        made = launcher.shell("/bin/sh", "-c", "echo x > f", env=REVIEW)
        assert made.returncode == 0, made.stderr
        result = _review(launcher, *argv)
        assert result.returncode == 64, (argv, result)
        assert words in result.stderr and result.stderr.count("\n") == 1, (argv, result)
        assert "Traceback" not in result.stderr
