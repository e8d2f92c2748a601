"""The record of a moved vendor binary, read back by uninstall (pure, files in tmp_path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from claude_sandbox.installer import InstallError, read_vendor_record

GOOD = {"path": "/usr/local/bin/claude", "link": "", "target": "/x/vendor/claude"}


def test_a_record_reads_back(tmp_path: Path) -> None:
    record = tmp_path / "claude.json"
    record.write_text(json.dumps({**GOOD, "extra": 1}))
    assert read_vendor_record(str(record)) == GOOD


@pytest.mark.parametrize("text", [
    "", "not json", "[" * 100_000, '{"path": ' + "1" * 5000 + "}", "[]",
    json.dumps({**GOOD, "link": None}),
    json.dumps({k: v for k, v in GOOD.items() if k != "target"}),
    json.dumps({**GOOD, "path": "relative/claude"}),
], ids=["empty", "not-json", "too-deep", "long-number", "not-an-object", "null-link",
        "no-target", "relative-path"])
def test_a_damaged_record_stops_uninstall_naming_the_file(tmp_path: Path, text: str) -> None:
    record = tmp_path / "claude.json"
    record.write_text(text)
    with pytest.raises(InstallError) as caught:
        read_vendor_record(str(record))
    assert str(caught.value).startswith(f"{record}: ")
