"""CLAUDE_SANDBOX_TRACE=1's phases (core/trace.py): what a note costs to work out is no
phase's, so the bench's per-phase budget reads the launch, not the tracer."""

from __future__ import annotations

import re
import time

import pytest

from claude_sandbox.core.trace import Trace


def _phases(err: str) -> dict[str, float]:
    found = re.findall(r"claude-sandbox: trace: (.+?): ([0-9.]+) ms \(total", err)
    return {name: float(ms) for name, ms in found}


def test_a_notes_cost_is_left_out_of_the_next_phase(capsys: pytest.CaptureFixture[str],
                                                    ) -> None:
    trace = Trace(True)
    trace.phase("plan")

    def slow_note() -> str:
        time.sleep(0.2)
        return "plan digest d1gest"

    trace.note(slow_note)
    trace.phase("next")
    err = capsys.readouterr().err
    phases = _phases(err)
    assert set(phases) == {"plan", "next"}
    assert phases["next"] < 100  # the note's 200 ms is nobody's phase
    assert "claude-sandbox: trace: plan digest d1gest\n" in err


def test_a_disabled_trace_never_works_out_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    def refuse() -> str:
        raise AssertionError("worked out")

    Trace(False).note(refuse)
    Trace(False).phase("plan")
    assert capsys.readouterr().err == ""
