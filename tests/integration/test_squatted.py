"""A directory another local user made first, where a launch makes its own, refuses
nothing: the launch uses its own store instead (hostfacts.agent_tmp_dir)."""

from __future__ import annotations

import os
import shutil

import pytest

from .conftest import Launcher

pytestmark = pytest.mark.integration


def test_a_squatted_scratch_directory_refuses_no_launch(launcher: Launcher) -> None:
    if launcher.user == "root":
        pytest.skip("root's scratch directory is the installer's, in a root-owned place")
    squat = f"/var/tmp/claude-agent-{launcher.uid}"
    shutil.rmtree(squat, ignore_errors=True)
    os.mkdir(squat, 0o755)  # another user's (root's here), made before the launch
    try:
        ran = launcher.run(["/usr/local/bin/claude-sandbox", "shell", "--agent", "claude",
                            "--", "sh", "-c", 'echo "tmp=$CLAUDE_CODE_TMPDIR"'])
        assert ran.returncode == 0, ran.stderr
        used = ran.stdout.strip().splitlines()[-1].removeprefix("tmp=")
        assert used != squat and used.startswith(launcher.home), used
        assert os.listdir(squat) == []  # nothing of the session went there
    finally:
        shutil.rmtree(squat, ignore_errors=True)
