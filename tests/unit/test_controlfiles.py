"""The control-file planner: which paths are views, read-only or pinned, and that none is made."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.launch import controlfiles

ROOT = "/ws"
TABLE = controlfiles.controls((), ())


def plan(present: dict[str, str], extra: tuple[tuple[str, str], ...] = (),
         table: tuple[controlfiles.Control, ...] = TABLE) -> controlfiles.ControlPlan:
    wanted = controlfiles.candidates(ROOT, table, [r for r, _ in extra])
    kinds = {path: present.get(path[len(ROOT) + 1 :]) for path in wanted}
    return controlfiles.plan(ROOT, table, extra, kinds)


def test_existing_directories_are_views_and_files_read_only() -> None:
    result = plan({".claude": "dir", ".vscode": "dir", ".mcp.json": "file", ".envrc": "file"})
    assert set(result.views) == {"/ws/.claude", "/ws/.vscode"}
    assert set(result.read_only) == {"/ws/.mcp.json", "/ws/.envrc"}
    assert result.pinned == ()


def test_git_is_not_a_control_path_any_more() -> None:
    """git's directory is an overlay applied by rule (gitapply.py): not held here."""
    assert not [c for c in TABLE if c.path.startswith(".git")]
    result = plan({".git": "dir", ".git/config": "file", ".git/hooks": "dir"})
    assert not [p for p in (*result.views, *result.read_only, *result.pinned) if "/.git" in p]


def test_absent_paths_are_not_held_and_nothing_stands_in() -> None:
    result = plan({})
    assert result.views == () and result.read_only == () and result.pinned == ()


def test_derived_paths_are_read_only_and_their_parents_pinned() -> None:
    result = plan({"tools": "dir", "tools/bin": "dir", ".vscode": "dir"},
                  extra=(("tools/bin", "on PATH"),))
    assert "/ws/tools" in result.pinned and "/ws/tools/bin" in result.read_only
    assert "/ws/tools/bin" not in result.views  # a PATH directory is never the agent's copy


def test_a_path_inside_a_view_is_not_held_again() -> None:
    table = controlfiles.controls((".claude/x/y",), ())
    result = plan({".claude": "dir", ".claude/x": "dir", ".claude/x/y": "file"}, table=table)
    assert "/ws/.claude" in result.views
    assert not [p for p in (*result.pinned, *result.read_only) if p.startswith("/ws/.claude/")]


@pytest.mark.parametrize("link", [".claude", "tools"])
def test_a_symbolic_link_is_refused(link: str) -> None:
    with pytest.raises(SandboxError) as caught:
        plan({link: "link"}, extra=(("tools/bin", "on PATH"),))
    assert caught.value.status == EXIT_REFUSED and "symbolic link" in caught.value.message


def test_the_operator_adds_and_removes() -> None:
    table = controlfiles.controls((".github/workflows", ".vscode"), (".idea", ".envrc"))
    paths = [c.path for c in table]
    assert ".github/workflows" in paths and paths.count(".vscode") == 1
    assert ".idea" not in paths and ".envrc" not in paths


_kind = st.sampled_from([None, "dir", "file", "other"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(controlfiles.candidates(ROOT, TABLE, ())), _kind))
def test_every_existing_control_path_is_held_whatever_the_host(
        kinds: dict[str, str | None]) -> None:
    result = controlfiles.plan(ROOT, TABLE, (), kinds)
    held = (*result.read_only, *result.views)
    for control in TABLE:
        path = f"{ROOT}/{control.path}"
        if kinds.get(path) is not None:
            assert any(path == h or path.startswith(h + "/") for h in held), (path, kinds)
    for pin in result.pinned:
        assert not any(pin == h or pin.startswith(h + "/") for h in held)
