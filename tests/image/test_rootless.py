"""The image under rootless podman: an unprivileged user on the host runs the container,
so its root is that user and its uid 1000 one of the user's subordinate ids.

The image the other image tests build is copied into the user's own storage (rootless
podman keeps one per user), then each agent makes a real tool call inside the sandbox,
as the container's root and as uid 1000, with the flags docs/how-to/image.md gives.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator

import podman_base as pb
import pytest

pytestmark = pb.MARKS
USER = "sbxuser"  # .ci/run makes it; useradd gives it subordinate ids
AGENTS = ("claude", "codex", "pi")
USERS = ("root", "1000")
CONTAINER = f"claude-sandbox-rootless-test-{os.getpid()}"


def _as_user(*argv: str, stdin: int | None = None, lock: bool = False,
             timeout: float = 600) -> subprocess.CompletedProcess[str]:
    home = pwd.getpwnam(USER).pw_dir
    command = ["runuser", "-u", USER, "--", "env", f"HOME={home}",
               f"CONTAINERS_CONF={pb.CACHE_DIR / 'containers.conf'}", "podman", *argv]
    if lock:
        command = ["flock", pb.LOCK, *command]
    return subprocess.run(command, stdin=stdin, capture_output=True, text=True, check=False,
                          timeout=timeout)


def _subordinate_ids() -> None:
    """The user's subordinate ids, which rootless podman maps the container's users to."""
    for table, flag in (("/etc/subuid", "--add-subuids"), ("/etc/subgid", "--add-subgids")):
        with open(table) as handle:
            if any(line.startswith(f"{USER}:") for line in handle):
                continue
        subprocess.run(["usermod", flag, "200000-265535", USER], check=True)


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    image = pb.image_once()
    pb.use_test_containers_conf()
    _subordinate_ids()
    save = subprocess.Popen(["podman", "save", image], stdout=subprocess.PIPE)
    assert save.stdout is not None
    loaded = _as_user("load", stdin=save.stdout.fileno())
    save.stdout.close()
    assert save.wait() == 0 and loaded.returncode == 0, loaded.stderr[-2000:]
    _as_user("rm", "-f", "-t", "0", CONTAINER)
    started = _as_user("run", "-d", "--name", CONTAINER, *pb.RUN_FLAGS, image, "sleep",
                       "infinity")
    assert started.returncode == 0, started.stderr[-2000:]
    yield CONTAINER
    _as_user("rm", "-f", "-t", "0", CONTAINER)
    _as_user("rmi", "-f", image)
    # An image an earlier run loaded under the same name stays behind untagged: 1.3 GB.
    _as_user("image", "prune", "-f")


def _in(container: str, command: str, user: str) -> subprocess.CompletedProcess[str]:
    return _as_user("exec", "--user", user, "--workdir", "/workspace", container, "bash", "-c",
                    command, lock=True)


def test_the_container_runs_rootless(container: str) -> None:
    """The container's root is the host user: nothing of it is the host's root."""
    result = _in(container, "cat /proc/self/uid_map", "root")
    first = result.stdout.split()
    assert first[:2] == ["0", str(pwd.getpwnam(USER).pw_uid)], result.stdout


@pytest.mark.parametrize("user", USERS)
def test_doctor_passes(container: str, user: str) -> None:
    result = _in(container, "claude-sandbox doctor --plain", user)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]


@pytest.fixture(scope="module")
def tool_call(container: str) -> str:
    script = "/usr/local/share/csbx-tool-call.py"
    with open(pb.REPO / "tests" / "image" / "tool_call.py", "rb") as source:
        copied = subprocess.run(
            ["runuser", "-u", USER, "--", "env", f"HOME={pwd.getpwnam(USER).pw_dir}",
             f"CONTAINERS_CONF={pb.CACHE_DIR / 'containers.conf'}", "podman", "exec", "-i",
             container, "sh", "-c", f"cat > {script} && chmod 644 {script} && "
             f"printf '{pb.TOOL_CALL_CONF}' >> /etc/claude-sandbox.conf"],
            stdin=source, capture_output=True, text=True, check=False)
    assert copied.returncode == 0, copied.stderr
    return script


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("agent", AGENTS)
def test_each_agent_runs_a_tool_call(container: str, tool_call: str, user: str,
                                     agent: str) -> None:
    python = "/usr/libexec/claude-sandbox/tools-venv/bin/python"
    result = _in(container, f"{python} -I {tool_call} {agent}", user)
    assert result.returncode == 0 and "ran inside the sandbox" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-2000:]
