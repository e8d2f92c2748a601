"""The root-only walk's cache (rootonly.py), and its first half read early.

The cache is read on every root launch, in marshal's form, in two parts: a magic line,
the head's length and the CRC-32 of each part (8, 4 and 4 bytes, big endian), then the
head (when the cache was made, the covers (a path: whether it is a directory), how many
directories it holds, which of the trees last shown it walked, the token it shares with
its times file, and the file system encoding its names were decoded with), then every
directory's time. On 37,000 directories the second part takes 11-14 ms to load and 3
more to check, a fifth of the helper's work on a root launch; it is loaded only when the
launch needs it (`directories`): when a directory changed, a tree was not walked
before, or the times file is to be written again. marshal trusts its input: it
allocates what a count in it asks for before any check could run. So a part is loaded
only from a regular file that this user owns and no one else may write, read once, whose
head is the one `save` wrote and whose part matches its checksum: root's own file in
root's private store, written whole under a name no one can guess and renamed into
place. Anything else is refused, and the cache rebuilt.

Beside it, `save` writes every directory's time again, flat, for the compiled reader
(dirtimes.c): no dict of tens of thousands of entries to build before the times are
read. Both files hold a random token drawn for each save, and the reader's answer is
taken only with the cache's own token and a count of every directory it holds: a times
file left from another cache (concurrent root launches, a launch stopped between the
two writes) is never read as this one's. The paths are written as the file system's
bytes (os.fsencode), the bytes the walk's own `lstat` asks for. The names are str, decoded
with the interpreter's file system encoding, which follows the locale: a cache written
under another encoding (a root launch under Latin-1, the next under UTF-8) would name
other bytes, or none, so it is not used, and the walk is made anew.

Reading it and the time of every directory it holds needs nothing of the launch's plan,
and is most of what a root launch pays (ADR 0015): `prefetch` does it in the late-mount
helper as soon as the launch knows it runs as root, while the launcher plans
(launch/session/procmask.py); the rest waits for the plan.
"""

from __future__ import annotations

import binascii
import marshal
import os
import stat
import sys
import time

from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# The cache's versions: OLD_CACHES, below, lists the earlier ones, which are removed.
CACHE_NAME = "root-only-10"
_MAGIC = b"claude-sandbox root-only 10\n"
_HEAD = len(_MAGIC) + 16
# A file's mode changed in place (chmod) does not change its directory's times: past this
# age the cache is rebuilt in full.
MAX_AGE = 24 * 3600
# Beside the cache: every directory's time, flat, for the compiled reader (dirtimes.c).
TIMES = ".times"
_TIMES_MAGIC = b"claude-sandbox dir-times 4 "
_TIMES_HEAD = 4096  # read to find the token: the magic, the token, a newline
_HEX = frozenset("0123456789abcdef")

# -10 keeps each directory's status-change and modification times (dirtimes.stamp; -9
# the first, -8 the second, which the directory's owner may set back); -8 loads its
# directories' times only when asked; -7 shares a token with its times file; -6 is
# marshal's form; -5 judged directories right by right (-4 covered another user's 0711
# directory; -4 and -3 walked the shown trees, -3 in JSON; -2 all of /, the first
# judged by other-read).
OLD_CACHES = ("root-only.json", "root-only-2.json", "root-only-3.json", "root-only-4",
              "root-only-5", "root-only-6", "root-only-7", "root-only-8",
              "root-only-9")

Loaded = tuple[dict[str, bool], dict[str, int], float]  # covers, directory times, made


@record
class Cache:
    """A cache as read: its head at once, its directories' times (`directories`) only
    when a launch needs them. `walked`: the trees shown at its save that it holds."""

    hidden: dict[str, bool]
    made: float
    count: int
    walked: frozenset[str]
    token: str
    times: bytes  # the directories' part, marshal's form, loaded only once `crc` matches
    crc: int


def fresh(made: float, now: float) -> bool:
    """Whether a cache made at `made` may be refreshed at `now` rather than rebuilt: made
    within MAX_AGE, and not in the future (a clock set back would keep it forever)."""
    # A time that is not a number, or infinite, fails the comparison.
    return 0 <= now - made <= MAX_AGE


