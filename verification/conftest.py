"""Plumbing for the numbered checks and the adversarial suite.

The runner (claude_sandbox/tools/verify.py) gathers facts outside the sandbox
(namespace ids, the launcher's PID, a planted canary's hash, never a secret
on a command line) into a JSON file in the run's workspace, launches pytest
inside, and reads back the JSON report this conftest writes: one row per
check with PASS/FAIL/SKIP and its detail.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
from typing import Any

import probes
import pytest

_ROWS: list[dict[str, Any]] = []
_ID = re.compile(r"test_(a?\d+)_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("claude-sandbox")
    group.addoption("--csbx-facts", default="", help="JSON facts gathered outside the sandbox")
    group.addoption("--csbx-report", default="", help="where to write the JSON report")


def pytest_configure(config: pytest.Config) -> None:
    probes.load_facts(config.getoption("--csbx-facts"))


@pytest.fixture(scope="session")
def facts() -> probes.Facts:
    return probes.FACTS


@pytest.fixture(scope="session")
def host():  # type: ignore[no-untyped-def]
    import testinfra

    return testinfra.get_host("local://")


def _detail(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr)
        # The first line of an AssertionError message is the detail; pytest's own
        # introspection below it is for someone debugging, not for the table.
        first = text.splitlines()[0] if text else "failed"
        return first.removeprefix("AssertionError: ").removeprefix("Failed: ")
    for name, value in report.user_properties:
        if name == "detail":
            return str(value)
    return ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    name = report.nodeid.split("::")[-1]
    match = _ID.match(name)
    if match is None:
        return
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[report.outcome]
        row: dict[str, Any] = {"id": match.group(1).upper(), "test": name, "outcome": outcome,
               "detail": _detail(report)}
        for key, value in report.user_properties:
            if key == "planted":
                row.setdefault("planted", []).extend(value)
            elif key in ("markers", "appended", "reported"):
                row[key] = value
        _ROWS.append(row)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--csbx-report")
    if not path:
        return
    text = json.dumps({"rows": _ROWS}, indent=1)
    temporary = f"{path}.part"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        if error.errno not in (errno.EROFS, errno.EACCES):
            raise
        # hardening = brokered, run as the agent itself: only its commands write the
        # workspace, so the report leaves through one (test_brokered.py).
        subprocess.run(["/bin/sh", "-c", 'cat > "$1"', "sh", temporary], input=text,
                       text=True, check=True, timeout=60)
        subprocess.run(["/bin/sh", "-c", 'mv "$1" "$2"', "sh", temporary, path], check=True,
                       timeout=60)
        return
    os.replace(temporary, path)
