"""The how-tos' flags are the tests' flags: what a user copies is what the tests ran."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "image"))
sys.path.insert(0, str(REPO / "tests" / "install"))

import podman_base  # noqa: E402
import test_feature_cli  # noqa: E402


def test_the_feature_how_to_gives_the_run_args_its_test_uses() -> None:
    text = (REPO / "docs" / "how-to" / "devcontainer-feature.md").read_text()
    found = re.search(r'"runArgs": (\[.*?\])\n', text, re.S)
    assert found, "no runArgs in devcontainer-feature.md"
    assert json.loads(found.group(1)) == test_feature_cli.RUN_ARGS


def test_the_image_how_to_gives_the_run_flags_its_tests_use() -> None:
    text = (REPO / "docs" / "how-to" / "image.md").read_text()
    for engine in ("podman", "docker"):
        line = next(line for line in text.splitlines() if line.startswith(f"{engine} run"))
        assert " ".join(podman_base.RUN_FLAGS) in line, line
    docker = (REPO / "docs" / "how-to" / "docker.md").read_text()
    assert "--security-opt seccomp=" in docker and "make_profile.py" in docker
    snippet = next(a for a in test_feature_cli.RUN_ARGS if "seccomp=" in a)
    assert snippet in docker
