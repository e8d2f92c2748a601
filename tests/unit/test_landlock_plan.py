"""The pure half of the Landlock layer: which subtrees may EXECUTE under harsh."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from claude_sandbox.core.mountinfo import parse as parse_mountinfo
from claude_sandbox.inside import landlock
from claude_sandbox.inside.landlock import exec_allowed_roots, plan_exec

TREE: dict[str, list[str]] = {
    "/": ["bin", "dev", "etc", "home", "lib", "tmp", "usr", "var", "vmlinuz"],
    "/home": ["alice", "bob"],
    "/home/alice": ["proj", ".config", ".local"],
    "/home/alice/.local": ["bin", "share"],
    "/var": ["lib", "tmp", "cache"],
    "/var/tmp": ["claude-agent", "other"],
    "/usr": ["bin", "lib", "local"],
}


def lister(path: str) -> Iterable[str]:
    if path not in TREE:
        raise NotADirectoryError(path)
    return TREE[path]


def covers(roots: tuple[str, ...], path: str) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def test_cover_is_complement_of_writable() -> None:
    writable = ["/tmp", "/home/alice/proj", "/var/tmp/claude-agent", "/dev"]
    roots = exec_allowed_roots(writable, lister)
    assert roots == (
        "/bin", "/etc", "/home/alice/.config", "/home/alice/.local", "/home/bob",
        "/lib", "/usr", "/var/cache", "/var/lib", "/var/tmp/other", "/vmlinuz",
    )  # fmt: skip
    for w in writable:
        assert not covers(roots, w)
        assert not covers(roots, w + "/payload")
    for ok in ("/usr/bin/git", "/home/bob/x", "/var/lib/dpkg", "/vmlinuz"):
        assert covers(roots, ok)


def test_writable_root_means_no_exec_anywhere() -> None:
    assert exec_allowed_roots(["/"], lister) == ()


def test_nothing_writable_grants_slash() -> None:
    assert exec_allowed_roots([], lister) == ("/",)


def test_paths_are_normalised_and_prefixes_are_not_confused() -> None:
    # /home/alice/proj must not make /home/alice/projector writable, nor the reverse.
    tree = {"/": ["home"], "/home": ["alice"], "/home/alice": ["proj", "projector"]}
    roots = exec_allowed_roots(["/home/alice/proj/"], tree.__getitem__)
    assert roots == ("/home/alice/projector",)


def test_unlistable_ancestor_fails_closed() -> None:
    def deny(path: str) -> list[str]:
        if path == "/home":
            raise PermissionError(path)
        return lister(path)  # type: ignore[return-value]

    roots = exec_allowed_roots(["/home/alice/proj"], deny)
    assert not any(r.startswith("/home") for r in roots)


def test_top_limits_the_walk() -> None:
    roots = exec_allowed_roots(["/home/alice/.local/share"], lister, top="/home/alice/.local")
    assert roots == ("/home/alice/.local/bin",)


MOUNTINFO = r"""66 42 254:0 / / ro,nosuid,nodev,relatime - ext4 /dev/vda rw
68 66 0:21 / /proc ro,nosuid,nodev,relatime - proc proc rw
81 66 0:6 / /dev ro,nosuid,nodev,relatime - devtmpfs devtmpfs rw
82 81 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw
86 81 0:41 / /dev rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755
87 86 0:6 /null /dev/null rw,nosuid,relatime - devtmpfs devtmpfs rw
95 66 0:43 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755
97 66 0:44 / /home/alice rw,nosuid,nodev,relatime - tmpfs tmpfs rw
98 97 254:0 /home/alice/proj /home/alice/proj rw,nosuid,nodev - ext4 /dev/vda rw
99 97 254:0 /usr/libexec/agents/bin/codex /home/alice/.local/bin/codex ro,nosuid - ext4 /dev/vda rw
100 97 254:0 /home/alice/my\040dir /home/alice/my\040dir ro,nosuid - ext4 /dev/vda rw
"""


def test_parse_mountinfo_unescapes_and_reads_ro() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    first = mounts[0]
    assert (first.dev, first.root, first.mountpoint, first.readonly) == ("254:0", "/", "/", True)
    assert mounts[-1].mountpoint == "/home/alice/my dir"
    assert [m.mountpoint for m in mounts if not m.readonly] == [
        "/dev/shm", "/dev", "/dev/null", "/tmp", "/home/alice", "/home/alice/proj",
    ]  # fmt: skip


def test_visible_mounts_drop_the_covered_stack() -> None:
    visible = landlock.visible_mounts(parse_mountinfo(MOUNTINFO))
    points = [m.mountpoint for m in visible]
    assert "/dev/shm" not in points  # host /dev/shm lies under bwrap's /dev tmpfs
    assert points.count("/dev") == 1


def test_plan_exec_grants_ro_binds_inside_writable_trees() -> None:
    tree = {
        "/": ["bin", "dev", "home", "proc", "tmp", "usr"],
        "/home": ["alice", "bob"],
    }
    plan = plan_exec(
        parse_mountinfo(MOUNTINFO), (), ("/home/alice/.local/bin/codex",), tree.__getitem__
    )
    assert plan.roots == (
        "/bin", "/home/bob", "/proc", "/usr",
        "/home/alice/.local/bin/codex", "/home/alice/my dir",
    )  # fmt: skip
    assert plan.refused == ()


def test_plan_exec_refuses_a_grant_writable_through_another_bind() -> None:
    # The workspace is bound read-write at /work from /srv/proj, and /srv is
    # read-only through the root mount: a grant on /srv would reach /work's
    # files, because Landlock rules belong to inodes, not to paths.
    info = (
        "1 0 254:0 / / ro - ext4 /dev/vda rw\n"
        "2 1 254:0 /srv /work rw - ext4 /dev/vda rw\n"
        "3 1 0:40 / /tmp rw - tmpfs tmpfs rw\n"
    )
    tree = {"/": ["srv", "tmp", "usr", "work"]}
    plan = plan_exec(parse_mountinfo(info), (), (), tree.__getitem__)
    assert plan.refused == ("/srv",)
    assert plan.roots == ("/usr",)


@pytest.mark.parametrize("level", ["standard", "harsh"])
def test_describe_reports_missing_abi_loudly(level: str) -> None:
    old = "\n".join(landlock.describe(level, abi=3))
    assert "NOT ENFORCED" in old
    none = "\n".join(landlock.describe(level, abi=0))
    assert "not available" in none
    if level == "harsh":
        assert "REFUSED" in none
    assert "scoped" in "\n".join(landlock.describe(level, abi=7))
