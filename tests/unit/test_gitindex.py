"""The index reader agrees with real git on hidden entries and refuses hostile files cleanly."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claude_sandbox.launch.overlay import gitindex
from claude_sandbox.launch.overlay.gitindex import IndexFormat

SKIP, ASSUME = "skip-worktree", "assume-unchanged"
LONG = "/".join(["d" * 200] * 25) + "/long.txt"  # 5033 bytes: past the 0xFFF cap
EXACT = "e" * 0xFFF  # exactly the cap: flags say 0xFFF and the name is NUL-terminated
NEARLY = "n" * 0xFFE


def git(repo: Path, *args: str | bytes) -> bytes:
    env = {
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(repo.parent),
        "PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
    }
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60, check=True)
    return done.stdout


def ls_files_v(repo: Path) -> tuple[tuple[str, str], ...]:
    """What git itself says: `S` skip-worktree, lowercase assume-unchanged, `s` both."""
    pairs: list[tuple[str, str]] = []
    for record in git(repo, "ls-files", "-v", "-z").split(b"\0"):
        if not record:
            continue
        tag, path = chr(record[0]), record[2:].decode("utf-8", "surrogateescape")
        if tag.upper() == "S":
            pairs.append((path, SKIP))
        if tag.islower():
            pairs.append((path, ASSUME))
    return tuple(pairs)


def make_repo(root: Path, *, sha256: bool = False, extra: tuple[str, ...] = ()) -> Path:
    """Nested, non-ASCII, non-UTF-8 and over-long paths, flagged every way, committed."""
    repo = root / "repo"
    git(root, "init", "-q", *(["--object-format=sha256"] if sha256 else []), *extra, str(repo))
    names = [b"plain.txt", b"skip.txt", b"assume.txt", b"both.txt", b"sub/dir/deep/nested.txt",
             "caf\u00e9/\u65e5\u672c.txt".encode(), b"bad-\xff-utf8.txt"]
    for name in names:
        (repo / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
        (repo / os.fsdecode(name)).write_bytes(name)
    git(repo, "add", ".")
    # Longer than PATH_MAX allows on disk: the entries go straight into the index.
    blob = git(repo, "hash-object", "-w", "plain.txt").decode().strip()
    for long_name in (LONG, EXACT, NEARLY):
        git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{long_name}")
    git(repo, "commit", "-q", "-m", "c")  # a TREE extension the reader must step over
    git(repo, "update-index", "--skip-worktree", "skip.txt", "both.txt", LONG, NEARLY,
        "caf\u00e9/\u65e5\u672c.txt")
    git(repo, "update-index", "--assume-unchanged", "assume.txt", "both.txt", EXACT,
        b"bad-\xff-utf8.txt", "sub/dir/deep/nested.txt")
    return repo


def index_of(repo: Path, version: int) -> bytes:
    git(repo, "update-index", "--index-version", str(version))
    return (repo / ".git" / "index").read_bytes()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("gitindex"))


@pytest.fixture(scope="module")
def indexes(repo: Path) -> dict[int, bytes]:
    return {version: index_of(repo, version) for version in (3, 4)}


# In index order, which is bytewise: LONG ("d…") sorts before EXACT ("e…").
EXPECTED = (
    ("assume.txt", ASSUME), ("bad-\udcff-utf8.txt", ASSUME), ("both.txt", SKIP),
    ("both.txt", ASSUME), ("caf\u00e9/\u65e5\u672c.txt", SKIP), (LONG, SKIP), (EXACT, ASSUME),
    (NEARLY, SKIP), ("skip.txt", SKIP), ("sub/dir/deep/nested.txt", ASSUME),
)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_matches_git_ls_files(repo: Path, version: int) -> None:
    data = index_of(repo, version)
    # git writes version 3 whenever an entry has extended flags, even when asked for 2.
    assert struct.unpack(">I", data[4:8])[0] == max(version, 3)
    assert gitindex.hidden(data) == ls_files_v(repo) == EXPECTED
    assert gitindex.read_hidden(str(repo / ".git" / "index")) == EXPECTED


@pytest.mark.parametrize("version", [2, 3, 4])
def test_sha256_repository(tmp_path: Path, version: int) -> None:
    repo = make_repo(tmp_path, sha256=True)
    data = index_of(repo, version)
    assert gitindex.hidden(data, hash_size=32) == ls_files_v(repo) == EXPECTED
    assert gitindex.read_hidden(str(repo / ".git" / "index"), hash_size=32) == EXPECTED


def test_version_2_with_assume_unchanged_only(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    for name in ("a", "b", "c/d"):
        (repo / name).parent.mkdir(exist_ok=True)
        (repo / name).write_text(name)
    git(repo, "add", ".")
    git(repo, "update-index", "--assume-unchanged", "b", "c/d")
    data = index_of(repo, 2)
    assert data[4:8] == struct.pack(">I", 2)
    assert gitindex.hidden(data) == ls_files_v(repo) == (("b", ASSUME), ("c/d", ASSUME))
    git(repo, "update-index", "--no-assume-unchanged", "b", "c/d")
    assert gitindex.hidden(index_of(repo, 2)) == ()


def test_index_version_4_from_config(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    for name in ("x/one", "x/one-two", "x/y/three", "z"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(name)
    git(repo, "-c", "index.version=4", "add", ".")
    git(repo, "update-index", "--skip-worktree", "x/one-two", "z")
    git(repo, "update-index", "--assume-unchanged", "x/y/three", "z")
    data = (repo / ".git" / "index").read_bytes()
    assert data[4:8] == struct.pack(">I", 4)
    assert gitindex.hidden(data) == ls_files_v(repo) == (
        ("x/one-two", SKIP), ("x/y/three", ASSUME), ("z", SKIP), ("z", ASSUME))


def test_every_truncation_refuses_or_reports_a_subset(indexes: dict[int, bytes]) -> None:
    for data in indexes.values():
        whole = set(gitindex.hidden(data))
        for cut in range(len(data)):
            try:
                got = gitindex.hidden(data[:cut])
            except IndexFormat:
                continue
            assert set(got) <= whole


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_index_format(data: bytes) -> None:
    for candidate in (data, b"DIRC" + data, b"DIRC\0\0\0\x02\0\0\0\x01" + data):
        try:
            gitindex.hidden(candidate)
        except IndexFormat:
            pass


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([3, 4]), st.lists(st.tuples(st.integers(0), st.integers(0, 255)),
                                         min_size=1, max_size=6))
def test_mutated_index_raises_only_index_format(
    indexes: dict[int, bytes], version: int, changes: list[tuple[int, int]]
) -> None:
    data = bytearray(indexes[version])
    for where, value in changes:
        data[where % len(data)] = value
    try:
        got = gitindex.hidden(bytes(data))
    except IndexFormat:
        return
    assert all(isinstance(path, str) and tag in (SKIP, ASSUME) for path, tag in got)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_huge_count_on_a_tiny_file_fails_fast(version: int) -> None:
    for count in (2**31, 2**32 - 1, 2):
        started = time.monotonic()
        with pytest.raises(IndexFormat, match="count"):
            gitindex.hidden(b"DIRC" + struct.pack(">II", version, count) + bytes(100))
        assert time.monotonic() - started < 0.5


def varint(value: int) -> bytes:
    out = [value & 0x7F]
    value >>= 7
    while value:
        value -= 1
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(out))


def entry(name: bytes, version: int, *, flags: int = 0, ext: int | None = None,
          previous: bytes = b"", length: int | None = None, pad: bytes = b"") -> bytes:
    """One on-disk entry as git writes it; keywords bend it out of shape."""
    flags |= min(len(name), 0xFFF) if length is None else length
    body = bytes(24) + struct.pack(">I", 0o100644) + bytes(12) + bytes(20)
    body += struct.pack(">H", flags | (0x4000 if ext is not None else 0))
    body += b"" if ext is None else struct.pack(">H", ext)
    if version == 4:
        common = 0
        while common < min(len(previous), len(name)) and previous[common] == name[common]:
            common += 1
        return body + varint(len(previous) - common) + name[common:] + b"\0"
    size = (len(body) + len(name) + 8) & ~7
    return body + name + (pad or bytes(size - len(body) - len(name)))


def index(version: int, *entries: bytes) -> bytes:
    data = b"DIRC" + struct.pack(">II", version, len(entries)) + b"".join(entries)
    return data + hashlib.sha1(data).digest()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (index(2, entry(b"a", 2, ext=0x4000)), "version 2"),
        (index(3, entry(b"a", 3, ext=0x8000)), "unknown extended"),
        (index(3, entry(b"abc", 3, length=2)), "name length"),
        (index(3, entry(b"abc", 3, length=4)), "name length"),
        (index(2, entry(b"a" * 100, 2, length=0xFFF)), "name length"),
        (index(2, entry(b"ab", 2, pad=b"\0\0x\0\0\0\0\0")), "padding"),
        (index(4, entry(b"a", 4), entry(b"b", 4, previous=b"abc")), "prefix strip"),
        (index(4, entry(b"a", 4)[:-3] + b"\xff\xff\xff\xff\xff\x7fz\0"), "prefix strip"),
        (index(5, entry(b"a", 3)), "version 5"),
        (b"DIRX" + index(2)[4:], "signature"),
        (index(2, entry(b"", 2)), "name length"),
    ],
)
def test_malformed_entries_are_refused_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(IndexFormat, match=reason):
        gitindex.hidden(data)


def test_hash_size_other_than_sha1_or_sha256_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="hash_size"):
        gitindex.hidden(index(2), hash_size=16)


NAMES = st.lists(st.text(alphabet="ab\u00e9\u65e5-", min_size=1, max_size=4), min_size=1,
                 max_size=3).map("/".join)
PREFIXES = st.sampled_from(["", "d/", "d/e/", "L" * 0xFFC + "/", "M" * 0xFFE + "/"])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.sampled_from([2, 3, 4]),
       st.dictionaries(st.tuples(PREFIXES, NAMES).map("".join), st.tuples(st.booleans(),
                       st.booleans(), st.booleans()), min_size=1, max_size=8))
def test_synthetic_indexes_read_as_git_reads_them(
    tmp_path: Path, version: int, entries: dict[str, tuple[bool, bool, bool]]
) -> None:
    repo = tmp_path / "synthetic"
    if not repo.exists():
        git(tmp_path, "init", "-q", str(repo))
    previous, parts = b"", []
    for name in sorted(entries, key=str.encode):
        assume, skip, intent = entries[name]
        ext = None if version == 2 else (0x4000 * skip | 0x2000 * intent) or None
        parts.append(entry(name.encode(), version, flags=0x8000 * assume, ext=ext,
                           previous=previous))
        previous = name.encode()
    data = index(version, *parts)
    (repo / ".git" / "index").write_bytes(data)
    assert gitindex.hidden(data) == ls_files_v(repo)


def test_read_hidden_refuses_what_is_not_a_plain_index(repo: Path, tmp_path: Path) -> None:
    real = repo / ".git" / "index"
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(IndexFormat, match="cannot open"):
        gitindex.read_hidden(str(link))
    with pytest.raises(IndexFormat, match="not a regular file"):
        gitindex.read_hidden(str(tmp_path))
    with pytest.raises(IndexFormat, match="not a regular file"):
        gitindex.read_hidden("/dev/zero")
    size = real.stat().st_size
    with pytest.raises(IndexFormat, match="larger than"):
        gitindex.read_hidden(str(real), limit=size - 1)
    assert gitindex.read_hidden(str(real), limit=size) == EXPECTED
    assert gitindex.read_hidden(str(tmp_path / "missing")) == ()
    assert gitindex.read_hidden(str(tmp_path / "no" / "such" / "index")) == ()


def test_read_hidden_on_a_fifo_without_a_writer_returns_promptly(tmp_path: Path) -> None:
    fifo = tmp_path / "index"
    os.mkfifo(fifo)
    outcome: list[BaseException | object] = []

    def attempt() -> None:
        try:
            outcome.append(gitindex.read_hidden(str(fifo)))
        except BaseException as error:
            outcome.append(error)

    # A daemon thread: if the open ever blocked, the test fails instead of hanging.
    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "read_hidden blocked on a FIFO"
    assert isinstance(outcome[0], IndexFormat)
    assert "not a regular file" in str(outcome[0])


def test_a_split_index_is_refused_not_read_as_clean(tmp_path: Path) -> None:
    """Its entries, and their bits, lie in a shared index file the index only names. The
    entries that replace shared ones have empty names and are refused as they are
    read; a main index of named entries is refused at its link extension."""
    repo = make_repo(tmp_path)
    git(repo, "update-index", "--split-index")
    git(repo, "update-index", "--skip-worktree", "plain.txt")
    with pytest.raises(IndexFormat):
        gitindex.read_hidden(str(repo / ".git" / "index"))


def test_the_link_extension_is_refused_where_the_entries_read(indexes: dict[int, bytes]) -> None:
    import hashlib

    data = indexes[3]
    body = data[:-20] + b"link" + (20).to_bytes(4, "big") + bytes(20)
    with pytest.raises(IndexFormat, match="split index"):
        gitindex.hidden(body + hashlib.sha1(body).digest())
