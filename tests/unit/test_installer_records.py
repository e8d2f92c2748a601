"""The record of a moved vendor binary, read back by uninstall (pure, files in tmp_path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from claude_sandbox.install.agents import read_vendor_record
from claude_sandbox.install.report import InstallError
from claude_sandbox.install.report import read as _read

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


def test_a_file_we_cannot_read_stops_the_install_naming_it(tmp_path: Path) -> None:
    assert _read(str(tmp_path / "absent")) is None
    latin1 = tmp_path / "managed-settings.json"
    latin1.write_bytes(b'{"note": "caf\xe9"}')
    for path in (latin1, tmp_path):  # not UTF-8; a directory
        with pytest.raises(InstallError) as caught:
            _read(str(path))
        assert str(caught.value).startswith(f"{path}: cannot read it")