def read_own(path: str, limit: int = -1) -> bytes | None:
    """The file's bytes (its first `limit`, when given) where it is a regular file of this
    user's that nobody else may write; None otherwise."""
    try:
        # O_NONBLOCK: a FIFO put there opens at once, and is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as handle:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or info.st_mode & 0o022):
            return None
        return handle.read(limit)


def load(path: str) -> Loaded | None:
    """The cache whole, or None where it is missing or not exactly what `save` wrote."""
    cache = read(path)
    dirs = None if cache is None else directories(cache)
    return None if cache is None or dirs is None else (cache.hidden, dirs, cache.made)


def read(path: str) -> Cache | None:
    """The cache with its head loaded, or None where it is missing, not what `save` wrote
    or written under another file system encoding than this interpreter's."""
    try:
        data = read_own(path)
        if data is None or not data.startswith(_MAGIC):
            return None
        at = len(_MAGIC)
        size = int.from_bytes(data[at:at + 8], "big")
        crc, times_crc = data[at + 8:at + 12], int.from_bytes(data[at + 12:_HEAD], "big")
        head = data[_HEAD:_HEAD + size]
        if size != len(head) or int.from_bytes(crc, "big") != binascii.crc32(head):
            return None
        made, hidden, count, walked, token, encoding = marshal.loads(head)
    except (OSError, ValueError, TypeError, EOFError, MemoryError):
        return None
    if (encoding != sys.getfilesystemencoding()
            or type(made) is not float or type(hidden) is not dict or type(count) is not int
            or type(walked) is not frozenset or not set(map(type, walked)) <= {str}
            or type(token) is not str or len(token) != 32 or not set(token) <= _HEX
            or not set(map(type, hidden)) <= {str}
            or not set(map(type, hidden.values())) <= {bool}):
        return None
    return Cache(hidden, made, count, walked, token, data[_HEAD + size:], times_crc)


def directories(cache: Cache) -> dict[str, int] | None:
    """Every directory's time, as the cache holds them; None where that part is not the
    one its head was written with (the cache is then rebuilt)."""
    if binascii.crc32(cache.times) != cache.crc:
        return None
    try:
        dirs = marshal.loads(cache.times)
    except (ValueError, TypeError, EOFError, MemoryError):
        return None
    if (type(dirs) is not dict or len(dirs) != cache.count
            or not set(map(type, dirs)) <= {str} or not set(map(type, dirs.values())) <= {int}
            or not cache.walked <= dirs.keys()):
        return None
    return dirs


def _times(dirs: dict[str, int], token: str) -> bytes | None:
    """The times file's bytes; None where a time does not fit its 8 bytes of seconds."""
    from claude_sandbox.launch.facts import dirtimes  # the walk's alone (ADR 0020)

    records = []
    try:
        for where, when in dirs.items():
            head = b""
            for time_ns in dirtimes.split(when):  # status-change, then modification
                seconds, nanoseconds = divmod(time_ns, 1_000_000_000)  # as the kernel keeps it
                head += seconds.to_bytes(8, "little", signed=True) + nanoseconds.to_bytes(
                    4, "little")
            records.append(head + os.fsencode(where) + b"\0")
    except (OverflowError, ValueError):  # ValueError: a name the encoding cannot hold
        return None
    return _TIMES_MAGIC + token.encode("ascii") + b"\n" + b"".join(records)


def save(path: str, hidden: dict[str, bool], dirs: dict[str, int], made: float,
         shown: Iterable[str] = ()) -> None:
    """Write the cache, then its directories' times for the compiled reader, both under a
    token drawn now. `shown`: the trees this launch shows; those it holds are named in its
    head, so that a launch showing no other needs none of its times when none changed.
    The times file it replaces is removed first; one that cannot be written leaves none
    (the times are then read in Python), never the launch refused."""
    token = os.urandom(16).hex()
    walked = frozenset(tree for tree in shown if tree in dirs)
    head = marshal.dumps((made, hidden, len(dirs), walked, token, sys.getfilesystemencoding()))
    body = marshal.dumps(dirs)
    times = _times(dirs, token)
    _remove(path + TIMES)
    write_new(path, _MAGIC + len(head).to_bytes(8, "big") + binascii.crc32(head).to_bytes(4, "big")
              + binascii.crc32(body).to_bytes(4, "big") + head + body)
    if times is not None:
        try:
            write_new(path + TIMES, times)
        except OSError:
            pass


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # none there; one that stays is refused by its token


