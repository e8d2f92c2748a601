"""The Feature through the real dev-container CLI (npm @devcontainers/cli) with podman.

What a user does: a devcontainer.json naming the Feature, `devcontainer build`,
`devcontainer up`, and the agents' sandbox checked with `devcontainer exec
claude-sandbox verify`. The base is the offline one (no container registry);
the CLI comes from the npm registry, the only network it is given. The built
image keeps no npm, pip or apt download.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import podman_base as pb
import pytest

pytestmark = pb.MARKS
CLI_VERSION = "0.89.0"
IMAGE = f"localhost/claude-sandbox-feature-cli-test:{os.getpid()}"
# The flags docs/how-to/devcontainer-feature.md gives (runArgs), the last one for Docker:
# the profile deploy/seccomp/make_profile.py makes from Docker's default, so that the
# container runs under Docker's seccomp semantics here too (podman's own default would
# allow the namespaces without it).
PROFILE = "claude-sandbox-seccomp.json"
RUN_ARGS = ["--device=/dev/net/tun", "--init", "--security-opt=unmask=/proc/*",
            f"--security-opt=seccomp=${{localWorkspaceFolder}}/.devcontainer/{PROFILE}"]


def _cli() -> str:
    prefix = pb.CACHE_DIR / f"devcontainers-cli-{CLI_VERSION}"
    binary = prefix / "node_modules" / ".bin" / "devcontainer"
    if not binary.exists():
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                        f"@devcontainers/cli@{CLI_VERSION}"], check=True, capture_output=True)
    return str(binary)


def _devcontainer(workspace: Path, *args: str, timeout: float = 1800
                  ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_cli(), *args, "--workspace-folder", str(workspace),
                           "--docker-path", "podman"],
                          capture_output=True, text=True, check=False, timeout=timeout)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    pb.use_test_containers_conf()
    root = tmp_path_factory.mktemp("feature-cli")
    config_dir = root / ".devcontainer"
    config_dir.mkdir()
    source = pb.source_snapshot()
    # A local Feature lives under .devcontainer/ and is named by a relative path.
    subprocess.run([str(source / "feature" / "build.sh"), str(config_dir / "claude-sandbox")],
                   check=True, capture_output=True)
    pb.make_profile(config_dir / PROFILE)
    config = {
        "image": pb.ensure_base_image(),
        "features": {"./claude-sandbox": {
            "agents": "claude,codex,pi",
            "claudeCodeVersion": pb.AGENT_VERSIONS["claude"],
            "codexVersion": pb.AGENT_VERSIONS["codex"],
            "piVersion": pb.AGENT_VERSIONS["pi"],
        }},
        "runArgs": RUN_ARGS,
        "workspaceFolder": "/workspace",
        "workspaceMount": f"source={root},target=/workspace,type=bind",
    }
    (config_dir / "devcontainer.json").write_text(json.dumps(config, indent=1))
    os.chmod(root, 0o755)
    yield root
    ids = subprocess.run(["podman", "ps", "-aq", "--filter",
                          f"label=devcontainer.local_folder={root}"],
                         capture_output=True, text=True, check=False).stdout.split()
    for container in ids:
        pb.stop(container)
    subprocess.run(["podman", "rmi", "-f", IMAGE], capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)


def test_build_leaves_no_package_cache(workspace: Path) -> None:
    built = _devcontainer(workspace, "build", "--image-name", IMAGE)
    assert built.returncode == 0, (built.stdout + built.stderr)[-6000:]
    sizes = subprocess.run(
        ["podman", "run", "--rm", "--entrypoint", "sh", IMAGE, "-c",
         "du -sk /root/.npm /root/.cache/pip /var/lib/apt/lists /var/cache/apt/archives "
         "2>/dev/null; ls /var/cache/apt/archives/*.deb /var/lib/apt/lists/*_Packages* "
         "2>/dev/null | wc -l"],
        capture_output=True, text=True, check=False)
    lines = sizes.stdout.split("\n")
    assert lines[-2].strip() == "0", sizes.stdout  # no .deb and no package index left
    big = [line for line in lines[:-2] if line and int(line.split()[0]) > 1024]
    assert not big, f"caches over 1 MiB: {big}"


def test_up_and_verify(workspace: Path) -> None:
    up = _devcontainer(workspace, "up")
    assert up.returncode == 0, (up.stdout + up.stderr)[-6000:]
    verify = subprocess.run(
        ["flock", pb.LOCK, _cli(), "exec", "--workspace-folder", str(workspace),
         "--docker-path", "podman", "claude-sandbox", "verify", "--agent", "claude", "--plain",
         "--quick"], capture_output=True, text=True, check=False, timeout=900)
    assert verify.returncode == 0, (verify.stdout + verify.stderr)[-6000:]
    assert "0 FAIL" in verify.stdout


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_each_agent_runs_a_tool_call(workspace: Path, agent: str) -> None:
    """After test_up_and_verify: the container the CLI started, the Feature's agents."""
    ids = subprocess.run(["podman", "ps", "-q", "--filter",
                          f"label=devcontainer.local_folder={workspace}"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert ids, "no container from devcontainer up"
    script = "/usr/local/share/csbx-tool-call.py"
    subprocess.run(["podman", "cp", str(pb.REPO / "tests" / "image" / "tool_call.py"),
                    f"{ids[0]}:{script}"], check=True, capture_output=True)
    setup = pb.execute(ids[0], f"chmod 644 {script}; grep -q env-may-widen "
                               f"/etc/claude-sandbox.conf || printf '{pb.TOOL_CALL_CONF}' >> "
                               "/etc/claude-sandbox.conf", lock=False)
    assert setup.returncode == 0, setup.stderr
    python = "/usr/libexec/claude-sandbox/tools-venv/bin/python"
    result = pb.execute(ids[0], f"{python} -I {script} {agent}", timeout=300)
    assert result.returncode == 0 and "ran inside the sandbox" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-2000:]
