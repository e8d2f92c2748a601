"""The catalogue and the implementations agree; the rendered pages do not drift."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
VERIFICATION = REPO / "verification"
CATALOGUE = yaml.safe_load((VERIFICATION / "checks.yaml").read_text())


def _test_ids(name: str, prefix: str = "test") -> list[str]:
    tree = ast.parse((VERIFICATION / name).read_text())
    ids = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and (m := re.match(rf"{prefix}_(a?\d+)_",
                                                                node.name)):
            ids.append(m.group(1).upper())
    return ids


def test_numbers_are_unique_and_keep_compat_meanings() -> None:
    numbers = [c["number"] for c in CATALOGUE["checks"]]
    assert numbers == sorted(set(numbers), key=int)
    assert numbers[:22] == [f"{n:02d}" for n in range(1, 23)]
    assert [c["name"] for c in CATALOGUE["checks"]][18:20] == ["jail-routes", "jail-behaviour"]
    for check in CATALOGUE["checks"]:
        assert {"number", "name", "defence", "asserts", "where"} <= set(check)


def test_every_inside_check_has_one_implementation() -> None:
    inside = [c["number"] for c in CATALOGUE["checks"] if c["where"] == "inside"]
    assert sorted(_test_ids("test_checks.py")) == sorted(inside)
    agent = [c["number"] for c in CATALOGUE["checks"] if c["where"] == "agent"]
    assert sorted(n for n in _test_ids("test_brokered.py") if not n.startswith("A")) == agent
    outside = {c["number"] for c in CATALOGUE["checks"] if c["where"] == "outside"}
    source = "".join(p.read_text() for p in sorted(VERIFICATION.glob("outside*.py")))
    assert {n for n in outside if f"def check_{n}_" in source} == outside


def test_adversarial_suite_has_at_least_30_attempts() -> None:
    ids = [a["id"] for a in CATALOGUE["adversarial"]]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)
    # Most run inside; a probe that acts as another local user runs outside (the runner).
    found = _test_ids("test_adversarial.py") + [
        n for n in _test_ids("test_brokered.py") if n.startswith("A")] + _test_ids(
        "outside_users.py", "probe")
    assert sorted(found) == sorted(ids)


def test_rendered_reference_pages_match() -> None:
    result = subprocess.run([sys.executable, "-m", "claude_sandbox.tools.render", "--check"],
                            cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_tools_stay_out_of_the_launch_path() -> None:
    heavy = ("rich", "pytest", "testinfra", "pyroute2", "jinja2", "yaml")
    package = REPO / "claude_sandbox"
    # Every module but the operator tools' own, at any depth (launch/, jail/, inside/...).
    checked = [p for p in package.rglob("*.py") if p.relative_to(package).parts[0] != "tools"]
    assert len(checked) > 50, checked
    for path in checked:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in heavy, f"{path.name} imports {name}"
                assert not name.startswith("claude_sandbox.tools"), f"{path.name} imports tools"
