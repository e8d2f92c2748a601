"""The one-way state store: a first launch imports the login and settings, nothing flows back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from claude_sandbox.core.errors import SandboxError
from claude_sandbox.launch.configure import profiles
from claude_sandbox.launch.session import state


def _outer_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".claude" / "projects" / "p").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"token": "t"}')
    (home / ".claude" / "settings.json").write_text('{"model": "x"}')
    (home / ".claude" / "projects" / "p" / "t.jsonl").write_text("transcript")
    (home / ".claude.json").write_text('{"oauthAccount": {}}')
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "CLAUDE.md").write_text("notes")
    (home / ".claude" / "CLAUDE.md").symlink_to(dotfiles / "CLAUDE.md")
    (home / ".claude" / "linked-dir").symlink_to(dotfiles)
    return home


def test_first_launch_imports_login_and_settings_but_not_transcripts(tmp_path: Path) -> None:
    home = _outer_home(tmp_path)
    root = state.store_root(None, str(home), os.getuid())
    claude = profiles.get("claude")
    made = Path(state.ensure_home(root, "claude", str(home), claude.imports, os.getuid(),
                                  default_root=True))
    assert made == Path(root, "claude", "home")
    assert (made / ".claude" / ".credentials.json").read_text() == '{"token": "t"}'
    assert (made / ".claude.json").read_text() == '{"oauthAccount": {}}'
    assert (made / ".claude" / "CLAUDE.md").read_text() == "notes"  # a linked file, copied
    assert not (made / ".claude" / "projects").exists()
    assert not (made / ".claude" / "linked-dir").exists()  # a linked directory is not followed
    assert oct(os.stat(root).st_mode & 0o777) == "0o700"
    # Later changes inside stay inside; a second launch does not import again.
    (made / ".claude" / "settings.json").write_text('{"hooks": "planted"}')
    again = state.ensure_home(root, "claude", str(home), claude.imports, os.getuid(),
                              default_root=True)
    assert Path(again, ".claude", "settings.json").read_text() == '{"hooks": "planted"}'
    assert (home / ".claude" / "settings.json").read_text() == '{"model": "x"}'


def test_import_copies_again_on_request_and_reset_removes(tmp_path: Path) -> None:
    home = _outer_home(tmp_path)
    root = state.store_root(str(tmp_path / "shared"), str(home), os.getuid())
    (tmp_path / "shared").mkdir()
    pi = profiles.get("pi")
    made = state.ensure_home(root, "pi", str(home), pi.imports, os.getuid(), default_root=False)
    (home / ".pi" / "agent" / "sessions").mkdir(parents=True)
    (home / ".pi" / "agent" / "auth.json").write_text("{}")
    (home / ".pi" / "agent" / "sessions" / "s.jsonl").write_text("x")
    lines = state.import_into(str(home), made, pi.imports)
    assert lines and Path(made, ".pi", "agent", "auth.json").exists()
    assert not Path(made, ".pi", "agent", "sessions").exists()
    assert state.reset(root, "pi") and not Path(made).exists()
    assert not state.reset(root, "pi")


def test_a_store_that_is_not_ours_refuses(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    root = state.store_root(str(tmp_path / "shared"), "/nonexistent", os.getuid())
    os.symlink("/etc", root)
    with pytest.raises(SandboxError) as caught:
        state.ensure_home(root, "claude", "/nonexistent", (), os.getuid(), default_root=False)
    assert "remove it" in caught.value.message
    with pytest.raises(SandboxError):
        state.ensure_home(str(tmp_path / "absent" / "1000"), "claude", "/x", (), os.getuid(),
                          default_root=False)


def test_an_import_never_writes_through_a_link_in_the_store(tmp_path: Path) -> None:
    home = _outer_home(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    store_home = tmp_path / "store-home"
    store_home.mkdir()
    (store_home / ".claude").symlink_to(victim)
    lines = state.import_into(str(home), str(store_home), profiles.get("claude").imports)
    assert list(victim.iterdir()) == []
    assert any("symbolic link" in line for line in lines)


def test_a_name_another_user_holds_in_a_shared_state_dir_moves_the_store_home(
        tmp_path: Path) -> None:
    """Whoever holds it, root (uid 0) included: only the user's own directory is theirs."""
    if os.getuid() != 0:
        pytest.skip("needs root to make a directory another user owns")
    shared = tmp_path / "shared"
    shared.mkdir()
    for owner in (0, 65534):
        squat = shared / "1001"
        squat.mkdir()
        os.chown(squat, owner, owner)
        assert state.store_root(str(shared), "/home/u", 1001) == \
            "/home/u/.local/state/claude-sandbox"
        assert state.squatted_store(str(squat), 1001) == owner
        squat.rmdir()
    assert state.store_root(str(shared), "/home/u", 1001) == str(shared / "1001")


def test_the_plan_binds_the_store_the_launch_chose(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts take the store the launch chose once, never choosing again: with a
    shared state-dir, a squat made or removed in between would otherwise part the store
    the plan binds from the one the launch makes and checks."""
    from claude_sandbox.launch import decide
    from claude_sandbox.launch.configure.request import Request
    from claude_sandbox.launch.facts import gather

    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    environ = {"PATH": "/usr/bin:/bin", "TERM": "xterm"}
    configured = decide.configure("claude", environ)
    chosen = str(tmp_path / "chosen-store")
    gathered = gather.gather(configured.profile, configured.cfg,
                             Request(agent="claude", command=None, args=()), environ, (), chosen)
    assert gathered.facts.store_home == state.agent_home(chosen, "claude")
    # The workspace's rules take it too: a workspace holding it is refused by its name.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SandboxError, match="chosen-store"):
        gather.gather(configured.profile, configured.cfg,
                      Request(agent="claude", command=None, args=()), environ, (), chosen)


@pytest.mark.parametrize(("mode", "owner", "refused"), [
    (0o1777, 0, None), (0o700, None, None), (0o755, 0, None),
    (0o777, 0, "lets others change"), (0o775, 0, "lets others change"),
    (0o755, 65534, "lets others change"), (None, None, "does not exist")])
def test_a_state_dir_others_may_change_is_refused(tmp_path: Path, mode: int | None,
                                                   owner: int | None,
                                                   refused: str | None) -> None:
    """Where others may write the state-dir without the sticky bit, or another user owns
    it, another user could put a store of theirs at this user's name after the launch
    checked it: refused, with the fix (EXIT_CONFIG)."""
    from claude_sandbox.core.errors import EXIT_CONFIG

    state_dir = tmp_path / "state"
    uid = 4242  # the launching user: not root, not the other owner
    if mode is not None:
        state_dir.mkdir()
        state_dir.chmod(mode)
        os.chown(state_dir, uid if owner is None else owner, 0)
    if refused is None:
        state.check_state_dir(str(state_dir), uid)
        return
    with pytest.raises(SandboxError, match=refused) as caught:
        state.check_state_dir(str(state_dir), uid)
    assert caught.value.status == EXIT_CONFIG
