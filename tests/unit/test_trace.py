"""CLAUDE_SANDBOX_TRACE=1's phases (core/trace.py): what a phase's detail costs to work
out is no phase's, so the bench's per-phase budget reads the launch, not the tracer."""

from __future__ import annotations

import re
import time

import pytest

from claude_sandbox.core.trace import Trace


def _phases(err: str) -> dict[str, float]:
    found = re.findall(r"claude-sandbox: trace: (.+?): ([0-9.]+) ms \(total", err)
    return {name: float(ms) for name, ms in found}


def test_a_details_cost_is_left_out_of_the_next_phase(capsys: pytest.CaptureFixture[str],
                                                      ) -> None:
    trace = Trace(True)

    def slow_detail() -> str:
        time.sleep(0.2)
        return "d1gest"

    trace.phase("plan", slow_detail)
    trace.phase("next")
    phases = _phases(capsys.readouterr().err)
    assert set(phases) == {"plan d1gest", "next"}
    assert phases["next"] < 100  # the detail's 200 ms is nobody's phase


def test_a_disabled_trace_never_works_out_a_detail(capsys: pytest.CaptureFixture[str]) -> None:
    def refuse() -> str:
        raise AssertionError("worked out")

    Trace(False).phase("plan", refuse)
    assert capsys.readouterr().err == ""
