"""Read the agent's git index: the entries that hide changes, and the paths git refuses.

After a session the launcher reports entries the agent marked skip-worktree or
assume-unchanged, and applies the index only when git itself would have let
every entry in. It reads `.git/index` itself: running git on a repository the
agent could have configured would run the agent's hooks, filters and fsmonitor.
The file may be hostile, so every count and length is checked against the bytes
actually there before it is used, and anything malformed raises IndexFormat.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct

from claude_sandbox.core import streams

SKIP_WORKTREE = "skip-worktree"
ASSUME_UNCHANGED = "assume-unchanged"

_ASSUME_VALID = 0x8000
_EXTENDED = 0x4000
_NAME_MASK = 0x0FFF
_EXT_SKIP_WORKTREE = 0x4000
# skip-worktree and intent-to-add. git refuses an entry with any other extended
# bit, so a file carrying one is not an index git would read the way we do.
_EXT_KNOWN = 0x6000
# ctime, mtime (seconds and nanoseconds), dev, ino, mode, uid, gid, size: 32 bits each.
_STAT_BYTES = 40
_MODE_AT = 24  # after ctime, mtime, dev and ino
_HEADER = struct.Struct(">4sII")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class IndexFormat(ValueError):
    """The data is not an index this module can read; the message says why, briefly."""


def _varint(data: bytes, pos: int, end: int, most: int) -> tuple[int, int]:
    # git's offset varint: each continuation byte adds one before shifting, so
    # every value has one encoding. The value only grows, so it is refused as soon
    # as it passes `most`: a run of 0x80 bytes never builds a huge integer.
    value = -1
    while True:
        if pos >= end:
            raise IndexFormat("truncated entry")
        byte = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (byte & 0x7F)
        if value > most:
            raise IndexFormat("prefix strip longer than the previous path")
        if not byte & 0x80:
            return value, pos


def gitlinks(data: bytes, *, hash_size: int = 20) -> frozenset[tuple[str, str]]:
    """(path, commit id) of every submodule entry (a gitlink, mode 160000)."""
    return frozenset((path, oid) for path, mode, _flags, _extended, oid
                     in _entries(data, hash_size) if mode == 0o160000)


def staged(data: bytes, *, hash_size: int = 20) -> frozenset[tuple[str, str]]:
    """(path, object id) of every entry, each stage of a path in conflict included."""
    return frozenset((path, oid) for path, _mode, _flags, _extended, oid
                     in _entries(data, hash_size))


def hidden(data: bytes, *, hash_size: int = 20) -> tuple[tuple[str, str], ...]:
    """(path, "skip-worktree" | "assume-unchanged") for each flagged entry, in index order.

    `hash_size` is 20 for sha1 repositories and 32 for `extensions.objectformat = sha256`.
    """
    found: list[tuple[str, str]] = []
    for path, _mode, flags, extended, _oid in _entries(data, hash_size):
        if extended & _EXT_SKIP_WORKTREE:
            found.append((path, SKIP_WORKTREE))
        if flags & _ASSUME_VALID:
            found.append((path, ASSUME_UNCHANGED))
    return tuple(found)


def _entries(data: bytes, hash_size: int) -> list[tuple[str, int, int, int, str]]:
    """(path, mode, flags, extended flags, object id) of every entry, in index order."""
    return _parse(data, hash_size)[0]


def without_extensions(data: bytes, hash_size: int) -> bytes:
    """The index `data` with its entries alone, its checksum made again. Its extensions
    are caches git makes again (the cache-tree, the untracked cache, fsmonitor's, the
    offsets), or the session's word on what a command outside brings back (the
    cache-tree becomes the tree of the user's next commit; resolve-undo the content
    `git checkout -m` writes). A sparse index is refused: its directory entries mean
    something only with their extension."""
    found, end = _parse(data, hash_size)
    for _path, mode, _flags, extended, _oid in found:
        if mode == 0o040000 and extended & _EXT_SKIP_WORKTREE:
            raise IndexFormat("a sparse index (git sparse-checkout disable undoes it)")
    body = data[:end]
    digest = hashlib.sha256(body) if hash_size == 32 else hashlib.sha1(body)
    return body + digest.digest()


def _parse(data: bytes, hash_size: int) -> tuple[list[tuple[str, int, int, int, str]], int]:
    """Every entry (as _entries), and where the entries end."""
    if hash_size not in (20, 32):
        raise ValueError(f"hash_size must be 20 or 32, not {hash_size}")
    # The trailing checksum is not verified (a hostile file can carry a valid one
    # and we only report), but its room is required: without it the file was cut.
    end = len(data) - hash_size
    if end < _HEADER.size:
        raise IndexFormat("truncated header")
    signature, version, count = _HEADER.unpack_from(data)
    if signature != b"DIRC":
        raise IndexFormat("bad signature")
    if version not in (2, 3, 4):
        raise IndexFormat(f"unsupported index version {version}")
    fixed = _STAT_BYTES + hash_size + 2
    # Every entry takes at least two bytes past its flags (a name byte and a NUL,
    # or a varint and a NUL), so a count the data cannot hold is refused up front.
    if count * (fixed + 2) > end - _HEADER.size:
        raise IndexFormat("entry count larger than the data")
    found: list[tuple[str, int, int, int, str]] = []
    previous = b""
    pos = _HEADER.size
    for _ in range(count):
        start = pos
        pos += fixed
        if pos > end:
            raise IndexFormat("truncated entry")
        (flags,) = _U16.unpack_from(data, pos - 2)
        extended = 0
        if flags & _EXTENDED:
            # git writes version 3 whenever an entry needs extended flags; a version 2
            # file with the bit is ambiguous, and ambiguity must not read as "clean".
            if version < 3:
                raise IndexFormat("extended flags in a version 2 index")
            if pos + 2 > end:
                raise IndexFormat("truncated entry")
            (extended,) = _U16.unpack_from(data, pos)
            pos += 2
            if extended & ~_EXT_KNOWN:
                raise IndexFormat("unknown extended flags")
        if version == 4:
            strip, pos = _varint(data, pos, end, len(previous))
        nul = data.find(b"\0", pos, end)
        if nul < 0:
            raise IndexFormat("truncated entry")
        if version == 4:
            name = previous[: len(previous) - strip] + data[pos:nul]
            pos = nul + 1
        else:
            name = data[pos:nul]
            # 1 to 8 NULs make the entry a multiple of 8 bytes from its start.
            pos = start + ((nul - start + 8) & ~7)
            if pos > end:
                raise IndexFormat("truncated entry")
            if data.count(0, nul, pos) != pos - nul:
                raise IndexFormat("padding is not NUL")
        # The flags hold the name length, capped at 0xFFF: a mismatch means the
        # file would not read the same way in git, so it is refused, not guessed.
        length = flags & _NAME_MASK
        if not name or (len(name) != length if length < _NAME_MASK else len(name) < length):
            raise IndexFormat("name length does not match the flags")
        previous = name
        (mode,) = _U32.unpack_from(data, start + _MODE_AT)
        oid = data[start + _STAT_BYTES:start + _STAT_BYTES + hash_size].hex()
        found.append((name.decode("utf-8", "surrogateescape"), mode, flags, extended, oid))
    _extensions(data, pos, end)
    return found, pos


_EXTENSION = struct.Struct(">4sI")


def _extensions(data: bytes, pos: int, end: int) -> None:
    """Walk the extensions after the entries. A split index (`link`) is refused: its
    entries, and their bits, lie in a shared index file this index only names, and
    applied without it the index outside would not read at all."""
    while pos < end:
        if pos + _EXTENSION.size > end:
            raise IndexFormat("truncated extension")
        signature, size = _EXTENSION.unpack_from(data, pos)
        if signature == b"link":
            raise IndexFormat("a split index (git update-index --no-split-index undoes it)")
        pos += _EXTENSION.size + size
        if pos > end:
            raise IndexFormat("truncated extension")


def read_hidden(
    path: str, *, limit: int = 512 << 20, hash_size: int = 20
) -> tuple[tuple[str, str], ...]:
    """hidden() of the index file at `path`; () when there is none.

    A symlink, FIFO, device or directory there raises IndexFormat without blocking.
    """
    data = read(path, limit=limit)
    return () if data is None else hidden(data, hash_size=hash_size)


def read(path: str, *, limit: int = 512 << 20) -> bytes | None:
    """The bytes of the index file at `path`; None when there is none.

    A symlink, FIFO, device or directory there raises IndexFormat without blocking.
    """
    # O_NONBLOCK: opening a FIFO with no writer must not wait. O_NOFOLLOW: the
    # agent could point the name at any file the launcher can read.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None  # a repository with nothing ever added has no index
    except OSError as error:
        raise IndexFormat(f"cannot open: {error.strerror or error}") from None
    chunks: list[bytes] = []
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IndexFormat("not a regular file")
        if info.st_size > limit:
            raise IndexFormat(f"larger than {limit} bytes")
        # Read to EOF rather than trusting st_size, but never past the limit: a
        # process left running could still be growing the file.
        total = 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            total += len(chunk)
            if total > limit:
                raise IndexFormat(f"larger than {limit} bytes")
            chunks.append(chunk)
    except OSError as error:
        raise IndexFormat(f"cannot read: {error.strerror or error}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


# git checks an entry's path only as the entry is added, never as it reads an index
# from disk. An entry named .git/hooks/post-checkout that the agent put in its index
# would reach the real .git at the user's next `git checkout -- .` or `git restore .`,
# and git would run it. So an index is applied only when git would have let every
# entry in, by the rules of git's verify_path, with the names that NTFS and HFS+
# (a workspace on a shared or mounted disk) read as .git.
_S_IFMT, _S_IFDIR, _S_IFLNK = 0o170000, 0o040000, 0o120000
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
_GITMODULES_SHORT = ("gitmod~1", "gitmod~2", "gitmod~3", "gitmod~4")


def _folded(component: str) -> str:
    """`component` as NTFS or HFS+ would name it, lowercased, near enough to find .git:
    HFS+ ignores some invisible code points; NTFS ends a name at an alternate stream's
    ':' and drops trailing dots and spaces."""
    if not component.isascii():
        component = _HFS_IGNORED.sub("", component)
    return component.partition(":")[0].rstrip(". ").lower()


def _short_gitmodules(name: str) -> bool:
    # NTFS's fallback 8.3 name for .gitmodules: up to six characters of "gi7eba",
    # then "~" and a number, eight characters in all.
    head, tilde, number = name.partition("~")
    return (len(name) == 8 and bool(tilde) and len(head) <= 6 and "gi7eba".startswith(head)
            and number.isascii() and number.isdigit() and number[0] != "0")


def path_refusal(path: str, mode: int) -> str | None:
    """None when git would let an entry named `path` with `mode` into an index, else why not."""
    kind = mode & _S_IFMT
    if kind == _S_IFDIR and path.endswith("/"):
        path = path[:-1]  # a sparse index names a directory with its trailing slash
    if not path or path.startswith("/"):
        return "an empty or absolute path"
    parts = path.split("/")
    # NTFS separates names at a backslash too.
    ntfs = path.replace("\\", "/").split("/") if "\\" in path else parts
    if any(part in ("", ".", "..") for part in parts) or ".." in ntfs:
        return "an empty, '.' or '..' component: checked out, it lands elsewhere"
    names = [_folded(part) for part in ntfs]
    if any(name in (".git", "git~1") for name in names):
        return ("a .git component (or a name another file system reads as .git): "
                "checked out, it lands in the git directory, whose hooks git runs")
    if kind == _S_IFLNK and any(name == ".gitmodules" or name in _GITMODULES_SHORT
                                or _short_gitmodules(name) for name in names):
        return ("a .gitmodules that is a symbolic link: git would read submodule URLs "
                "wherever it points")
    return None


def refused(data: bytes) -> tuple[tuple[str, str], ...]:
    """(path, why) for every entry git would not have let into the index `data`.

    The file names no hash size: it is read as sha1's and as sha256's and checked
    under each that reads, so an index that reads one way as sha1 and another as
    sha256 is checked as git reads it either way. IndexFormat, sha1's reason, when
    it reads as neither.
    """
    found: dict[tuple[str, str], None] = {}
    failures: list[IndexFormat] = []
    for hash_size in (20, 32):
        try:
            entries = _entries(data, hash_size)
        except IndexFormat as error:
            failures.append(error)
            continue
        for path, mode, _flags, _extended, _oid in entries:
            why = path_refusal(path, mode)
            if why is not None:
                found[(path, why)] = None
    if len(failures) == 2:
        raise failures[0]
    return tuple(found)


shown = streams.terminal_safe  # a path safe and unambiguous in a terminal