def times_token(path: str) -> str | None:
    """The token the times file at `path` was written with; None where there is none, or
    none the reader would read (then it is written again)."""
    try:
        head = read_own(path, _TIMES_HEAD) or b""
    except OSError:
        return None
    line, found, _ = head.partition(b"\n")
    if not found or not line.startswith(_TIMES_MAGIC):
        return None
    return line[len(_TIMES_MAGIC):].decode("ascii", "replace")


def write_new(path: str, data: bytes) -> None:
    """Write `data` to `path` whole: into a new file of an unguessable name beside it
    (O_EXCL, O_NOFOLLOW: nothing planted there is written through), then renamed."""
    temporary = f"{path}.{os.urandom(8).hex()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with open(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


@record
class Prefetched:
    """The cache as read from `path` (None: none, or unreadable), which of its directories'
    times changed since (None: it is too old to refresh, and is rebuilt), whether its
    times file is missing, another cache's or one the reader refused (the walk then
    writes it again), and its directories' times where they were loaded here (a change
    found, or the times read in Python)."""

    path: str
    cache: Cache | None
    changed: frozenset[str] | None
    times_stale: bool = False
    dirs: dict[str, int] | None = None


def prefetch(path: str) -> Prefetched:
    """Read the cache and the time of every directory it holds, before the plan: what
    rootonly.private_paths would do first, whatever the plan says. The compiled reader
    reads the times while the cache's head loads; where it could not, they are read
    here. Where the reader found nothing changed, the cache's own times are not loaded."""
    from claude_sandbox.launch.facts import dirtimes  # the walk's alone (ADR 0020)

    reading = dirtimes.start(path + TIMES) if os.path.exists(path + TIMES) else None
    cache = read(path)
    if cache is None or not cache.count or not fresh(cache.made, time.time()):
        if reading is not None:
            dirtimes.cancel(reading)
        return Prefetched(path, cache, None, times_stale=True)
    if reading is not None:
        found, refused = dirtimes.finish(reading, cache.token, cache.count)
        if found == set():
            return Prefetched(path, cache, frozenset())
        # Every path it names is one of the cache's: any other and the answer is not
        # this cache's, whatever its token says.
        dirs = directories(cache) if found else None
        if dirs is not None and found is not None and found <= dirs.keys():
            return Prefetched(path, cache, frozenset(found), dirs=dirs)
        stale = refused or found is not None
    else:
        stale = times_token(path + TIMES) != cache.token  # no reader: only whether it is ours
    dirs = directories(cache)
    if dirs is None:
        return Prefetched(path, None, None, times_stale=True)
    return Prefetched(path, cache, frozenset(dirtimes.changed(list(dirs), dirs)), stale,
                      dirs)


def remove(path: str) -> None:
    """The cache at `path`, its times and its memos, where a root launch walks no tree
    (ADR 0020): a launch finds none to read early then (run.py)."""
    for name in (path, path + TIMES):
        if os.path.lexists(name):
            os.unlink(name)
    memos = f"{path}.d"
    if os.path.isdir(memos) and not os.path.islink(memos):
        for entry in os.scandir(memos):
            os.unlink(entry.path)  # flat: one memo a directory (rootmemo.py)
        os.rmdir(memos)


def remove_old(store: str) -> None:
    """The caches of earlier versions, with their memos and times files."""
    import shutil

    for name in OLD_CACHES:
        for path in (os.path.join(store, name), os.path.join(store, f"{name}.d"),
                     os.path.join(store, name + TIMES)):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
