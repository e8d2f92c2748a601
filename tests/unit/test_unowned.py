"""core/unowned.py's pure parts: which trees a root launch shows through views, where
each is attached, and the plan's read-only binds taken from them (ADR 0020)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claude_sandbox.core import unowned, viewplaces
from claude_sandbox.core.viewplaces import STAGING, Views
from claude_sandbox.launch import making
from claude_sandbox.launch.facts.rootonly import Walk
from claude_sandbox.launch.planner.mounts import Mount

ROOTS = ("/etc", "/opt", "/root/.rustup", "/usr")
VIEWS = Views(ROOTS)


def _mountinfo(*points: str) -> str:
    return "".join(f"{n} 1 0:{n} / {point} rw - ext4 /dev/x rw\n"
                   for n, point in enumerate(("/", *points), start=20))


def test_a_tree_with_a_mount_below_it_is_left_to_the_walk() -> None:
    text = _mountinfo("/etc/hosts", "/opt", "/run/secrets", "/usr/local/x", "/usrx",
                      "/var/tmp/fuse")
    viewed, walked = viewplaces.split((*ROOTS, "/var"), text)
    # /opt is itself a mount (its root is no mount below it); /usrx is beside /usr; a mount
    # in the sandbox's own /var/tmp counts too: overlayfs refuses the layer all the same
    assert viewed == ["/opt", "/root/.rustup"]
    assert walked == ["/etc", "/usr", "/var"]


def test_the_mounters_id_is_no_user_and_no_group() -> None:
    passwd = "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n" \
             "odd:x:65533:65533::/:/bin/false\n"
    group = "root:x:0:\nnogroup:x:65534:\nx:x:65532:\n"
    assert unowned.unused_id(passwd, group) == 65531
    assert unowned.unused_id("", "") == unowned.FIRST_ID
    assert unowned.unused_id("bad line\nx:y:z:w\n", "") == unowned.FIRST_ID


def _walk(**places: tuple[str, ...]) -> Walk:
    return Walk("/root/.local/state/claude-sandbox/root-only-10", places.get("skip", ()),
                places.get("roots", ()), (), places.get("bound", ()), places.get("shown", ()))


def test_a_tree_in_the_sandboxs_own_place_is_neither_viewed_nor_walked() -> None:
    """~/.config/gh, under the home: its 0600 files are the agent's to read, as before."""
    walk = _walk(roots=("/csbx-none/usr", "/csbx-none/root/.config/gh",
                        "/csbx-none/root/.rustup"),
                 shown=("/csbx-none/root",), bound=("/csbx-none/root/.rustup",))
    viewed, walked = making.ask_views(walk, None)
    assert viewed == ["/csbx-none/usr", "/csbx-none/root/.rustup"] and walked == []


def test_a_tree_a_session_writes_from_is_walked() -> None:
    """A git directory outside the workspace, shown writable through the session's overlay
    from the real one: its tree stays the walk's, which covers what root keeps there."""
    walk = _walk(roots=("/csbx-none/opt", "/csbx-none/usr"),
                 shown=("/csbx-none/opt/project",))
    viewed, walked = making.ask_views(walk, None, ["/csbx-none/opt/gits/x.git",
                                                   "/csbx-none/opt/project"])
    assert viewed == ["/csbx-none/usr"] and walked == ["/csbx-none/opt"]
    viewed, walked = making.ask_views(walk, None, ["/csbx-none/opt/project"])
    assert viewed == ["/csbx-none/opt", "/csbx-none/usr"] and walked == []


def test_staged_is_by_whole_components() -> None:
    assert viewplaces.staged("/usr/lib/x", VIEWS) == f"{STAGING}/3/lib/x"
    assert viewplaces.staged("/usr", VIEWS) == f"{STAGING}/3"
    assert viewplaces.staged("/usrx/lib", VIEWS) is None
    assert viewplaces.staged("/root/.rustupx", VIEWS) is None
    assert viewplaces.staged("/home/me", VIEWS) is None


def test_a_bind_from_the_sandboxs_own_place_in_a_viewed_tree_keeps_its_source() -> None:
    """But for a tree shown whatever lies around it (an allow-read in the workspace)."""
    views = Views(("/var", "/opt"), own=("/var/tmp", "/opt/project"),
                  bound=("/opt/project/data",))
    mounts = (Mount("ro-bind", "/var/tmp/ws/.envrc", "held", "/var/tmp/ws/.envrc"),
              Mount("ro-bind", "/opt/project/.vscode", "held", "/opt/project/.vscode"),
              Mount("ro-bind", "/opt/project/data", "allow-read", "/opt/project/data"),
              Mount("ro-bind", "/var/lib/x", "shown", "/var/lib/x"))
    assert [m.source for m in making.through_views(mounts, views)] == [
        "/var/tmp/ws/.envrc", "/opt/project/.vscode", f"{STAGING}/1/project/data",
        f"{STAGING}/0/lib/x"]


def test_only_read_only_binds_from_a_viewed_tree_are_taken_from_a_view() -> None:
    mounts = (
        Mount("ro-bind", "/usr", "a system tree", "/usr"),
        Mount("ro-bind", "/root/.netrc", "reads as empty", "/usr/libexec/claude-sandbox/empty"),
        Mount("ro-bind-try", "/opt/tool", "a tool", "/opt/tool"),
        Mount("bind", "/opt/project", "the workspace", "/opt/project"),
        Mount("ro-bind", "/home/me/.gitconfig", "elsewhere", "/home/me/.gitconfig"),
        Mount("tmpfs", "/tmp", "scratch"),
    )
    sources = [m.source for m in making.through_views(mounts, VIEWS)]
    assert sources == [f"{STAGING}/3", f"{STAGING}/3/libexec/claude-sandbox/empty",
                       f"{STAGING}/1/tool", "/opt/project", "/home/me/.gitconfig", ""]


@given(st.lists(st.text(alphabet="ab/:,\\ \n", min_size=1, max_size=12), max_size=5))
def test_the_holders_request_carries_the_views_back_whole(roots: list[str]) -> None:
    views = Views(tuple("/" + root for root in roots))
    fields, fds = viewplaces.request(views, [7] * len(roots))
    assert fields[0] == "views" and list(fds) == [7] * len(roots)
    assert viewplaces.from_request(fields[1:]) == views


@pytest.mark.parametrize("said", [["u", "0"], ["u", "65534"], ["u", "١٢"], ["u", "-1"],
                                  ["u", str(unowned.FIRST_ID - unowned.ID_RANGE)],
                                  ["u"], ["err", "no id is free for the views' mounter"]])
def test_the_launcher_maps_no_id_outside_the_mounters_range(said: list[str]) -> None:
    """The mounter names the id it found; the launcher writes a map only for an id of
    the range unused_id looks in (0 would map root to root, and its views would show
    root's files unguarded), and otherwise stops it, and says why."""
    import _socket

    from claude_sandbox.core import wire

    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        wire.send(theirs, said)
        mounter = unowned.Mounter(0, ours)  # no process: a map written would fail anyway
        why = mounter.ready()
        assert why is not None and mounter.sock is None
        assert mounter.answer(1) == why
        if said[-1].startswith("no id"):
            assert why == said[-1]
    finally:
        theirs.close()
