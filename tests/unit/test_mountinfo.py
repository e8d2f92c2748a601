"""/proc/self/mountinfo as the kernel writes it, and the readers built on it (pure)."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core import guard, mountinfo, paths
from claude_sandbox.launch.facts import hostfacts

STATUS_IN = "Name:\tsh\nNoNewPrivs:\t1\nCapEff:\t0000000000000000\n"


def kernel_escape(path: str) -> str:
    """What fs/proc_namespace.c does to a path field: only these four are escaped."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in path)


def line(number: int, root: str, point: str, options: str, source: str = "/dev/vda") -> str:
    return (f"{number} 1 254:{number} {kernel_escape(root)} {kernel_escape(point)} {options} "
            f"master:1 - ext4 {source} rw\n")


# Any character a path may hold (not NUL, not a lone surrogate from a UTF-8 decode),
# the white space and line breaks str.split()/splitlines() would cut on included.
PATH_CHARS = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)) | \
    st.sampled_from(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\\")
PATHS = st.text(PATH_CHARS, min_size=1, max_size=20).map(lambda tail: "/" + tail)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(PATHS, PATHS, st.booleans()), min_size=1, max_size=5))
def test_every_mount_point_reads_back_exactly(table: list[tuple[str, str, bool]]) -> None:
    text = "".join(line(n, root, point, "ro,nosuid" if ro else "rw,nodev")
                   for n, (root, point, ro) in enumerate(table))
    assert mountinfo.parse(text) == tuple(
        mountinfo.Mount(f"254:{n}", root, point, ro, "ext4")
        for n, (root, point, ro) in enumerate(table)
    )


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_without_error(text: str) -> None:
    for mount in mountinfo.parse(text):
        assert isinstance(mount.mountpoint, str) and isinstance(mount.readonly, bool)


def test_a_read_write_mount_with_a_line_break_in_its_name_is_not_lost() -> None:
    # str.splitlines() would have cut this record in two, the read-write mount gone
    # from the harsh plan's writable set and a made-up mount at /dev/vda in its place.
    text = line(1, "/", "/", "ro") + line(2, "/src", "/work/a\x85b\u2028c", "rw")
    mounts = mountinfo.parse(text)
    assert [(m.mountpoint, m.readonly) for m in mounts] == [("/", True),
                                                           ("/work/a\x85b\u2028c", False)]


def test_a_backslash_escape_is_only_three_octal_digits() -> None:
    assert mountinfo.unescape(r"/a\040b") == "/a b"
    assert mountinfo.unescape(r"/a\134040") == "/a\\040"  # an escaped backslash, then text
    assert mountinfo.unescape("/a\\989") == "/a\\989"  # not octal: as written
    assert mountinfo.unescape("/a\\04") == "/a\\04"  # too short: as written


def test_the_guard_cannot_be_shown_a_marker_mount_a_name_made_up() -> None:
    # Everything after the line break is raw text the kernel wrote for one mount:
    # read with splitlines(), its fifth word was the marker's path.
    forged = (f"22 1 0:21 / / ro,relatime - overlay overlay rw\n"
              f"50 22 0:30 / /tmp/x\u2028a rw - tmpfs {paths.INSIDE_MARKER} rw\n")
    assert not guard.facts_say_inside(forged, STATUS_IN)
    real = forged + line(51, "/null", paths.INSIDE_MARKER, "ro,nosuid")
    assert guard.facts_say_inside(real, STATUS_IN)


def test_proc_is_mountable_only_without_submounts() -> None:
    base = line(1, "/", "/", "ro") + line(2, "/", "/proc", "rw")
    assert hostfacts.proc_mountable(base)
    assert hostfacts.proc_mountable(base + line(3, "/", "/proc/sys/fs/binfmt_misc", "rw"))
    assert not hostfacts.proc_mountable(base + line(3, "/", "/proc/sys", "ro"))


def test_reading_the_file_keeps_a_carriage_return_and_bytes_that_are_not_utf8(
        tmp_path: Path) -> None:
    # Text mode would turn the raw \r into "\n" before parse() saw it: the record
    # below would come apart, and its tail read as a mount at the marker's path.
    forged = f"50 22 0:30 / /tmp/x\ry rw - fuse {paths.INSIDE_MARKER} rw\n"
    path = tmp_path / "mountinfo"
    not_utf8 = b"51 1 0:31 / /n\xff rw - x y rw\n"
    path.write_bytes((line(1, "/", "/", "ro") + forged).encode() + not_utf8)
    text = mountinfo.read(str(path))
    assert [m.mountpoint for m in mountinfo.parse(text)] == ["/", "/tmp/x\ry", "/n\udcff"]
    assert os.fsencode(mountinfo.parse(text)[-1].mountpoint) == b"/n\xff"  # same bytes for open()
    assert not guard.facts_say_inside(text, STATUS_IN)
    with open(path, encoding="utf-8", errors="surrogateescape") as translated:
        assert guard.facts_say_inside(translated.read(), STATUS_IN)  # what text mode did
