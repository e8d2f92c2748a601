"""The outside half of the adversarial suite: a verdict from what is left outside."""

from __future__ import annotations

from pathlib import Path

from claude_sandbox.tools import adversarial


def _row(**extra: object) -> dict[str, object]:
    return {"id": "A99", "outcome": "PASS", "detail": "probe", **extra}


def test_a_plant_named_by_the_report_is_blocked_and_an_unnamed_one_fails() -> None:
    row = _row(reported=[".npmrc", "bunfig.toml"])
    (ok,) = adversarial.confirm([row], {}, "the session created or changed 2 control "
                                           "files (...): .npmrc, bunfig.toml; review them")
    assert ok.outcome == "PASS"
    (bad,) = adversarial.confirm([row], {}, "the session created or changed 1 control "
                                            "file (...): .npmrc; review it")
    assert bad.outcome == "FAIL" and "bunfig.toml" in bad.detail


def test_appended_text_left_outside_fails_and_the_file_is_kept(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("[core]\n\tbare = false\n[core]\n\thooksPath = x\n")
    row = _row(appended=[[str(config), "[core]\n\thooksPath = x\n"]])
    (verdict,) = adversarial.confirm([row], {})
    assert verdict.outcome == "FAIL" and str(config) in verdict.detail
    assert config.exists()  # the user's file: named, never removed
    config.write_text("[core]\n\tbare = false\n")
    (verdict,) = adversarial.confirm([row], {})
    assert verdict.outcome == "PASS"
