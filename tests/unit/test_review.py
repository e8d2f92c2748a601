"""Review mode's parts: the key, the plan's overlays, the listing and the applier.

The listing and the applier work on real directories: an upper directory made by
hand with overlayfs's marks (a whiteout is a character device 0:0, which only
root may make outside overlayfs; an opaque directory carries user.overlay.opaque).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
import zlib
from collections.abc import Iterator

import pytest

from claude_sandbox.core.errors import SandboxError
from claude_sandbox.launch.configure import config
from claude_sandbox.launch.configure.config import Config
from claude_sandbox.launch.overlay import gitcheck, review, reviewapply

from .test_plan import build

AGENTS = ("claude", "codex", "pi")
CONTROL = frozenset({".claude", ".vscode", ".mcp.json"})


def parse(text: str, environ: dict[str, str] | None = None) -> Config:
    return config.parse(text, environ or {}, agent="claude", agents=AGENTS, path="/etc/c")


def test_the_key_is_per_agent_and_the_environment_only_narrows() -> None:
    assert parse("").workspace_mode == "live"
    assert parse("workspace-mode = review").workspace_mode == "review"
    assert parse("workspace-mode.codex = review").workspace_mode == "live"
    assert parse("", {"CLAUDE_SANDBOX_WORKSPACE_MODE": "review"}).workspace_mode == "review"
    with pytest.raises(SandboxError) as caught:
        parse("workspace-mode = review", {"CLAUDE_SANDBOX_WORKSPACE_MODE": "live"})
    assert caught.value.status == 78 and "$CLAUDE_SANDBOX_WORKSPACE_MODE" in caught.value.message
    with pytest.raises(SandboxError) as caught:
        parse("workspace-mode = staged")
    assert "/etc/c:1" in caught.value.message


def test_review_mode_overlays_the_workspace_and_nothing_inside_it() -> None:
    live = build(repo=True)
    assert [v.kind for v in live.views] == ["git", "control"]
    made = build(repo=True, cfg=Config(egress_jail=False, workspace_mode="review"))
    assert [(v.kind, v.target) for v in made.views] == [("workspace", "/work/project")]
    # The read-only control binds the overlay makes needless are gone: .mcp.json works.
    assert not [m for m in made.mounts if m.dest == "/work/project/.mcp.json"]
    assert [m for m in live.mounts if m.dest == "/work/project/.mcp.json"]


@pytest.fixture
def store() -> Iterator[tuple[str, str, str]]:
    """(review directory, its upper, the real workspace), in /var/tmp (user xattrs)."""
    top = tempfile.mkdtemp(prefix="csbx-review-unit-", dir="/var/tmp")
    directory, workspace = os.path.join(top, "review"), os.path.join(top, "ws")
    os.makedirs(os.path.join(directory, "upper"))
    os.makedirs(workspace)
    yield directory, os.path.join(directory, "upper"), workspace
    import shutil

    shutil.rmtree(top, ignore_errors=True)


def _write(path: str, text: str = "x\n", mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, mode)


def _whiteout(path: str) -> None:
    if os.getuid() != 0:
        pytest.skip("a whiteout outside overlayfs needs root (mknod)")
    os.mknod(path, stat.S_IFCHR | 0o600, 0)


def test_changes_are_classed_and_the_flagged_come_first(store: tuple[str, str, str]) -> None:
    _, upper, ws = store
    _write(os.path.join(ws, "old.txt"))
    _write(os.path.join(ws, "gone.txt"))
    _write(os.path.join(upper, "old.txt"), "y\n")
    _whiteout(os.path.join(upper, "gone.txt"))
    _write(os.path.join(upper, "src/new.py"))
    _write(os.path.join(upper, "tool.sh"), mode=0o755)
    _write(os.path.join(upper, ".claude/settings.json"))
    _write(os.path.join(upper, "pkg/__pycache__/m.cpython-311.pyc"))
    _write(os.path.join(upper, ".venv/lib/site.pth"))
    os.symlink("/etc/passwd", os.path.join(upper, "out"))
    os.symlink("src/new.py", os.path.join(upper, "in"))
    os.mkfifo(os.path.join(upper, "ff"))
    os.makedirs(os.path.join(upper, ".git/objects"))
    _write(os.path.join(upper, "sub/.git"), "gitdir: /elsewhere/.git\n")
    got = {c.path: c for c in review.changes(upper, ws, CONTROL)}
    assert got["old.txt"].what == "changed" and got["old.txt"].klass == ""
    assert got["gone.txt"].what == "deleted"
    assert got["src/new.py"].what == "added"
    assert got["tool.sh"].klass == "executable"
    assert got[".claude/settings.json"].klass == "control"
    assert got["pkg/__pycache__/m.cpython-311.pyc"].klass == "bytecode"
    assert got[".venv/lib/site.pth"].klass == "python-startup"
    assert got["out"].klass == "link-out" and got["in"].klass == ""
    assert got["ff"].refused and got["ff"].klass == "special"
    assert got[".git"].what == "repository"
    assert "outside the workspace" in got["sub/.git"].refused
    order = [c.path for c in review.changes(upper, ws, CONTROL)]
    assert order.index("ff") < order.index("out") < order.index(".git") < order.index("old.txt")
    assert review.count_pending(upper, ws) == len(order)


def test_apply_never_writes_through_a_link_in_the_workspace(
        store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    victim = tempfile.mkdtemp(prefix="csbx-victim-", dir="/var/tmp")
    try:
        os.symlink(victim, os.path.join(ws, "dir"))
        _write(os.path.join(upper, "dir/planted"))
        chosen = review.changes(upper, ws, CONTROL)
        lines, complete = reviewapply.apply(directory, ws, chosen,
                                            gitcheck.Quarantine(directory), force=True)
        assert not complete and "not a directory" in lines[0]
        assert os.listdir(victim) == []
        assert os.path.exists(os.path.join(upper, "dir/planted"))  # still pending
    finally:
        os.rmdir(victim)


def test_apply_keeps_mode_bits_but_never_set_id_and_removes_what_it_applied(
        store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _write(os.path.join(upper, "a/b/tool"), "#!/bin/sh\n", 0o6755)
    _write(os.path.join(ws, "old"))
    _whiteout(os.path.join(upper, "old"))
    lines, complete = reviewapply.apply(directory, ws, review.changes(upper, ws, CONTROL),
                                        gitcheck.Quarantine(directory), force=True)
    assert complete, lines
    assert stat.S_IMODE(os.stat(os.path.join(ws, "a/b/tool")).st_mode) == 0o755
    assert not os.path.exists(os.path.join(ws, "old"))
    assert os.listdir(upper) == []  # nothing waits, no empty directory left


def test_a_replaced_directory_loses_what_the_new_one_lacks(
        store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _write(os.path.join(ws, "d/stale"))
    _write(os.path.join(ws, "d/kept"))
    _write(os.path.join(upper, "d/kept"), "new\n")
    os.setxattr(os.path.join(upper, "d"), "user.overlay.opaque", b"y")
    chosen = review.changes(upper, ws, CONTROL)
    assert {c.path: c.what for c in chosen} == {"d": "replaced", "d/kept": "changed"}
    lines, complete = reviewapply.apply(directory, ws, chosen, gitcheck.Quarantine(directory),
                                        force=True)
    assert complete, lines
    assert os.listdir(os.path.join(ws, "d")) == ["kept"]
    assert os.listdir(upper) == []


def test_discard_drops_a_path_and_what_is_under_it(store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _write(os.path.join(upper, "x/y/z"))
    _write(os.path.join(upper, "keep"))
    reviewapply.discard(directory, ["x"], ws)
    assert os.listdir(upper) == ["keep"]
    assert reviewapply.discard(directory, ["nope"], ws) == ["nothing waits at nope"]


def test_the_lock_refuses_a_second_holder(store: tuple[str, str, str]) -> None:
    directory, _, ws = store
    pending = review.open_pending(directory, ws)
    try:
        import subprocess
        import sys

        # flock is per open file: another process's attempt is refused.
        code = ("import sys; from claude_sandbox.launch.overlay import review\n"
                "try:\n review.lock(sys.argv[1], 'w')\nexcept Exception as e:\n"
                " print(type(e).__name__, e.status)")
        out = subprocess.run([sys.executable, "-c", code, directory], capture_output=True,
                             text=True, check=True).stdout
        assert out.strip() == "SandboxError 77"
    finally:
        os.close(pending.lock)


def _apply_all(directory: str, upper: str, ws: str) -> tuple[list[str], bool]:
    return reviewapply.apply(directory, ws, review.changes(upper, ws, CONTROL),
                             gitcheck.Quarantine(directory), force=True)


def _git(*argv: str, cwd: str) -> None:
    import subprocess

    subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@x", *argv], cwd=cwd,
                   check=True, capture_output=True)


def test_a_path_not_noted_at_a_session_end_needs_force(store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _write(os.path.join(ws, "a"), "mine\n")
    _write(os.path.join(upper, "a"), "agent\n")
    lines, complete = reviewapply.apply(directory, ws, review.changes(upper, ws, CONTROL),
                                        gitcheck.Quarantine(directory))
    assert not complete and "interrupted session" in lines[0]
    review.note_seen(directory, upper, ws, since_ns=time.time_ns() + 10**12)
    lines, complete = reviewapply.apply(directory, ws, review.changes(upper, ws, CONTROL),
                                        gitcheck.Quarantine(directory))
    assert complete, lines
    with open(os.path.join(ws, "a")) as handle:
        assert handle.read() == "agent\n"


def test_a_user_change_while_the_session_ran_is_kept(store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    started = time.time_ns()
    _write(os.path.join(ws, "a"), "mine\n")  # the user edits it during the session
    _write(os.path.join(upper, "a"), "agent\n")
    review.note_seen(directory, upper, ws, since_ns=started)
    lines, complete = reviewapply.apply(directory, ws, review.changes(upper, ws, CONTROL),
                                        gitcheck.Quarantine(directory))
    assert not complete and "while the session ran" in lines[0]


def test_a_link_that_climbs_out_through_other_links_is_flagged(
        store: tuple[str, str, str]) -> None:
    _, upper, ws = store
    os.symlink(".", os.path.join(upper, "L1"))
    os.symlink("L1/..", os.path.join(upper, "L2"))
    os.makedirs(os.path.join(upper, "vendor/lib"))
    os.symlink("../../L2", os.path.join(upper, "vendor/lib/logs"))
    os.symlink("../inside.txt", os.path.join(upper, "vendor/ok"))
    got = {c.path: c.klass for c in review.changes(upper, ws, CONTROL)}
    assert got["L2"] == "link-out" and got["vendor/lib/logs"] == "link-out"
    assert got["L1"] == "" and got["vendor/ok"] == ""


def test_a_link_in_a_repository_applied_earlier_leads_no_write_out(
        store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    victim = tempfile.mkdtemp(prefix="csbx-victim-", dir="/var/tmp")
    try:
        # Applied earlier as plain changes: a repository's skeleton with a link for logs.
        for name in ("objects", "refs/heads"):
            os.makedirs(os.path.join(ws, "lib", name))
        os.symlink(victim, os.path.join(ws, "lib/logs"))
        _write(os.path.join(upper, "lib/HEAD"), "ref: refs/heads/main\n")
        _write(os.path.join(upper, "lib/logs/HEAD"), "planted\n")
        os.setxattr(os.path.join(upper, "lib/logs"), "user.overlay.opaque", b"y")
        assert {c.path: c.what for c in review.changes(upper, ws, CONTROL)} == {
            "lib": "repository"}
        _apply_all(directory, upper, ws)
        assert os.listdir(victim) == []
    finally:
        import shutil

        shutil.rmtree(victim)


def test_linked_git_parts_make_a_repository_whose_config_is_held(
        store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _git("init", "-q", "-b", "main", cwd=ws)
    _write(os.path.join(upper, "src/HEAD"), "ref: refs/heads/main\n")
    os.symlink("../.git/objects", os.path.join(upper, "src/objects"))
    os.symlink("../.git/refs", os.path.join(upper, "src/refs"))
    _write(os.path.join(upper, "src/config"),
           "[core]\n\tworktree = ..\n\tfsmonitor = touch /tmp/csbx-pwned\n")
    assert [c.what for c in review.changes(upper, ws, CONTROL)] == ["repository"]
    lines, _ = _apply_all(directory, upper, ws)
    with open(os.path.join(ws, "src/config")) as handle:
        assert "fsmonitor" not in handle.read(), lines


def test_an_applied_repository_shares_no_inode_with_the_upper(
        store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _git("init", "-q", "-b", "main", cwd=ws)
    _git("commit", "-q", "--allow-empty", "-m", "x", cwd=ws)
    body = b"blob 5\0blob\n"  # a real loose object: carried only when it hashes to its name
    name = hashlib.sha1(body).hexdigest()
    object_dir = os.path.join(upper, ".git/objects", name[:2])
    os.makedirs(object_dir, exist_ok=True)
    with open(os.path.join(object_dir, name[2:]), "wb") as handle:
        handle.write(zlib.compress(body))
    os.link(os.path.join(object_dir, name[2:]), os.path.join(upper, "alias"))
    chosen = [c for c in review.changes(upper, ws, CONTROL) if c.what == "repository"]
    reviewapply.apply(directory, ws, chosen, gitcheck.Quarantine(directory), force=True)
    real = os.stat(os.path.join(ws, ".git/objects", name[:2], name[2:]))
    assert real.st_ino != os.stat(os.path.join(upper, "alias")).st_ino


def test_no_review_deletes_a_git_directory(store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _git("init", "-q", cwd=os.path.join(ws))
    os.makedirs(os.path.join(ws, "libs/foo"))
    _git("init", "-q", cwd=os.path.join(ws, "libs/foo"))
    _write(os.path.join(upper, ".git"), "gitdir: .gitx\n")  # a file over the real .git
    os.makedirs(os.path.join(upper, "libs"))
    os.setxattr(os.path.join(upper, "libs"), "user.overlay.opaque", b"y")
    lines, complete = _apply_all(directory, upper, ws)
    assert not complete, lines
    assert os.path.isdir(os.path.join(ws, ".git/objects"))
    assert os.path.isdir(os.path.join(ws, "libs/foo/.git/objects"))
    os.rmdir(os.path.join(upper, "libs"))
    os.unlink(os.path.join(upper, ".git"))
    _whiteout(os.path.join(upper, "libs"))
    refused = {c.path: c.refused for c in review.changes(upper, ws, CONTROL)}
    assert "git directory" in refused["libs"]


def test_a_deep_tree_is_discarded_and_pruned(store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    deep = upper
    for _ in range(1100):  # deeper than the interpreter's recursion (os.makedirs too)
        deep = os.path.join(deep, "d")
        os.mkdir(deep)
    _write(os.path.join(deep, "f"))
    assert review.count_pending(upper, ws) == 1
    assert reviewapply.discard(directory, [""], ws) == ["discarded: everything"]
    assert os.listdir(upper) == []


def test_discard_never_follows_a_link_in_the_upper(store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    victim = tempfile.mkdtemp(prefix="csbx-victim-", dir="/var/tmp")
    try:
        _write(os.path.join(victim, "old"))
        os.symlink(victim, os.path.join(upper, "docs"))
        assert "a link on the way" in reviewapply.discard(directory, ["docs/old"], ws)[0]
        assert os.listdir(victim) == ["old"]
    finally:
        import shutil

        shutil.rmtree(victim)


def test_restore_lines_quote_what_the_agent_named(tmp_path: object) -> None:
    top = tempfile.mkdtemp(prefix="csbx-quote-", dir="/var/tmp")
    try:
        link = os.path.join(top, "x")
        os.symlink("y'; touch /tmp/csbx-pwned; : '", link)
        quarantine = gitcheck.Quarantine(top)
        quarantine.take(link, "a test")
        import shlex

        restore = quarantine.lines[0].split("to put it back: ")[1]
        assert shlex.split(restore)[:2] == ["ln", "-s"] and len(shlex.split(restore)) == 4
    finally:
        import shutil

        shutil.rmtree(top)


def test_the_workspace_top_made_a_git_directory_is_refused(store: tuple[str, str, str]) -> None:
    _, upper, ws = store
    _write(os.path.join(upper, "HEAD"), "ref: refs/heads/main\n")
    os.makedirs(os.path.join(upper, "objects"))
    os.makedirs(os.path.join(upper, "refs"))
    _write(os.path.join(upper, "config"), "[core]\n\tpager = touch /tmp/csbx-pwned\n")
    _write(os.path.join(upper, "ordinary.txt"))
    refused = {c.path: c.refused for c in review.changes(upper, ws, CONTROL)}
    assert all(refused[name] for name in ("HEAD", "config")), refused
    assert not refused["ordinary.txt"]


@pytest.mark.parametrize("variant", ["linked-head", "file-objects"])
def test_git_directories_as_git_finds_them_are_repositories(
        store: tuple[str, str, str], variant: str) -> None:
    directory, upper, ws = store
    meta = os.path.join(upper, "meta")
    os.makedirs(meta)
    if variant == "linked-head":
        os.symlink("refs/heads/main", os.path.join(meta, "HEAD"))
        os.makedirs(os.path.join(meta, "objects"))
        os.makedirs(os.path.join(meta, "refs"))
    else:
        _write(os.path.join(meta, "HEAD"), "ref: refs/heads/main\n")
        _write(os.path.join(meta, "objects"), "", 0o755)
        _write(os.path.join(meta, "refs"), "", 0o755)
    _write(os.path.join(meta, "config"), "[core]\n\tfsmonitor = touch /tmp/csbx-pwned\n")
    _write(os.path.join(upper, "sub/.git"), "gitdir: ../meta\n")
    got = {c.path: c.what for c in review.changes(upper, ws, CONTROL)}
    assert got["meta"] == "repository", got
    _apply_all(directory, upper, ws)
    config = os.path.join(ws, "meta/config")
    if os.path.exists(config):
        with open(config) as handle:
            assert "fsmonitor" not in handle.read()


def test_a_link_that_climbs_past_a_missing_directory_is_out(
        store: tuple[str, str, str]) -> None:
    _, upper, ws = store
    os.symlink("vendor/../../.bashrc", os.path.join(upper, "NOTES.md"))
    os.symlink("node_modules/../../.ssh", os.path.join(upper, "keys"))
    got = {c.path: c.klass for c in review.changes(upper, ws, CONTROL)}
    assert got == {"NOTES.md": "link-out", "keys": "link-out"}


def test_a_git_file_through_a_link_or_a_git_link_is_refused(
        store: tuple[str, str, str]) -> None:
    _, upper, ws = store
    os.makedirs(os.path.join(upper, "d1/d2"))
    os.symlink("../..", os.path.join(upper, "d1/d2/l"))
    _write(os.path.join(upper, "sub/.git"), "gitdir: ../d1/d2/l/../other/.git\n")
    os.makedirs(os.path.join(upper, "two"))
    os.symlink("/elsewhere/.git", os.path.join(upper, "two/.git"))
    refused = {c.path: c.refused for c in review.changes(upper, ws, CONTROL)}
    assert "outside" in refused["sub/.git"] and "link" in refused["two/.git"]


def test_an_unreadable_path_is_listed_and_discard_still_works(
        store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    # Made one name at a time by descriptor: the whole path is longer than PATH_MAX.
    fd = os.open(upper, os.O_RDONLY | os.O_DIRECTORY)
    length = len(upper)
    while length < 3900:
        os.mkdir("x" * 200, dir_fd=fd)
        next_fd = os.open("x" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd, length = next_fd, length + 201
    os.close(os.open("f" * 200, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)
    _write(os.path.join(upper, "plain.txt"))
    changes = review.changes(upper, ws, CONTROL)
    assert any(c.refused and "cannot be read" in c.refused for c in changes), changes
    assert reviewapply.discard(directory, [""], ws) == ["discarded: everything"]


def test_an_edit_below_a_deleted_directory_is_a_conflict(store: tuple[str, str, str]) -> None:
    directory, upper, ws = store
    _write(os.path.join(ws, "src/pkg/a.py"), "old\n")
    _whiteout(os.path.join(upper, "src"))
    review.note_seen(directory, upper, ws, since_ns=time.time_ns() + 10**12)
    time.sleep(0.01)
    _write(os.path.join(ws, "src/pkg/a.py"), "the user's edit\n")
    lines, complete = reviewapply.apply(directory, ws, review.changes(upper, ws, CONTROL),
                                        gitcheck.Quarantine(directory))
    assert not complete and "since the session" in lines[0]
    assert os.path.exists(os.path.join(ws, "src/pkg/a.py"))


def test_a_directory_over_a_file_is_a_replacement(store: tuple[str, str, str]) -> None:
    _, upper, ws = store
    _write(os.path.join(ws, "notes.txt"), "mine\n")
    os.makedirs(os.path.join(upper, "notes.txt"))
    assert [c.what for c in review.changes(upper, ws, CONTROL)] == ["replaced"]
