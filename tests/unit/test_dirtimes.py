"""The root-only refresh's reading of directory times: every changed directory is found,
whether one process reads them or two, whatever the second one does, and whether the
compiled reader reads them or, where it cannot, the launch itself."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claude_sandbox.core import process
from claude_sandbox.core.paths import DIR_TIMES
from claude_sandbox.install import placed
from claude_sandbox.launch.facts import dirtimes, rootcache, rootonly


def _tree(top: Path, count: int) -> tuple[list[str], dict[str, int]]:
    paths = []
    for index in range(count):
        path = top / f"d{index // 100}" / f"e{index}"
        path.mkdir(parents=True)
        paths.append(str(path))
    return paths, {path: dirtimes.stamp(os.lstat(path)) for path in paths}


def _change(paths: list[str], times: dict[str, int], every: int) -> set[str]:
    """Make a file in every `every`th directory, remove a few others, name their (ns)
    times again so that even a coarse clock sees the change."""
    touched = set()
    for index, path in enumerate(paths):
        if index % every == 0:
            Path(path, "new").touch()
            modified = dirtimes.split(times[path])[1]
            os.utime(path, ns=(modified + 10**9, modified + 10**9))
            touched.add(path)
        elif index % every == 1 and index % 7 == 0:
            os.rmdir(path)
            touched.add(path)
    return touched


@pytest.mark.parametrize("count", [50, dirtimes.SPLIT_FROM + 3])
def test_every_changed_or_removed_directory_is_found(tmp_path: Path, count: int) -> None:
    paths, times = _tree(tmp_path, count)
    assert dirtimes.changed(paths, times) == set()
    touched = _change(paths, times, 37)
    assert dirtimes.changed(paths, times) == touched


def test_a_child_that_fails_leaves_its_half_to_the_parent(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    paths, times = _tree(tmp_path, dirtimes.SPLIT_FROM + 1)
    touched = _change(paths, times, 11)
    assert any(paths.index(p) % 2 for p in touched)  # the child's half has changes
    # The child cannot tie itself to the parent (so it writes nothing and exits 1).
    monkeypatch.setattr(process, "tie_to_parent", lambda parent: False)
    assert dirtimes.changed(paths, times) == touched


def test_no_fork_leaves_it_all_to_the_parent(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    paths, times = _tree(tmp_path, dirtimes.SPLIT_FROM)
    touched = _change(paths, times, 13)

    def refused() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", refused)
    assert dirtimes.changed(paths, times) == touched


def test_a_name_with_any_bytes_comes_back_from_the_child(tmp_path: Path) -> None:
    paths, times = _tree(tmp_path, dirtimes.SPLIT_FROM)
    odd = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"na\xffme\nline"))
    os.mkdir(odd)
    paths.insert(1, odd)  # the child's half
    times[odd] = -5
    assert dirtimes.changed(paths, times) == {odd}


# The compiled reader (dirtimes.c), built from this checkout as the installer builds it.
# It is run only as root's own program (dirtimes.start), so these tests run as root.
ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="the reader runs only as root's file")


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """As root, where only root could have put it (spawn.installed_program: a root-owned
    0755 directory; the temporary directories are under /tmp, which everyone may write)."""
    program = next(p for p in placed.PROGRAMS if p.target == DIR_TIMES)
    directory = (tempfile.mkdtemp(prefix="csbx-dirtimes-", dir="/usr/local/lib")
                 if os.getuid() == 0 else str(tmp_path_factory.mktemp("reader")))
    try:
        os.chmod(directory, 0o755)
        built = os.path.join(directory, "dirtimes")
        subprocess.run(["gcc", *program.flags, "-o", built, str(program.source)], check=True)
        yield built
    finally:
        shutil.rmtree(directory)


def _record(where: str, when: int) -> bytes:
    head = b""
    for time_ns in dirtimes.split(when):
        seconds, nanoseconds = divmod(time_ns, 10**9)
        head += seconds.to_bytes(8, "little", signed=True) + nanoseconds.to_bytes(4, "little")
    return head + os.fsencode(where) + b"\0"


def _stamp(changed: int, modified: int) -> int:
    """The stamp of a directory with these two times (dirtimes.stamp)."""
    return changed * (1 << 128) + modified % (1 << 128)


def _times_file(path: Path, token: str, times: dict[str, int]) -> str:
    data = b"claude-sandbox dir-times 4 " + token.encode() + b"\n" + b"".join(
        _record(where, when) for where, when in times.items())
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


def _run(reader: str, times_file: str, token: str, monkeypatch: pytest.MonkeyPatch,
         count: int) -> set[str] | None:
    monkeypatch.setattr(dirtimes, "DIR_TIMES", reader)
    reading = dirtimes.start(times_file)
    assert reading is not None
    found, refused = dirtimes.finish(reading, token, count)
    assert refused == (found is None)  # each refusal here is one the file should mend
    return found


@ROOT_ONLY
def test_the_reader_finds_what_the_python_reading_finds(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every changed or removed directory, a name of any bytes, one gone since, and
    times written before 1970 and after 2262 (past 2**63 nanoseconds), which no
    directory's status-change time can be."""
    paths, times = _tree(tmp_path / "tree", 3000)
    odd = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"na\xffme\nline"))
    os.mkdir(odd)
    times[odd] = -5
    times[str(tmp_path / "gone")] = dirtimes.stamp(os.lstat(tmp_path))
    extremes = set()
    for name, when in (("past", -(10**9) - 7), ("far", 10**19 + 3)):
        os.mkdir(tmp_path / name)
        times[str(tmp_path / name)] = _stamp(when, when)
        extremes.add(str(tmp_path / name))
    touched = _change(paths, times, 29)
    expected = dirtimes.changed(list(times), times)
    assert expected == touched | extremes | {odd, str(tmp_path / "gone")}
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    assert _run(reader, times_file, "1f0a", monkeypatch, len(times)) == expected


