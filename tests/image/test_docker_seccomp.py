"""Docker's default seccomp profile, and the profile deploy/seccomp/make_profile.py makes
from it, under podman with the image the image tests build.

Docker's default profile refuses the calls that build namespaces to a container without
CAP_SYS_ADMIN; podman's own default does not, which is why the other image tests pass
without a profile. Docker's default is the one Debian ships with the engine's sources
(package golang-github-docker-docker-dev, from the package mirror), at that engine's
version. Under it a launch is refused with exit 69 in one line, and doctor names the
fix; under the made profile each agent runs a real tool call, as root and as a user.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import podman_base as pb
import pytest

pytestmark = pb.MARKS
AGENTS = ("claude", "codex", "pi")
USERS = ("root", "1000")


@pytest.fixture(scope="module")
def docker_default() -> Path:
    return pb.docker_default_profile()


@pytest.fixture(scope="module")
def made_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pb.make_profile(tmp_path_factory.mktemp("seccomp") / "claude-sandbox-seccomp.json")


def test_the_made_profile_is_the_default_and_one_rule(docker_default: Path,
                                                      made_profile: Path) -> None:
    """Nothing of the default is changed, dropped or moved; the one rule added allows the
    calls that build namespaces, unconditionally, and no other."""
    default = json.loads(docker_default.read_text())
    made = json.loads(made_profile.read_text())
    assert {k: v for k, v in made.items() if k != "syscalls"} == \
        {k: v for k, v in default.items() if k != "syscalls"}
    assert made["syscalls"][:-1] == default["syscalls"]
    added = made["syscalls"][-1]
    assert set(added) == {"names", "action", "comment"}
    assert added["action"] == "SCMP_ACT_ALLOW"
    assert set(added["names"]) <= {"unshare", "clone", "setns", "mount", "umount2",
                                   "pivot_root", "mount_setattr"}
    assert {"unshare", "mount", "setns"} <= set(added["names"])


def _container(name: str, profile: Path) -> Iterator[str]:
    started = pb.start(pb.image_once(), name, "--security-opt", f"seccomp={profile}")
    yield started
    pb.stop(started)


@pytest.fixture(scope="module")
def under_docker_default(docker_default: Path) -> Iterator[str]:
    yield from _container("claude-sandbox-docker-default-test", docker_default)


@pytest.fixture(scope="module")
def under_made_profile(made_profile: Path) -> Iterator[str]:
    yield from _container("claude-sandbox-made-profile-test", made_profile)


@pytest.mark.parametrize("user", USERS)
def test_under_dockers_default_a_launch_is_refused_naming_the_fix(under_docker_default: str,
                                                                  user: str) -> None:
    result = pb.execute(under_docker_default, "claude-sandbox shell -- true", user=user)
    assert result.returncode == 69, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, lines
    assert "seccomp profile refuses unshare" in lines[0]
    assert "deploy/seccomp/make_profile.py" in lines[0]
    assert "bwrap:" not in result.stderr
    # The quick questions need no namespace: they answer even here (check 94).
    version = pb.execute(under_docker_default, "claude --version", user=user)
    assert version.returncode == 0 and "Claude Code" in version.stdout, version


@pytest.mark.parametrize("user", USERS)
def test_under_dockers_default_doctor_names_the_profile(under_docker_default: str,
                                                        user: str) -> None:
    result = pb.execute(under_docker_default, "claude-sandbox doctor --plain", user=user)
    assert result.returncode != 0
    rows = [line for line in result.stdout.splitlines() if "container engine" in line]
    assert rows, result.stdout
    assert "make_profile.py" in result.stdout
    assert "--security-opt seccomp=unconfined" not in result.stdout


@pytest.mark.parametrize("user", USERS)
def test_under_the_made_profile_doctor_passes(under_made_profile: str, user: str) -> None:
    result = pb.execute(under_made_profile, "claude-sandbox doctor --plain", user=user)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def tool_call(under_made_profile: str) -> Iterator[str]:
    script = "/usr/local/share/csbx-tool-call.py"
    subprocess.run([*pb.PODMAN, "cp", str(pb.REPO / "tests" / "image" / "tool_call.py"),
                    f"{under_made_profile}:{script}"], check=True, capture_output=True)
    setup = pb.execute(under_made_profile, f"chmod 644 {script} && "
                       f"printf '{pb.TOOL_CALL_CONF}' >> /etc/claude-sandbox.conf")
    assert setup.returncode == 0, setup
    yield script


@pytest.mark.parametrize("user", USERS)
@pytest.mark.parametrize("agent", AGENTS)
def test_under_the_made_profile_each_agent_runs_a_tool_call(under_made_profile: str,
                                                            tool_call: str, user: str,
                                                            agent: str) -> None:
    python = "/usr/libexec/claude-sandbox/tools-venv/bin/python"
    result = pb.execute(under_made_profile, f"{python} -I {tool_call} {agent}", user=user)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ran inside the sandbox" in result.stdout


def test_under_the_made_profile_harsh_and_brokered_launch(under_made_profile: str) -> None:
    """mount_setattr is in the rule for these: without it their noexec step is refused."""
    saved = pb.execute(under_made_profile, "cp /etc/claude-sandbox.conf /etc/csbx.conf.level")
    assert saved.returncode == 0, saved
    try:
        for level in ("harsh", "brokered"):
            pb.execute(under_made_profile, "cp /etc/csbx.conf.level /etc/claude-sandbox.conf && "
                       f"printf 'hardening = {level}\\n' >> /etc/claude-sandbox.conf")
            result = pb.execute(under_made_profile, f"claude-sandbox shell -- echo in-{level}",
                                user="1000")
            assert result.returncode == 0 and f"in-{level}" in result.stdout, result
    finally:
        pb.execute(under_made_profile, "mv /etc/csbx.conf.level /etc/claude-sandbox.conf")
