"""A directory another local user made first, where a launch makes its own, refuses
nothing: the launch uses its own store instead (hostfacts.agent_tmp_dir), or, for the
store's own name in a shared state-dir, the home's (state.store_root)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from .conftest import Launcher

pytestmark = pytest.mark.integration


def test_a_squatted_scratch_directory_refuses_no_launch(launcher: Launcher) -> None:
    if launcher.user == "root":
        pytest.skip("root's scratch directory is the installer's, in a root-owned place")
    # The launch takes the first of these that is absent or its own. Each one is squatted
    # here as another local user (root) would, whoever made it earlier in the run; one
    # the user already has is put aside and back.
    candidates = ("/var/tmp/claude-agent", f"/var/tmp/claude-agent-{launcher.uid}")
    aside: list[str] = []
    squats: list[str] = []
    for candidate in candidates:
        if os.path.lexists(candidate):
            if os.lstat(candidate).st_uid != launcher.uid:
                continue  # another user's already
            os.rename(candidate, candidate + ".aside")
            aside.append(candidate)
        os.mkdir(candidate, 0o755)
        squats.append(candidate)
    try:
        ran = launcher.run(["/usr/local/bin/claude-sandbox", "shell", "--agent", "claude",
                            "--", "sh", "-c", 'echo "tmp=$CLAUDE_CODE_TMPDIR"'])
        assert ran.returncode == 0, ran.stderr
        used = ran.stdout.strip().splitlines()[-1].removeprefix("tmp=")
        assert used not in candidates and used.startswith(launcher.home), used
        for squat in squats:
            assert os.listdir(squat) == []  # nothing of the session went there
    finally:
        for squat in squats:
            shutil.rmtree(squat, ignore_errors=True)
        for candidate in aside:
            os.rename(candidate + ".aside", candidate)


def test_a_squatted_store_in_a_shared_state_dir_refuses_no_launch(launcher: Launcher) -> None:
    """A shared state-dir is 1777: another user who makes this user's name there first
    gets no launch refused; the store is the home's instead, and the launch says so."""
    shared = tempfile.mkdtemp(prefix="csbx-state-")
    os.chmod(shared, 0o1777)
    squat = os.path.join(shared, str(launcher.uid))
    other = 65534 if launcher.uid != 65534 else 1
    try:
        os.mkdir(squat, 0o755)
        os.chown(squat, other, other)
        ran = launcher.run(["/usr/local/bin/claude-sandbox", "shell", "--agent", "claude",
                            "--", "sh", "-c", 'echo "home=$HOME"'],
                           config=f"state-dir = {shared}\nenv-may-widen = egress-jail\n")
        assert ran.returncode == 0, ran.stderr
        assert f"{squat} is not yours (uid {other}" in ran.stderr, ran.stderr
        home = ran.stdout.strip().splitlines()[-1].removeprefix("home=")
        assert not home.startswith(shared), home
        assert os.listdir(squat) == []  # nothing of the session went there
    finally:
        shutil.rmtree(shared, ignore_errors=True)
