"""`doctor` names a missing tun device, a missing pasta, a tampered shim, a compiled
program replaced or older than its source, and a launch bundle the launch would not
serve from, with fixes.

Each fault is simulated in a private mount namespace (`unshare -m`) where a
bind mount masks the real file; the machine itself is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOCK = "/tmp/claude-sandbox-ns.lock"
REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.getuid() != 0, reason="unshare -m and bind mounts need root"),
]


def _doctor_with(mounts: list[tuple[str, str]]) -> dict:
    binds = " && ".join(f"mount --bind {src} {dst}" for src, dst in mounts) or "true"
    python = f"{sys.executable} -I -m claude_sandbox.tools.doctor --json"
    result = subprocess.run(
        ["flock", LOCK, "unshare", "-m", "--propagation", "private", "sh", "-c",
         f"{binds} && cd {REPO} && PYTHONPATH={REPO} {python}"],
        capture_output=True, text=True, check=False, timeout=120)
    assert result.stdout, result.stderr
    report = json.loads(result.stdout)
    report["status"] = result.returncode
    return report


def _row(report: dict, name: str) -> dict:
    return next(r for r in report["rows"] if r["name"] == name)


def test_missing_tun(tmp_path: Path) -> None:
    fake = tmp_path / "not-tun"
    fake.write_text("")
    report = _doctor_with([(str(fake), "/dev/net/tun")])
    row = _row(report, "/dev/net/tun")
    assert not row["ok"] and "devcontainer.json" in row["fix"]
    assert report["status"] == 1


def test_missing_pasta() -> None:
    report = _doctor_with([("/dev/null", "/usr/bin/pasta")])
    row = _row(report, "pasta")
    assert not row["ok"] and "passt" in row["fix"]
    assert report["status"] == 1


def test_tampered_shim(tmp_path: Path) -> None:
    tampered = tmp_path / "claude"
    tampered.write_text("#!/bin/sh\nexec /usr/libexec/claude-sandbox/real/claude \"$@\"\n")
    tampered.chmod(0o755)
    report = _doctor_with([(str(tampered), "/usr/local/bin/claude")])
    row = _row(report, "shims intact")
    assert not row["ok"] and "installer" in row["fix"]
    assert report["status"] == 1


def test_replaced_inner_stage() -> None:
    """The compiled inner stage is not what the installer placed: named, not fatal (the
    launch then fails closed, or runs the Python stage where the program is missing)."""
    report = _doctor_with([("/dev/null", "/usr/libexec/claude-sandbox/enter")])
    row = _row(report, "compiled programs")
    assert not row["ok"] and "/usr/libexec/claude-sandbox/enter" in row["detail"]
    assert "installer" in row["fix"]
    healthy = _doctor_with([])
    assert _row(healthy, "compiled programs")["ok"]


def test_inner_stage_older_than_its_source(tmp_path: Path) -> None:
    """The package changed without the installer (the stamp of the source it was built
    from is not the package's): the program may refuse what the launcher writes."""
    stamp = tmp_path / "stamp"
    stamp.write_text("0" * 64)
    report = _doctor_with([(str(stamp), "/usr/libexec/claude-sandbox/enter.source-sha256")])
    row = _row(report, "compiled programs")
    assert not row["ok"] and "enter is older than its source" in row["detail"]
    assert "installer" in row["fix"]


@pytest.mark.parametrize("mode", [0o644, 0o664])
def test_a_launch_bundle_the_launch_would_not_serve_from(tmp_path: Path, mode: int) -> None:
    """A bundle the launch refuses (another may write it) or that no longer matches the
    core venv's package (here an empty one): named, not fatal, with the fix."""
    stale = tmp_path / "bundle"
    stale.write_bytes(b"")
    stale.chmod(mode)
    report = _doctor_with([(str(stale), "/usr/libexec/claude-sandbox/launch-bundle")])
    row = _row(report, "launch bundle")
    words = "only root may write" if mode & 0o020 else "does not match"
    assert not row["ok"] and words in row["detail"], row
    assert "install.sh" in row["fix"]
    assert report["status"] == 0  # not a required row: the launch imports from the venv
    assert _row(_doctor_with([]), "launch bundle")["ok"]


def test_no_unshare_program_is_needed() -> None:
    """A launch makes its namespaces with the core interpreter's unshare(2), never with
    util-linux's unshare(1) (on Ubuntu's restricted user namespaces only a program an
    AppArmor profile names may): with that program unusable, the egress redirect row,
    which makes a namespace of the jail's kind, is still ok, and no row asks for it."""
    report = _doctor_with([("/dev/null", "/usr/bin/unshare")])
    assert _row(report, "egress redirect")["ok"], _row(report, "egress redirect")
    assert all(row["name"] != "unshare" for row in report["rows"])
