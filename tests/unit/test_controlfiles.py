"""The control-file planner: which paths are held read-only, pinned or stood in for."""

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


def test_a_git_repository_keeps_git_writable_but_its_config_and_hooks() -> None:
    result = plan({".git": "dir", ".git/config": "file", ".git/hooks": "dir"})
    assert result.pinned == ("/ws/.git",)  # cannot be renamed away, stays writable
    for held in ("/ws/.git/config", "/ws/.git/hooks", "/ws/.git/modules", "/ws/.git/commondir",
                 "/ws/.claude", "/ws/.mcp.json", "/ws/.vscode", "/ws/.devcontainer"):
        assert held in result.read_only
    assert "/ws/.git" not in result.read_only
    made = {p.path: p for p in result.placeholders}
    assert made["/ws/.git/commondir"].kind == "file"
    assert made["/ws/.git/commondir"].content == ".\n"  # git reads "." as the git dir itself
    assert made["/ws/.git/config.worktree"] == controlfiles.Placeholder(
        "/ws/.git/config.worktree", "file", "")
    assert made["/ws/.mcp.json"].kind == "dir"  # git ignores empty directories
    assert "/ws/.git/config" not in made and "/ws/.git/hooks" not in made


def test_no_repository_gets_one_placeholder_for_git() -> None:
    result = plan({})
    git = [p for p in result.placeholders if p.path.startswith("/ws/.git/") or p.path == "/ws/.git"]
    assert git == [controlfiles.Placeholder("/ws/.git", "dir")]
    assert result.pinned == ()


def test_a_gitfile_worktree_is_held_read_only() -> None:
    result = plan({".git": "file"})
    assert "/ws/.git" in result.read_only and "/ws/.git" not in result.pinned
    assert not [p for p in result.placeholders if p.path.startswith("/ws/.git/")]


def test_parents_of_derived_paths_are_pinned_and_order_is_parents_first() -> None:
    result = plan({"tools": "dir", "tools/hooks": "dir", ".vscode": "dir"},
                  extra=(("tools/hooks", "hooksPath"),))
    assert "/ws/tools" in result.pinned and "/ws/tools/hooks" in result.read_only
    depths = [p.count("/") for p in result.read_only]
    assert depths == sorted(depths)


def test_an_absent_parent_of_a_derived_path_is_stood_in_for() -> None:
    result = plan({}, extra=(("tools/hooks", "hooksPath"),))
    assert controlfiles.Placeholder("/ws/tools", "dir") in result.placeholders
    assert "/ws/tools" in result.read_only


def test_a_pin_inside_a_read_only_path_is_dropped() -> None:
    table = controlfiles.controls((".claude/x/y",), ())
    result = plan({".claude": "dir", ".claude/x": "dir", ".claude/x/y": "file"}, table=table)
    assert "/ws/.claude" in result.read_only
    assert not [p for p in result.pinned if p.startswith("/ws/.claude")]


@pytest.mark.parametrize("link", [".claude", ".git", "tools"])
def test_a_symbolic_link_is_refused(link: str) -> None:
    with pytest.raises(SandboxError) as caught:
        plan({link: "link"}, extra=(("tools/hooks", "hooksPath"),))
    assert caught.value.status == EXIT_REFUSED and "symbolic link" in caught.value.message


def test_a_path_this_user_cannot_create_needs_no_placeholder() -> None:
    result = plan({".git": "dir", ".git/config": "file", ".git/hooks": "dir",
                   ".git/commondir": "locked", ".mcp.json": "locked"})
    made = [p.path for p in result.placeholders]
    assert "/ws/.git/commondir" not in made and "/ws/.mcp.json" not in made
    assert "/ws/.mcp.json" not in result.read_only


def test_the_operator_adds_and_removes() -> None:
    table = controlfiles.controls((".github/workflows", ".vscode"), (".idea", ".envrc"))
    paths = [c.path for c in table]
    assert ".github/workflows" in paths and paths.count(".vscode") == 1
    assert ".idea" not in paths and ".envrc" not in paths


_kind = st.sampled_from([None, "dir", "file", "other", "locked"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(controlfiles.candidates(ROOT, TABLE, ())), _kind))
def test_every_control_path_ends_up_held_whatever_the_host(kinds: dict[str, str | None]) -> None:
    result = controlfiles.plan(ROOT, TABLE, (), kinds)
    held = result.read_only
    for control in TABLE:
        path = f"{ROOT}/{control.path}"
        covered = any(path == h or path.startswith(h + "/") for h in held)
        # A directory that is only pinned (.git) keeps its protected entries held instead,
        # and a path below a file cannot exist at all.
        below_file = any(kinds.get(f"{ROOT}/{control.path.split('/')[0]}") in ("file", "other")
                         for _ in [0]) and "/" in control.path
        locked = any(kinds.get(f"{ROOT}/{'/'.join(control.path.split('/')[:n])}") == "locked"
                     for n in range(1, control.path.count("/") + 2))
        assert covered or (control.whole is False) or below_file or locked, (control.path, kinds)
    for pin in result.pinned:
        assert not any(pin == h or pin.startswith(h + "/") for h in held)
