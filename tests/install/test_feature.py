"""The dev-container Feature's install.sh on a fresh container from the image tests' base.

It must place what the image places (same shims, hooks, package, policy files),
write its options into /etc/claude-sandbox.conf, and change nothing when run again.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import podman_base as pb
import pytest
from manifest import MANIFEST_SCRIPT

pytestmark = pb.MARKS
testinfra = pytest.importorskip("testinfra")

CONTAINER = f"claude-sandbox-feature-test-{os.getpid()}"
OPTIONS = {
    "AGENTS": "claude,codex,pi",
    "CLAUDECODEVERSION": pb.AGENT_VERSIONS["claude"],
    "CODEXVERSION": pb.AGENT_VERSIONS["codex"],
    "PIVERSION": pb.AGENT_VERSIONS["pi"],
    "EGRESSJAIL": "true",
    "EXTRACONFIG": "allow-ip = 10.1.2.3; pass-env = ANTHROPIC_API_KEY",
}
FEATURE_RUN = " ".join(f"{k}='{v}'" for k, v in OPTIONS.items()) + " /feature/install.sh 2>&1"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started = time.monotonic()
    dist = tmp_path_factory.mktemp("feature") / "claude-sandbox"
    source = pb.source_snapshot()
    subprocess.run([str(source / "feature" / "build.sh"), str(dist)], check=True,
                   capture_output=True)
    npm, pip = pb.CACHE_DIR / "npm", pb.CACHE_DIR / "pip"
    for cache in (npm, pip):
        cache.mkdir(parents=True, exist_ok=True)
    name = pb.start(pb.ensure_base_image(), CONTAINER, f"--volume={dist}:/feature:ro",
                    f"--volume={npm}:/root/.npm", f"--volume={pip}:/root/.cache/pip")
    # A workspace: the sandbox refuses / as its writable root.
    pb.execute(name, "install -d -m 1777 /workspace", workdir="/", lock=False)
    yield testinfra.get_host(f"podman://{name}")
    pb.stop(name)
    print(f"\nfeature test total: {time.monotonic() - started:.0f} s")


def test_feature_installs(host: Any) -> None:
    started = time.monotonic()
    result = host.run(FEATURE_RUN)
    print(f"\nfeature install: {time.monotonic() - started:.0f} s")
    assert result.rc == 0, result.stdout
    conf = host.file("/etc/claude-sandbox.conf")
    assert conf.user == "root" and conf.mode == 0o644
    lines = conf.content_string.splitlines()
    assert "egress-jail = 0" not in lines
    assert "allow-ip = 10.1.2.3" in lines and "pass-env = ANTHROPIC_API_KEY" in lines
    assert host.file("/var/tmp/claude-agent").mode == 0o700


def test_feature_again_changes_nothing(host: Any) -> None:
    before = host.file("/etc/claude-sandbox.conf").content_string
    result = host.run(FEATURE_RUN)
    assert result.rc == 0, result.stdout
    assert "nothing to change" in result.stdout, result.stdout
    assert "unchanged  /etc/claude-sandbox.conf (Feature options)" in result.stdout
    assert host.file("/etc/claude-sandbox.conf").content_string == before


def test_feature_agents_run(host: Any) -> None:
    for agent in ("claude", "codex", "pi"):
        result = pb.execute(CONTAINER, f"{agent} --version 2>&1")
        assert result.returncode == 0 and pb.AGENT_VERSIONS[agent] in result.stdout, result


def test_feature_matches_the_image(host: Any) -> None:
    # The image this run's image tests use, from the same source snapshot (built here
    # when they did not run).
    pb.image_once()
    image = subprocess.run([*pb.PODMAN, "run", "--rm", pb.IMAGE, "bash", "-c", MANIFEST_SCRIPT],
                           capture_output=True, text=True, check=True).stdout
    feature = host.run(MANIFEST_SCRIPT)
    assert feature.rc == 0, feature.stderr
    differ = sorted(set(feature.stdout.splitlines()) ^ set(image.splitlines()))
    assert not differ, "\n".join(differ)


def test_egress_jail_option(host: Any) -> None:
    off = host.run(FEATURE_RUN.replace("EGRESSJAIL='true'", "EGRESSJAIL='false'"))
    assert off.rc == 0, off.stdout
    assert "egress-jail = 0" in host.file("/etc/claude-sandbox.conf").content_string.splitlines()
    assert host.run(FEATURE_RUN).rc == 0
    conf = host.file("/etc/claude-sandbox.conf").content_string
    assert "egress-jail = 0" not in conf.splitlines()


def test_bad_extra_config_fails_the_build(host: Any) -> None:
    bad = FEATURE_RUN.replace("allow-ip = 10.1.2.3", "no-such-key = 1")
    result = host.run(bad)
    assert result.rc != 0
    assert "claude-sandbox.conf" in result.stdout
    # Put the good options back for anyone inspecting the container afterwards.
    assert host.run(FEATURE_RUN).rc == 0


def test_feature_metadata() -> None:
    import json

    meta = json.loads((pb.REPO / "feature/claude-sandbox/devcontainer-feature.json").read_text())
    assert meta["id"] == "claude-sandbox"
    assert Path(pb.REPO / "feature/claude-sandbox/install.sh").stat().st_mode & 0o111
    from claude_sandbox import __version__

    assert meta["version"] == __version__
    assert set(meta["options"]) == {"agents", "claudeCodeVersion", "codexVersion", "piVersion",
                                    "egressJail", "extraConfig"}