# Siblings whose names share a prefix: b1's subtree is not b10's, b1x's or b1.'s.
_SIBLINGS = ("b0", "b1", "b10", "b1x", "b1.", "b2", "b3", "b4", "b5", "b6", "b7", "b8")


def _nested(top: Path) -> dict[str, int]:
    """top/aI/bJ/cK, 1,205 directories in the walk's order (each before those below it):
    two threads read them, and top, every aI and every bJ have 16 or more directories
    below them, which the reader opens and reads those below relative to."""
    made = [top]
    for i in range(4):
        made.append(top / f"a{i}")
        for sibling in _SIBLINGS:
            made.append(top / f"a{i}" / sibling)
            made.extend(top / f"a{i}" / sibling / f"c{k}" for k in range(24))
    for path in made:
        path.mkdir()
    return {str(path): dirtimes.stamp(os.lstat(path)) for path in made}


@ROOT_ONLY
@pytest.mark.parametrize("order", ["walk", "reversed", "shuffled", "below /"])
def test_a_directory_read_relative_to_one_above_it_is_read_as_its_path_names_it(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """The reader reads a directory below a large one relative to it, opened without
    following a link. Whatever changed, at any depth, beside siblings whose names share
    a prefix, and whatever stands where a large one was (gone, a file, a link to a copy
    of it), it answers what the Python reading of each whole path answers; in any order
    of the records, and across the two threads' shares."""
    top = tmp_path / "top"
    times = _nested(top)
    (top / "a0" / "b1" / "c2" / "new").touch()
    (top / "a0" / "b10" / "c5" / "new").touch()
    (top / "a0" / "new").touch()
    (top / "a1" / "b5" / "c3").rmdir()
    shutil.rmtree(top / "a3" / "b0")
    # a2 is now a link to a copy of itself, its modification times copied too: each
    # whole path below it resolves through the link, to directories of other
    # status-change times, which the owner of a copy cannot set.
    shutil.copytree(top / "a2", tmp_path / "twin")
    shutil.rmtree(top / "a2")
    (top / "a2").symlink_to(tmp_path / "twin")
    # a1/b0 is a file now.
    shutil.rmtree(top / "a1" / "b0")
    (top / "a1" / "b0").touch()
    # a0/b2 is a copy renamed into its place, its modification times copied too.
    shutil.copytree(top / "a0" / "b2", tmp_path / "moved")
    shutil.rmtree(top / "a0" / "b2")
    os.rename(tmp_path / "moved", top / "a0" / "b2")
    entries = list(times.items())
    if order == "reversed":
        entries.reverse()
    elif order == "shuffled":
        random.Random(7).shuffle(entries)
    elif order == "below /":
        entries.insert(0, ("/", dirtimes.stamp(os.lstat("/"))))
    times = dict(entries)
    expected = dirtimes.changed(list(times), times)
    assert {str(top / "a0" / "b2"), str(top / "a0" / "b2" / "c7")} <= expected
    assert {str(top / "a2"), str(top / "a2" / "b1"), str(top / "a1" / "b0"),
            str(top / "a1" / "b0" / "c0"), str(top / "a1" / "b5" / "c3"),
            str(top / "a0" / "b1" / "c2"), str(top / "a0" / "b10" / "c5")} <= expected
    assert not {str(top / "a0" / "b1" / "c5"), str(top / "a0" / "b1x" / "c5"),
                str(top / "a0" / "b10" / "c2")} & expected
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    assert _run(reader, times_file, "1f0a", monkeypatch, len(times)) == expected


@ROOT_ONLY
def test_a_chain_deeper_than_the_open_directories_is_read_right(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain of 150 directories, each with more than 16 below it, with leaves at its
    foot: past 64 open ones the outermost give way, and every answer stays the one the
    whole paths give (a change at the foot, one halfway, one leaf gone)."""
    chain = [tmp_path / "chain"]
    for depth in range(1, 150):
        chain.append(chain[-1] / f"d{depth}")
    chain[-1].mkdir(parents=True)
    leaves = [chain[-1] / f"leaf{k}" for k in range(20)]
    for leaf in leaves:
        leaf.mkdir()
    made = [*chain, *leaves]
    times = {str(path): dirtimes.stamp(os.lstat(path)) for path in made}
    (leaves[3] / "new").touch()
    (chain[75] / "new").touch()
    leaves[9].rmdir()
    expected = dirtimes.changed(list(times), times)
    assert expected == {str(leaves[3]), str(chain[75]), str(leaves[9]), str(chain[-1])}
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    assert _run(reader, times_file, "1f0a", monkeypatch, len(times)) == expected


@ROOT_ONLY
def test_either_time_that_differs_reads_as_changed(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory whose status-change time is the one kept but whose modification time
    is not (a file system whose status-change time is fixed), and the other way round:
    changed, to both readings; both times the ones kept: unchanged."""
    for name in ("both", "changed", "modified"):
        (tmp_path / name).mkdir()
    info = {name: os.lstat(tmp_path / name) for name in ("both", "changed", "modified")}
    times = {str(tmp_path / "both"): dirtimes.stamp(info["both"]),
             str(tmp_path / "changed"): _stamp(info["changed"].st_ctime_ns + 1,
                                               info["changed"].st_mtime_ns),
             str(tmp_path / "modified"): _stamp(info["modified"].st_ctime_ns,
                                                info["modified"].st_mtime_ns - 1)}
    expected = {str(tmp_path / "changed"), str(tmp_path / "modified")}
    assert dirtimes.changed(list(times), times) == expected
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    assert _run(reader, times_file, "1f0a", monkeypatch, len(times)) == expected


def _as_owner(directory: Path, act: Callable[[int], None]) -> None:
    """`act` on a descriptor of `directory`, in a child that is its owner (nobody) and no
    longer root: what another user may do to a directory of theirs."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                act(fd)
                status = 0
            finally:
                os._exit(status)
        assert os.waitpid(pid, 0)[1] == 0
    finally:
        os.close(fd)


@ROOT_ONLY
def test_a_directory_whose_owner_sets_its_time_back_is_still_read_again(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user who owns a directory in a shown tree sets its modification time back
    once root has made a file there: the directory is still found changed (its
    status-change time), by the reader and by the Python reading alike."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, 65534, 65534)
    times = {str(shared): dirtimes.stamp(os.lstat(shared))}
    before = os.lstat(shared).st_mtime_ns
    (shared / "root.key").touch(mode=0o600)
    _as_owner(shared, lambda fd: os.utime(fd, ns=(before, before)))
    assert os.lstat(shared).st_mtime_ns == before
    assert dirtimes.changed(list(times), times) == {str(shared)}
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    assert _run(reader, times_file, "1f0a", monkeypatch, len(times)) == {str(shared)}


@ROOT_ONLY
def test_the_reader_answers_for_its_own_cache_only(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another token, or fewer directories read than the cache holds: not taken."""
    _, times = _tree(tmp_path / "tree", 20)
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    assert _run(reader, times_file, "1f0a", monkeypatch, 20) == set()
    assert _run(reader, times_file, "1f0b", monkeypatch, 20) is None
    assert _run(reader, times_file, "1f0a", monkeypatch, 21) is None


@ROOT_ONLY
@pytest.mark.parametrize("spoil", ["group-writable", "other-writable", "link", "fifo",
                                   "no header", "relative path", "cut short", "empty",
                                   "nanoseconds", "another owner"])
def test_a_times_file_it_would_not_have_written_is_refused(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch, spoil: str) -> None:
    """Refused (the caller then reads the times itself), never waited on or followed."""
    _, times = _tree(tmp_path / "tree", 20)
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    data = Path(times_file).read_bytes()
    if spoil == "group-writable":
        os.chmod(times_file, 0o620)
    elif spoil == "other-writable":
        os.chmod(times_file, 0o602)
    elif spoil == "link":
        os.symlink(times_file, tmp_path / "link")
        times_file = str(tmp_path / "link")
    elif spoil == "fifo":
        times_file = str(tmp_path / "fifo")
        os.mkfifo(times_file, 0o600)
    elif spoil == "no header":
        Path(times_file).write_bytes(data[data.index(b"\n") + 1:])
    elif spoil == "relative path":
        Path(times_file).write_bytes(data + _record("etc", 5))
    elif spoil == "cut short":
        Path(times_file).write_bytes(data[:-3])
    elif spoil == "empty":
        Path(times_file).write_bytes(b"")
    elif spoil == "nanoseconds":
        Path(times_file).write_bytes(data + (5).to_bytes(8, "little")
                                     + (10**9).to_bytes(4, "little") + b"/etc\0")
    elif spoil == "another owner":
        os.chown(times_file, 65534, 65534)
    assert _run(reader, times_file, "1f0a", monkeypatch, len(times)) is None


@ROOT_ONLY
@pytest.mark.parametrize("spoil", ["missing", "group-writable", "link", "another owner"])
def test_only_roots_own_reader_is_run(tmp_path: Path, reader: str,
                                      monkeypatch: pytest.MonkeyPatch, spoil: str) -> None:
    """It runs as root on every root launch: a reader others could have written, or a link
    to one, is not run (the times are then read in Python)."""
    copy = tmp_path / "dirtimes"
    copy.write_bytes(Path(reader).read_bytes())
    copy.chmod(0o755)
    if spoil == "missing":
        copy.unlink()
    elif spoil == "group-writable":
        copy.chmod(0o775)
    elif spoil == "link":
        copy.rename(tmp_path / "real")
        copy.symlink_to(tmp_path / "real")
    elif spoil == "another owner":
        os.chown(copy, 65534, 65534)
    monkeypatch.setattr(dirtimes, "DIR_TIMES", str(copy))
    assert dirtimes.start(str(tmp_path / "times")) is None


@ROOT_ONLY
def test_the_reader_ends_with_its_caller(tmp_path: Path, reader: str) -> None:
    """Given a PARENT that is not its parent (its caller gone before it ran), it stops."""
    _, times = _tree(tmp_path / "tree", 5)
    times_file = _times_file(tmp_path / "times", "1f0a", times)
    done = subprocess.run([reader, times_file, "1"], capture_output=True, check=False)
    assert done.returncode == 65 and done.stdout == b""
    done = subprocess.run([reader, times_file, str(os.getpid() + 1)], capture_output=True,
                          check=False)
    assert done.returncode == 69 and done.stdout == b"", done


@ROOT_ONLY
def test_prefetch_takes_the_readers_answer_only_for_its_own_cache(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The times file beside the cache is the cache's; one left from another cache (a
    launch stopped between the two writes) is not taken for it: the times are read here,
    what changed is found either way, and the times file is marked to be written again."""
    monkeypatch.setattr(dirtimes, "DIR_TIMES", reader)
    here = dirtimes.changed
    read_here: list[int] = []

    def counted(paths: list[str], times: dict[str, int]) -> set[str]:
        read_here.append(len(paths))
        return here(paths, times)

    monkeypatch.setattr(dirtimes, "changed", counted)
    paths, times = _tree(tmp_path / "tree", 200)
    cache = str(tmp_path / "cache")
    rootcache.save(cache, {}, times, time.time())
    early = rootcache.prefetch(cache)
    assert early.changed == frozenset() and not early.times_stale
    earlier = Path(cache + rootcache.TIMES).read_bytes()
    touched = _change(paths, times, 17)
    assert rootcache.prefetch(cache).changed == frozenset(touched)
    assert read_here == []  # the reader read them
    # A later cache (its times the ones now), with the earlier cache's times file beside it.
    now = {path: dirtimes.stamp(os.lstat(path)) for path in times if os.path.exists(path)}
    rootcache.save(cache, {}, now, time.time())
    assert rootcache.prefetch(cache).changed == frozenset()
    Path(cache + rootcache.TIMES).write_bytes(earlier)
    early = rootcache.prefetch(cache)
    assert early.changed == frozenset() and early.times_stale
    assert read_here == [len(now)]  # not the reader's answer: read here
    # A times file the reader refuses (others may write it) is written again too.
    rootcache.save(cache, {}, now, time.time())
    os.chmod(cache + rootcache.TIMES, 0o620)
    assert rootcache.prefetch(cache).times_stale
    # One with the cache's token and count that names a directory the cache does not
    # hold: not this cache's answer, whatever its token says.
    rootcache.save(cache, {}, now, time.time())
    loaded = rootcache.read(cache)
    assert loaded is not None
    first = next(iter(now))
    other = {(first + "-elsewhere" if where == first else where): when
             for where, when in now.items()}
    _times_file(Path(cache + rootcache.TIMES), loaded.token, other)
    early = rootcache.prefetch(cache)
    assert early.changed == frozenset() and early.times_stale
    # A cache too old to refresh: the reader started is ended, nothing read early.
    rootcache.save(cache, {}, now, time.time() - rootcache.MAX_AGE - 1)
    assert rootcache.prefetch(cache).changed is None


def test_a_cache_written_under_another_file_system_encoding_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its names are str decoded with that encoding: here they would name other bytes, or
    none (a directory read as gone, its covers dropped), so the walk is made anew."""
    cache = str(tmp_path / "cache")
    monkeypatch.setattr(rootcache.sys, "getfilesystemencoding", lambda: "iso8859-1")
    rootcache.save(cache, {"/etc/shadow": False}, {"/etc": 5}, time.time())
    assert rootcache.load(cache) is not None
    monkeypatch.undo()
    assert sys.getfilesystemencoding() != "iso8859-1"
    assert rootcache.load(cache) is None
    assert rootcache.prefetch(cache).cache is None


def test_a_save_for_the_times_file_alone_never_refuses_the_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing changed, the times file stale, and the store cannot be written (full):
    the walk's answer stands, only the next launch's read costs more."""
    tree = tmp_path / "usr"
    (tree / "lib").mkdir(parents=True)
    (tmp_path / "store").mkdir()
    cache = str(tmp_path / "store" / "cache")
    assert rootonly.private_paths(cache, [], [str(tree)]) == {}
    early = rootcache.prefetch(cache)
    stale = rootcache.Prefetched(early.path, early.cache, early.changed, True)

    def full(path: str, data: bytes) -> None:
        raise OSError(28, "No space left on device", path)

    monkeypatch.setattr(rootcache, "write_new", full)
    assert rootonly.private_paths(cache, [], [str(tree)], early=stale) == {}


def test_save_writes_the_cache_whatever_the_times_file_cannot_hold(tmp_path: Path) -> None:
    """A time past what 8 bytes of seconds hold (none a file system gives) leaves no times
    file, not a failed save; and the times file of the cache it replaced is gone."""
    cache = str(tmp_path / "cache")
    rootcache.save(cache, {}, {"/": 5}, time.time())
    assert os.path.exists(cache + rootcache.TIMES)
    rootcache.save(cache, {}, {"/": 10**30 << 128}, time.time())
    assert rootcache.load(cache) is not None
    assert not os.path.exists(cache + rootcache.TIMES)


@ROOT_ONLY
def test_names_are_read_as_the_file_system_holds_them_under_any_locale(
        tmp_path: Path, reader: str) -> None:
    """Under a Latin-1 locale the walk's names are decoded as Latin-1: the times file holds
    the bytes on disk, not their UTF-8 re-encoding, so a twin directory named by that
    re-encoding cannot stand in for the real one (a root-only file made in the real one
    is found)."""
    if shutil.which("localedef") is None:
        pytest.fail("localedef (libc-bin) is needed to make a Latin-1 locale")
    locales = tmp_path / "locales"
    locales.mkdir()
    made = subprocess.run(["localedef", "-i", "en_US", "-f", "ISO-8859-1",
                           str(locales / "en_US.ISO-8859-1")], capture_output=True,
                          text=True, check=False)
    assert (locales / "en_US.ISO-8859-1").exists(), made.stderr
    script = f"""
import os, sys, time
from claude_sandbox.launch.facts import dirtimes, rootcache
dirtimes.DIR_TIMES = {reader!r}
assert sys.getfilesystemencoding() == "iso8859-1", sys.getfilesystemencoding()
base = {os.fsencode(tmp_path / "shared")!r}
real = base + "/caf\u00e9".encode("utf-8")
os.makedirs(real)
key = os.fsdecode(real)
twin = key.encode("utf-8", "surrogateescape")
os.mkdir(twin)
dirs = {{os.fsdecode(base): dirtimes.stamp(os.lstat(base)),
        key: dirtimes.stamp(os.lstat(real))}}
cache = {str(tmp_path / "cache")!r}
rootcache.save(cache, {{}}, dirs, time.time())
os.close(os.open(real + b"/secret", os.O_CREAT | os.O_WRONLY, 0o600))
os.utime(twin, ns=(dirtimes.split(dirs[key])[1],) * 2)
early = rootcache.prefetch(cache)
print(sorted(early.changed) == [key], early.times_stale)
"""
    env = {"PATH": "/usr/bin:/bin", "LOCPATH": str(locales), "LC_ALL": "en_US.ISO-8859-1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, check=False)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr
    # Here, under UTF-8, the Latin-1 cache's names would name other bytes: not used.
    assert sys.getfilesystemencoding() == "utf-8"
    assert rootcache.prefetch(str(tmp_path / "cache")).cache is None


@ROOT_ONLY
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=600), st.sampled_from([b"", b"1f0a\n", b"1f0a"]))
def test_the_reader_takes_any_bytes_without_crashing(tmp_path: Path, reader: str,
                                                     body: bytes, token: bytes) -> None:
    """Fuzzed: whatever follows the magic (300 bodies in all, each behind one of three
    headers), the reader exits 0 (every record whole and well formed) or 65, within its
    time, and never dies of a signal."""
    times_file = tmp_path / "times"
    times_file.write_bytes(b"claude-sandbox dir-times 4 " + token + body)
    times_file.chmod(0o600)
    done = subprocess.run([reader, str(times_file), str(os.getpid())], capture_output=True,
                          timeout=20, check=False)
    assert done.returncode in (0, 65), (done.returncode, done.stderr)
    if done.returncode == 0:
        assert done.stdout.startswith(token.rstrip(b"\n") + b"\0")


@ROOT_ONLY
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 - 1),
                          st.binary(max_size=12)), min_size=1, max_size=30))
def test_the_reader_takes_any_many_records_without_crashing(
        tmp_path: Path, reader: str, records: list[tuple[int, int, bytes]]) -> None:
    """Fuzzed past the two-thread threshold (the records repeated to 1,200 and more): any
    seconds, any nanoseconds (those past a second are refused), any path bytes (a NUL
    inside cuts the record)."""
    many = records * (1200 // len(records) + 1)
    body = b"".join((seconds.to_bytes(8, "little", signed=True) + nanos.to_bytes(4, "little"))
                    * 2 + b"/" + name + b"\0" for seconds, nanos, name in many)
    times_file = tmp_path / "times"
    times_file.write_bytes(b"claude-sandbox dir-times 4 1f0a\n" + body)
    times_file.chmod(0o600)
    done = subprocess.run([reader, str(times_file), str(os.getpid())], capture_output=True,
                          timeout=20, check=False)
    assert done.returncode in (0, 65), (done.returncode, done.stderr)
