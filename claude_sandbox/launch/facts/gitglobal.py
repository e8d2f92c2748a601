"""user.name and user.email from git's global configuration files, read without starting
git where every line of them is of a form this reader knows; None where one is not, and
git reads them (gitconfig._git_identity).

git started for these two values cost every launch whose user keeps a ~/.gitconfig a
process and 2-3 ms (docs/adr/0004-launch-cost.md). The reader is strict, not complete:
git's answer stays the one a launch uses for anything this reader does not know the
form of: an include, a section header with anything after it, a key that is not a plain
name, an escape other than git's five, a line continued by a backslash, an unclosed
quote, a tab after text outside quotes, a control character, bytes that are not UTF-8,
a byte order mark, a file that is not a regular file or is larger than LIMIT.
tests/unit/test_gitglobal.py compares its answers with git's on a corpus and on files
mutated at random.

The file is the one `git config --global` reads: $HOME/.gitconfig where there is one,
else $HOME/.config/git/config (git's XDG file, as XDG_CONFIG_HOME is unset for it).
"""

from __future__ import annotations

import errno
import os
import stat

LIMIT = 1 << 16
FILES = (".gitconfig", ".config/git/config")  # the first there is
WANTED = ("name", "email")
# git's escapes in a value; any other is an error in git.
_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}
_SPACE = " \t"
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def read(home: str) -> dict[str, str] | None:
    """{"user.name": ..., "user.email": ...} as far as set (a value that is empty or holds
    a newline is passed over, as the launch does with git's answer); None where git must
    read the files."""
    found: dict[str, str] = {}
    for relative in FILES:
        text = _text(os.path.join(home, relative))
        if text is None or not _parse(text, found):
            return None
        if text or os.path.exists(os.path.join(home, relative)):
            break  # an empty ~/.gitconfig is still the one git reads; a dangling link not
    return found


def _text(path: str) -> str | None:
    """The file's text; "" where there is none; None where it is not a plain text file."""
    try:
        # Not blocking: a FIFO in its place is left to git (and to capture's timeout).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        return "" if error.errno == errno.ENOENT else None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > LIMIT:
            return None
        data = b""
        while len(data) <= LIMIT:  # a read may return less than asked (a FUSE file)
            chunk = os.read(fd, LIMIT + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(data) > LIMIT or any((ord(c) < 32 and c not in "\t\n") or c in "\x7f\ufeff"
                                for c in text):
        return None
    return text


def _parse(text: str, found: dict[str, str]) -> bool:
    """Add the user's values in `text` to `found`; False at a line of a form not known."""
    section: str | None = None
    for line in text.split("\n"):
        stripped = line.strip(_SPACE)
        if not stripped or stripped[0] in "#;":
            continue
        if stripped[0] == "[":
            section = _section(stripped)
            if section is None or section.split(" ", 1)[0] in ("include", "includeif"):
                return False
            continue
        key, equals, raw = stripped.partition("=")
        key = key.rstrip(_SPACE)
        if section is None or not _plain_name(key):
            return False  # git refuses a key before any section, or a malformed one
        value = _value(raw) if equals else ""  # a bare key: git's boolean true
        if value is None:
            return False
        if section == "user" and key.lower() in WANTED and value and "\n" not in value:
            found[f"user.{key.lower()}"] = value
    return True


def _plain_name(name: str) -> bool:
    """A key or section name as git has it: a letter (for a key), letters, digits, '-'."""
    return bool(name) and name[0].isascii() and name[0].isalpha() and all(
        c in _NAME_CHARS for c in name)


def _section(header: str) -> str | None:
    """`[name]` or `[name "subsection"]`, alone on its line but for a comment: the name
    lowercased ("name sub" with a subsection, which never names the user's section);
    None for any other form."""
    body, closed, rest = header[1:].partition("]")
    rest = rest.lstrip(_SPACE)
    if not closed or (rest and rest[0] not in "#;"):
        return None
    name, space, sub = body.partition(" ")
    if not name or not all(c in _NAME_CHARS for c in name):
        return None
    if not space:
        return name.lower()
    sub = sub.lstrip(_SPACE)
    # A quoted subsection with no quote or backslash inside: any other form is git's.
    if len(sub) < 2 or sub[0] != '"' or sub[-1] != '"' or any(c in '"\\' for c in sub[1:-1]):
        return None
    return f"{name.lower()} sub"


def _value(raw: str) -> str | None:
    """A value as git reads it: leading and trailing blanks outside quotes dropped,
    quotes removed, escapes replaced, a comment cut off; None where git would refuse it,
    the line goes on to the next, or a tab follows text outside quotes (git's versions
    read that differently)."""
    chars: list[str] = []
    trailing = 0  # blanks outside quotes at the end of `chars`: dropped if nothing follows
    quoted = False
    position = 0
    while position < len(raw):
        c = raw[position]
        position += 1
        if c == "\\":
            if position == len(raw) or raw[position] not in _ESCAPES:
                return None  # a continuation, or an escape git refuses
            chars.append(_ESCAPES[raw[position]])
            position += 1
            trailing = 0
        elif c == '"':
            quoted = not quoted
            trailing = 0
        elif not quoted and c in "#;":
            break
        elif not quoted and c == "\t" and chars:
            # git before 2.45 reads it as a space, later ones keep it: git's to say.
            return None
        elif not quoted and c in _SPACE:
            if chars:  # leading blanks are not kept
                chars.append(c)
                trailing += 1
        else:
            chars.append(c)
            trailing = 0
    if quoted:
        return None
    return "".join(chars[:len(chars) - trailing])
