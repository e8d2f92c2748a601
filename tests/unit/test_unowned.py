"""core/unowned.py's pure parts: which trees a root launch shows through views, where
each is attached, and the plan's read-only binds taken from them (ADR 0020)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from claude_sandbox.core import unowned
from claude_sandbox.core.unowned import STAGING, Views
from claude_sandbox.launch import making
from claude_sandbox.launch.planner.mounts import Mount

ROOTS = ("/etc", "/opt", "/root/.rustup", "/usr")
VIEWS = Views(ROOTS)


def _mountinfo(*points: str) -> str:
    return "".join(f"{n} 1 0:{n} / {point} rw - ext4 /dev/x rw\n"
                   for n, point in enumerate(("/", *points), start=20))


def test_a_tree_with_a_mount_below_it_is_left_to_the_walk() -> None:
    text = _mountinfo("/etc/hosts", "/opt", "/run/secrets", "/usr/local/x", "/usrx")
    viewed, walked = unowned.split(ROOTS, ["/run"], text)
    # /opt is itself a mount (its root is no mount below it); /usrx is beside /usr
    assert viewed == ["/opt", "/root/.rustup"]
    assert walked == ["/etc", "/usr"]


def test_a_mount_in_the_sandboxs_own_places_does_not_count() -> None:
    viewed, walked = unowned.split(["/var"], ["/var/tmp", "/var/run"],
                                   _mountinfo("/var/tmp/x", "/var/run"))
    assert (viewed, walked) == (["/var"], [])


def test_staged_is_by_whole_components() -> None:
    assert unowned.staged("/usr/lib/x", VIEWS) == f"{STAGING}/3/lib/x"
    assert unowned.staged("/usr", VIEWS) == f"{STAGING}/3"
    assert unowned.staged("/usrx/lib", VIEWS) is None
    assert unowned.staged("/root/.rustupx", VIEWS) is None
    assert unowned.staged("/home/me", VIEWS) is None


def test_a_bind_from_the_sandboxs_own_place_in_a_viewed_tree_keeps_its_source() -> None:
    views = Views(("/var", "/opt"), own=("/var/tmp", "/opt/project"))
    mounts = (Mount("ro-bind", "/var/tmp/ws/.envrc", "held", "/var/tmp/ws/.envrc"),
              Mount("ro-bind", "/opt/project/.vscode", "held", "/opt/project/.vscode"),
              Mount("ro-bind", "/var/lib/x", "shown", "/var/lib/x"))
    assert [m.source for m in making.through_views(mounts, views)] == [
        "/var/tmp/ws/.envrc", "/opt/project/.vscode", f"{STAGING}/0/lib/x"]


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
    fields, fds = unowned.request(views, [7] * len(roots))
    assert fields[0] == "views" and list(fds) == [7] * len(roots)
    assert unowned.from_request(fields[1:]) == views
