"""The root-only refresh's reading of directory times: every changed directory is found,
whether one process reads them or two, whatever the second one does, and whether the
compiled reader reads them or, where it cannot, the launch itself."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claude_sandbox.core import process
from claude_sandbox.core.paths import DIR_TIMES
from claude_sandbox.install import placed
from claude_sandbox.launch.facts import dirtimes, rootcache


def _tree(top: Path, count: int) -> tuple[list[str], dict[str, int]]:
    paths = []
    for index in range(count):
        path = top / f"d{index // 100}" / f"e{index}"
        path.mkdir(parents=True)
        paths.append(str(path))
    return paths, {path: os.lstat(path).st_mtime_ns for path in paths}


def _change(paths: list[str], times: dict[str, int], every: int) -> set[str]:
    """Make a file in every `every`th directory, remove a few others, name their (ns)
    times again so that even a coarse clock sees the change."""
    touched = set()
    for index, path in enumerate(paths):
        if index % every == 0:
            Path(path, "new").touch()
            os.utime(path, ns=(times[path] + 10**9, times[path] + 10**9))
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

@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> str:
    program = next(p for p in placed.PROGRAMS if p.target == DIR_TIMES)
    built = str(tmp_path_factory.mktemp("reader") / "dirtimes")
    subprocess.run(["gcc", *program.flags, "-o", built, str(program.source)], check=True)
    return built


def _times_file(path: Path, token: str, times: dict[str, int]) -> str:
    data = b"claude-sandbox dir-times 1 " + token.encode() + b"\n" + b"".join(
        when.to_bytes(8, "little", signed=True) + os.fsencode(where) + b"\0"
        for where, when in times.items())
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


def _run(reader: str, times_file: str, token: str, monkeypatch: pytest.MonkeyPatch,
         ) -> set[str] | None:
    monkeypatch.setattr(dirtimes, "DIR_TIMES", reader)
    reading = dirtimes.start(times_file)
    assert reading is not None
    return dirtimes.finish(reading, token)


def test_the_reader_finds_what_the_python_reading_finds(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every changed or removed directory, a name of any bytes, one missing since it was
    cached (-1: unchanged), one made since it was cached missing."""
    paths, times = _tree(tmp_path / "tree", 3000)
    odd = os.path.join(os.fsdecode(bytes(tmp_path)), os.fsdecode(b"na\xffme\nline"))
    os.mkdir(odd)
    times[odd] = -5
    times[str(tmp_path / "gone")] = -1
    times[str(tmp_path / "tree")] = -1  # cached missing, there now
    touched = _change(paths, times, 29)
    expected = dirtimes.changed(list(times), times)
    assert expected == touched | {odd, str(tmp_path / "tree")}
    times_file = _times_file(tmp_path / "times", "1f-0a", times)
    assert _run(reader, times_file, "1f-0a", monkeypatch) == expected


def test_the_reader_answers_for_its_own_cache_only(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _, times = _tree(tmp_path / "tree", 20)
    times_file = _times_file(tmp_path / "times", "1f-0a", times)
    assert _run(reader, times_file, "1f-0a", monkeypatch) == set()
    assert _run(reader, times_file, "1f-0b", monkeypatch) is None


@pytest.mark.parametrize("spoil", ["group-writable", "other-writable", "link", "fifo",
                                   "no header", "relative path", "cut short", "empty",
                                   "another owner"])
def test_a_times_file_it_would_not_have_written_is_refused(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch, spoil: str) -> None:
    """Refused (the caller then reads the times itself), never waited on or followed."""
    _, times = _tree(tmp_path / "tree", 20)
    times_file = _times_file(tmp_path / "times", "1f-0a", times)
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
        Path(times_file).write_bytes(data + (5).to_bytes(8, "little") + b"etc\0")
    elif spoil == "cut short":
        Path(times_file).write_bytes(data[:-3])
    elif spoil == "empty":
        Path(times_file).write_bytes(b"")
    elif spoil == "another owner":
        if os.getuid() != 0:
            pytest.skip("a file another user owns is made by root")
        os.chown(times_file, 65534, 65534)
    assert _run(reader, times_file, "1f-0a", monkeypatch) is None


def test_without_the_reader_the_times_are_read_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dirtimes, "DIR_TIMES", str(tmp_path / "not-installed"))
    assert dirtimes.start(str(tmp_path / "times")) is None


def test_prefetch_takes_the_readers_answer_only_for_its_own_cache(
        tmp_path: Path, reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The times file beside the cache is the cache's; one left from another cache (a
    launch stopped between the two writes) is not taken for it: the times are read here,
    and what changed is found either way."""
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
    assert rootcache.prefetch(cache).changed == frozenset()
    earlier = Path(cache + rootcache.TIMES).read_bytes()
    touched = _change(paths, times, 17)
    assert rootcache.prefetch(cache).changed == frozenset(touched)
    assert read_here == []  # the reader read them
    # A later cache (its times the ones now), with the earlier cache's times file beside it.
    now = {path: os.lstat(path).st_mtime_ns if os.path.exists(path) else -1 for path in times}
    rootcache.save(cache, {}, now, time.time())
    assert rootcache.prefetch(cache).changed == frozenset()
    Path(cache + rootcache.TIMES).write_bytes(earlier)
    assert rootcache.prefetch(cache).changed == frozenset()
    assert read_here == [len(now)]  # not the reader's answer: read here
    # A cache too old to refresh: the reader started is ended, nothing read early.
    rootcache.save(cache, {}, now, time.time() - rootcache.MAX_AGE - 1)
    assert rootcache.prefetch(cache).changed is None


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=600), st.sampled_from([b"", b"1f-0a\n", b"1f-0a"]))
def test_the_reader_takes_any_bytes_without_crashing(tmp_path: Path, reader: str,
                                                     body: bytes, token: bytes) -> None:
    """Fuzzed: whatever follows the magic, the reader exits 0 (every record whole, each
    path absolute) or 65, within its time, and never dies of a signal."""
    times_file = tmp_path / "times"
    times_file.write_bytes(b"claude-sandbox dir-times 1 " + token + body)
    times_file.chmod(0o600)
    done = subprocess.run([reader, str(times_file)], capture_output=True, timeout=20,
                          check=False)
    assert done.returncode in (0, 65), (done.returncode, done.stderr)
    if done.returncode == 0:
        assert done.stdout.startswith(token.rstrip(b"\n") + b"\0")
