"""The enforced process tree's proof of concept, on the real kernel (ADR 0009).

A mini orchestrator under a Landlock domain that allows EXECUTE only of a small static
client tries every side door, then runs a command through the client and a command
server outside its domain (tests/kernel/tree_poc.py). Inside bwrap with the standard
seccomp filter, as root and as an unprivileged user; and once without the filter, to
show which doors Landlock alone closes. Safety (ADR 0009): every part runs as a child
subtree of the test inside its own sandbox, and nothing on the host is changed.
"""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PYTHON, Sandbox

pytestmark = pytest.mark.kernel

HERE = Path(__file__).parent
# The measured results: a door and what the kernel answered.
CLOSED = {
    "exec a shell": "EACCES",
    "exec an interpreter": "EACCES",
    "write into the workspace": "EACCES",
    "exec a binary it wrote": "EACCES",
    "exec from memory (fexecve)": "EACCES",
    "exec from memory (/proc/self/fd)": "EACCES",
    "signal the server": "EPERM",
    "ptrace the server": "EPERM",
    "reach the server's abstract socket": "EPERM",
    "change its own configuration": "EACCES",
}


@pytest.fixture(scope="session")
def client(package_copy: Path) -> Path:
    """The client, built static from source beside the package copy."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is required to build the tree client (test.sh installs it)")
    target = package_copy / "tree_client"
    subprocess.run(["gcc", "-static", "-O2", "-Wall", "-Werror", "-o", str(target),
                    str(HERE / "tree_client.c")], check=True)
    shutil.copy(HERE / "tree_poc.py", package_copy / "tree_poc.py")
    for path in (target, package_copy / "tree_poc.py"):
        path.chmod(0o755)
    return target


def _run(sandbox: Sandbox, client: Path, with_filter: bool) -> dict[str, str]:
    state = sandbox.work / "state"
    state.mkdir()
    shutil.chown(state, sandbox.user, sandbox.user)
    result = sandbox.run(
        [PYTHON, "-I", str(client.parent / "tree_poc.py"), str(client), str(sandbox.work),
         str(state)],
        enter=False, with_filter=with_filter, fresh_proc=True,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert result.returncode == 0 and lines, (result.stdout, result.stderr)
    found: dict[str, str] = json.loads(lines[-1])
    return found


def test_every_side_door_is_closed_and_the_client_works(sandbox: Sandbox, client: Path) -> None:
    found = _run(sandbox, client, with_filter=True)
    assert {door: found[door] for door in CLOSED} == CLOSED
    # The command ran in a pid namespace of its own (its /proc lists bash, ls and grep),
    # as the same uid (root: the overflow uid), and its status came back.
    words = found["a command through the client"].split()
    assert words[:2] == ["status", "3"], found
    uid = 65534 if sandbox.user == "root" else pwd.getpwnam(sandbox.user).pw_uid
    assert words[2:4] == ["inside", str(uid)], found
    if sandbox.user != "root":  # root's command keeps the outer /proc (tree_poc.py)
        assert int(words[4]) <= 3, found


def test_landlock_alone_closes_the_doors(sandbox: Sandbox, client: Path) -> None:
    """Without the seccomp filter: what Landlock closes by itself (ptrace included)."""
    found = _run(sandbox, client, with_filter=False)
    assert {door: found[door] for door in CLOSED} == CLOSED
