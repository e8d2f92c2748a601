"""The one containment test (core/paths.py): by text, a component at a time."""

from __future__ import annotations

import pytest

from claude_sandbox.core import paths


@pytest.mark.parametrize("path, top, inside", [
    ("/a/b", "/a/b", True), ("/a/b/c", "/a/b", True), ("/a/bc", "/a/b", False),
    ("/a", "/a/b", False), ("/anything", "/", True), ("/", "/", True),
    ("/a/b/c", "/a/b/", True), ("/a/b", "/a/b/", False),
])
def test_under(path: str, top: str, inside: bool) -> None:
    assert paths.under(path, top) is inside


def test_under_any() -> None:
    assert paths.under_any("/w/x", ["/v", "/w"]) and not paths.under_any("/wx", ["/w"])
    assert not paths.under_any("/w", [])
