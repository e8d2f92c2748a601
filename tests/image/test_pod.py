"""deploy/pod.yaml, played with `podman kube play`: the sandbox works in the pod as shipped.

`podman kube play` runs Kubernetes YAML with podman: the same pod spec a cluster
gets, on this machine, with the image the image tests build. Inside the pod,
`claude-sandbox verify` runs the numbered checks; and with the tun volume taken
out, `claude-sandbox doctor` names the pod setting that is missing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import podman_base as pb
import pytest

pytestmark = pb.MARKS
MANIFEST = pb.REPO / "deploy" / "pod.yaml"
SHIPPED_IMAGE = "ghcr.io/claude-sandbox/claude-sandbox:latest"


def _manifest(name: str, without_tun: bool = False) -> str:
    text = MANIFEST.read_text()
    assert SHIPPED_IMAGE in text and "name: claude-sandbox\n" in text
    text = text.replace(SHIPPED_IMAGE, pb.image_once()).replace(
        "name: claude-sandbox\n", f"name: {name}\n", 1)
    if without_tun:
        text = text.replace("        - name: tun\n          mountPath: /dev/net/tun\n", "")
        text = text.replace("    - name: tun\n      hostPath:\n        path: /dev/net/tun\n"
                            "        type: CharDevice\n", "")
        # What the kubelet sets in every pod: doctor recognises a pod by it.
        text = text.replace("      workingDir: /workspace\n", "      workingDir: /workspace\n"
                            "      env:\n        - name: KUBERNETES_SERVICE_HOST\n"
                            "          value: 10.96.0.1\n")
        assert "/dev/net/tun" not in text.split("volumes:")[1]
    return text


@pytest.fixture
def pod(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    suffix = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[-24:].strip("-")
    name = f"csbx-pod-{os.getpid()}-{suffix}"
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(_manifest(name, without_tun="doctor" in request.node.name))
    pb.image_once()
    pb.use_test_containers_conf()
    played = subprocess.run([*pb.PODMAN, "kube", "play", "--replace", str(manifest)],
                            capture_output=True, text=True, check=False, timeout=300)
    assert played.returncode == 0, played.stdout + played.stderr
    try:
        yield f"{name}-dev"  # podman names a pod's container POD-CONTAINER
    finally:
        subprocess.run([*pb.PODMAN, "kube", "down", str(manifest)], capture_output=True,
                       check=False, timeout=120)


def test_verify_passes_in_the_pod(pod: str) -> None:
    result = pb.execute(pod, "claude-sandbox verify --agent claude --plain --quick",
                        user="1000", timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 FAIL" in result.stdout


def test_doctor_names_the_missing_pod_setting(pod: str) -> None:
    result = pb.execute(pod, "claude-sandbox doctor --json", user="1000", lock=False)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["where"] == "a Kubernetes pod"
    tun = next(row for row in report["rows"] if row["name"] == "/dev/net/tun")
    assert not tun["ok"]
    assert "hostPath volume of type CharDevice" in tun["fix"], tun


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_each_agent_runs_a_tool_call_in_the_pod(pod: str, agent: str) -> None:
    """The pod's user (uid 1000, every capability dropped) gets a working agent."""
    script = "/tmp/csbx-tool-call.py"
    subprocess.run([*pb.PODMAN, "cp", str(pb.REPO / "tests" / "image" / "tool_call.py"),
                    f"{pod}:{script}"], check=True, capture_output=True)
    # The operator's file is root's: root in the pod, without capabilities, still owns it.
    setup = pb.execute(pod, f"chmod 644 {script}; grep -q env-may-widen "
                            f"/etc/claude-sandbox.conf || printf '{pb.TOOL_CALL_CONF}' >> "
                            "/etc/claude-sandbox.conf", user="0", lock=False)
    assert setup.returncode == 0, setup.stderr
    python = "/usr/libexec/claude-sandbox/tools-venv/bin/python"
    result = pb.execute(pod, f"{python} -I {script} {agent}", user="1000", timeout=300)
    assert result.returncode == 0 and "ran inside the sandbox" in result.stdout, \
        result.stdout[-3000:] + result.stderr[-2000:]
