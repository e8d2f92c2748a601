"""The control-file planner: which paths are views, read-only or pinned, and that none is made."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.launch.overlay import controlfiles

ROOT = "/ws"
TABLE = controlfiles.controls((), ())


def plan(present: dict[str, str], extra: tuple[tuple[str, str], ...] = (),
         table: tuple[controlfiles.Control, ...] = TABLE,
         links: dict[str, str | tuple[str, str]] | None = None) -> controlfiles.ControlPlan:
    """`present`: relative path -> kind; `links`: relative link -> its target (absolute,
    as realpath gives it; the link's text is the target relative to it), or -> (text,
    target)."""
    rows = [*((c.path, c.why) for c in table), *extra]
    found = {}
    for rel, value in (links or {}).items():
        path = f"{ROOT}/{rel}"
        text, target = value if isinstance(value, tuple) else (
            os.path.relpath(value, os.path.dirname(path)), value)
        found[path] = controlfiles.Link(path, text, target)
    for _ in range(3):
        rows += [(r, w) for r, w, _ in controlfiles.through_links(ROOT, rows, found)]
    wanted = controlfiles.candidates(ROOT, (), [r for r, _ in rows])
    kinds = {path: present.get(path[len(ROOT) + 1 :]) for path in wanted}
    return controlfiles.plan(ROOT, table, extra, kinds, found)


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
def test_a_symbolic_link_that_cannot_be_read_is_refused(link: str) -> None:
    with pytest.raises(SandboxError) as caught:
        plan({link: "link"}, extra=(("tools/bin", "on PATH"),))
    assert caught.value.status == EXIT_REFUSED and "symbolic link" in caught.value.message


@pytest.mark.parametrize("target", ["/home/u/dotfiles/claude", "/ws", "/", "/wsother/x"])
def test_a_link_that_leaves_the_workspace_is_refused_with_what_the_user_can_do(
        target: str) -> None:
    with pytest.raises(SandboxError) as caught:
        plan({".claude": "link"}, links={".claude": target})
    message = caught.value.message
    assert caught.value.status == EXIT_REFUSED and target in message
    assert "cp -a" in message and "unprotect = .claude" in message


def test_a_link_inside_the_workspace_is_followed_and_its_target_held() -> None:
    result = plan({".claude": "link", "dot": "dir", "dot/claude": "dir", ".envrc": "link",
                   "dot/envrc": "file"},
                  links={".claude": "/ws/dot/claude", ".envrc": "/ws/dot/envrc"})
    assert "/ws/dot/claude" in result.views  # the agent writes its own copy, as for .claude
    assert "/ws/dot/envrc" in result.read_only
    assert "/ws/dot" in result.pinned  # the target cannot be renamed away with its parent
    assert {link.path for link in result.links} == {"/ws/.claude", "/ws/.envrc"}
    assert "/ws/.claude" not in result.views and "/ws/.envrc" not in result.read_only


def test_a_linked_parent_is_followed_for_the_paths_below_it() -> None:
    result = plan({"tools": "link", "src": "dir", "src/tools": "dir", "src/tools/bin": "dir"},
                  extra=(("tools/bin", "on PATH"),), links={"tools": "/ws/src/tools"})
    assert "/ws/src/tools/bin" in result.read_only  # a PATH directory: never a view
    assert "/ws/src/tools" in result.pinned and "/ws/src" in result.pinned
    assert [link.path for link in result.links] == ["/ws/tools"]


def test_every_link_of_a_chain_is_kept_not_only_the_first() -> None:
    """realpath skips `config` in .claude -> config/claude, config -> dot/config: the
    session could replace `config` with a directory of its own, so it is kept too."""
    result = plan({".claude": "link", "config": "link", "dot": "dir", "dot/config": "dir",
                   "dot/config/claude": "dir"},
                  links={".claude": ("config/claude", "/ws/dot/config/claude"),
                         "config": ("dot/config", "/ws/dot/config")})
    assert {link.path for link in result.links} == {"/ws/.claude", "/ws/config"}
    assert "/ws/dot/config/claude" in result.views


def test_the_directories_a_link_text_passes_are_pinned() -> None:
    result = plan({".envrc": "link", "sub": "dir", "sub/cfg": "link", "other": "dir",
                   "other/envrc": "file"},
                  links={".envrc": ("sub/cfg/envrc", "/ws/other/envrc"),
                         "sub/cfg": ("../other", "/ws/other")})
    # .envrc's text is sub/cfg/envrc: `sub` is pinned, the link in it kept.
    assert "/ws/sub" in result.pinned
    assert {link.path for link in result.links} >= {"/ws/.envrc"}
    assert "/ws/other/envrc" in result.read_only


def test_a_link_to_an_absent_target_is_named_absent_and_kept() -> None:
    result = plan({".envrc": "link"}, links={".envrc": "/ws/dot/envrc"})
    assert "/ws/dot" in result.absent  # what the session makes there is moved away
    assert [link.path for link in result.links] == ["/ws/.envrc"]


def test_a_chain_of_links_ends() -> None:
    result = plan({".claude": "link", "a": "link"},
                  links={".claude": "/ws/a", "a": "/ws/a"})  # a loop: realpath stops
    assert {link.path for link in result.links} == {"/ws/.claude", "/ws/a"}


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


def test_what_a_link_in_a_held_directory_names_is_found(tmp_path: str) -> None:
    root = str(tmp_path)
    os.makedirs(f"{root}/.vscode")
    os.makedirs(f"{root}/conf")
    open(f"{root}/conf/tasks.json", "w").close()
    os.symlink("../conf/tasks.json", f"{root}/.vscode/tasks.json")
    os.symlink("/etc/hostname", f"{root}/.vscode/outside")  # not writable inside anyway
    os.symlink("settings.json", f"{root}/.vscode/same")  # inside the view itself
    rows = controlfiles.linked_from(root, [f"{root}/.vscode"])
    assert [r for r, _ in rows] == ["conf/tasks.json"]
    table = controlfiles.controls((), ())
    kinds, links = controlfiles.survey(root, table, rows)
    result = controlfiles.plan(root, table, rows, kinds, links)
    assert f"{root}/conf/tasks.json" in result.read_only
    assert f"{root}/conf" in result.pinned


def test_a_held_directory_too_large_to_read_refuses(tmp_path: str) -> None:
    """Past its bound the walk does not stop quietly: a link it left unread could name a
    file programs outside run. The launch is refused, naming the directory."""
    root = str(tmp_path)
    os.makedirs(f"{root}/.vscode")
    for i in range(12):
        open(f"{root}/.vscode/f{i}", "w").close()
    os.makedirs(f"{root}/conf")
    os.symlink("../conf/tasks.json", f"{root}/.vscode/zz-last")
    with pytest.raises(SandboxError, match=r"\.vscode has more than 10 entries") as refused:
        controlfiles.linked_from(root, [f"{root}/.vscode"], limit=10)
    assert refused.value.status == 77
    assert controlfiles.linked_from(root, [f"{root}/.vscode"], limit=20) == [
        ("conf/tasks.json", "named by the link .vscode/zz-last in a held directory: "
                            "programs outside follow it")]
