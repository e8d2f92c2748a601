"""Carry an agent's harmless .git/config changes over to the real file, and nothing else.

At the end of a session the launcher compares the agent's copy of a
repository's .git/config with the one the session started from, and writes
into the real file only variables on an allow-list: remotes, upstreams, the
user's identity, submodule URLs and what `git init` writes. Anything git runs
or follows (hooks, includes, fsmonitor, filters, helpers, pagers, aliases,
URL rewrites) stays behind. The launcher never runs git on a repository the
agent could have steered: that git would read the very config in question.
So this module reads git's file syntax itself, as git 2.39 does, judges each
variable, and writes values so that git reads them back unchanged.

Stricter than git, on purpose: a variable before any section (git keeps it
under a dotless name nothing reads) and a NUL anywhere (git silently cuts a
value there) make the whole file a ConfigSyntax.
"""

from __future__ import annotations

from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    Variable = tuple[str, str | None, str]


class ConfigSyntax(ValueError):
    """A config file git would refuse ("bad config line"), or one this module will not take."""


@record
class Entry:
    """One `key = value` of a config file, named as git names it."""

    section: str
    subsection: str | None
    key: str
    value: str | None  # None: a bare key, which git reads as boolean true
    first: int  # 0-based lines of the entry, continuation lines included
    last: int

    @property
    def name(self) -> str:
        return variable_name(self.section, self.subsection, self.key)


@record
class Change:
    """A variable whose values differ between two readings, values in file order."""

    name: str
    section: str
    subsection: str | None
    key: str
    old: tuple[str | None, ...]
    new: tuple[str | None, ...]


def variable_name(section: str, subsection: str | None, key: str) -> str:
    return f"{section}.{key}" if subsection is None else f"{section}.{subsection}.{key}"


def _stem(base: str) -> tuple[str, str | None]:
    # git keeps only the joined name: `[a.b "c"]` and `[a "b.c"]` are one section,
    # and its readers split a name at its first and last dots.
    section, dot, subsection = base.partition(".")
    return section, (subsection if dot else None)


def _keychar(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char == "-")  # git's ctype is ASCII only


class _Reader:
    """git's get_next_char (CRLF reads as LF, the end as LF for ever), and what was read."""

    __slots__ = ("dangling", "entries", "eof", "headers", "line", "pos", "starts", "text")

    def __init__(self, text: str) -> None:
        self.text, self.pos, self.line = text, int(text.startswith("\ufeff")), 0
        self.eof = self.dangling = False  # dangling: the text ends in a value's continuation
        self.entries: list[Entry] = []
        self.starts: list[int] = []  # where each entry's key starts
        self.headers: list[tuple[tuple[str, str | None], int]] = []  # stem, line

    def next(self) -> str:
        text, pos = self.text, self.pos
        if pos >= len(text):
            self.eof = True
            return "\n"
        char = text[pos]
        if char == "\r" and text.startswith("\n", pos + 1):
            pos, char = pos + 1, "\n"
        elif char == "\0":
            raise ConfigSyntax(f"line {self.line + 1}: NUL character")
        self.pos = pos + 1
        self.line += char == "\n"
        return char

    def last_line(self) -> int:  # of the last character read; an LF is on the line it ends
        return self.line - 1 if self.text.endswith("\n", 0, self.pos) else self.line

    def bad(self, what: str = "bad config line") -> ConfigSyntax:
        return ConfigSyntax(f"line {self.last_line() + 1}: {what}")


def parse(text: str) -> tuple[Entry, ...]:
    """The entries of a config file's text, in order; ConfigSyntax where git would stop."""
    return tuple(_scan(text).entries)


def _scan(text: str) -> _Reader:
    reader, base = _Reader(text), None
    while True:
        start, char = reader.pos, reader.next()
        if char == "\n" and reader.eof:
            return reader
        if char in "\n \t\r":
            continue
        if char in "#;":
            while reader.next() != "\n":
                pass
        elif char == "[":
            line, base = reader.line, _section(reader)
            reader.headers.append((_stem(base), line))
        elif not (char.isascii() and char.isalpha()):
            raise reader.bad()
        elif base is None:
            raise reader.bad("a variable before any section")
        else:
            reader.starts.append(start)
            reader.entries.append(_entry(reader, base, char))


def _section(reader: _Reader) -> str:
    name: list[str] = []
    char = reader.next()
    while char != "]" and char not in " \t\n\r":
        if not (_keychar(char) or char == "."):
            raise reader.bad("bad section header")
        name.append(char)
        char = reader.next()
    base = "".join(name).lower()
    if char == "]":
        if not base:
            raise reader.bad("empty section name")
        return base
    while char in " \t\n\r":  # `[section "subsection"]`, on one line
        if char == "\n":
            raise reader.bad("unterminated section header")
        char = reader.next()
    if char != '"':
        raise reader.bad("bad section header")
    name = []
    while (char := reader.next()) != '"':
        if char == "\\":
            char = reader.next()  # git keeps what follows a backslash here: `\x` is `x`
        if char == "\n":
            raise reader.bad("unterminated section header")
        name.append(char)
    if reader.next() != "]":
        raise reader.bad("bad section header")
    return base + "." + "".join(name)


def _entry(reader: _Reader, base: str, char: str) -> Entry:
    first, key = reader.line, [char]
    while _keychar(char := reader.next()):
        key.append(char)
    while char in " \t":
        char = reader.next()
    value = None
    if char != "\n":  # also `key # comment`, which git refuses
        if char != "=":
            raise reader.bad()
        value = _value(reader)
    section, subsection = _stem(base)
    return Entry(section, subsection, "".join(key).lower(), value, first, reader.last_line())


_UNESCAPE = {"n": "\n", "t": "\t", "b": "\b", "\\": "\\", '"': '"'}


def _value(reader: _Reader) -> str:
    out: list[str] = []
    quote = comment = continued = False
    spaces = 0
    while True:
        char = reader.next()
        if char == "\n":
            if quote:
                raise reader.bad("unterminated quote")
            reader.dangling = reader.eof and continued
            return "".join(out)
        if comment:
            continue
        continued = False
        if char in " \t\r" and not quote:
            spaces += bool(out)  # each blank between words reads as a space, none at the ends
        elif char in "#;" and not quote:
            comment = True
        else:
            if spaces:  # before a quote too: `a ""` is "a "
                out.append(" " * spaces)
                spaces = 0
            if char == '"':
                quote = not quote
            elif char != "\\":
                out.append(char)
            elif (char := reader.next()) == "\n":
                continued = True
            elif char in _UNESCAPE:
                out.append(_UNESCAPE[char])
            else:
                raise reader.bad(f"bad escape in a value: \\{char}")


def _values(entries: Sequence[Entry]) -> dict[Variable, list[str | None]]:
    found: dict[Variable, list[str | None]] = {}
    for entry in entries:
        found.setdefault((entry.section, entry.subsection, entry.key), []).append(entry.value)
    return found


def changes(old: Sequence[Entry], new: Sequence[Entry]) -> tuple[Change, ...]:
    """The variables whose values differ, in the order first seen in `new`, then `old`."""
    before, after = _values(old), _values(new)
    found = []
    for variable in [*after, *(v for v in before if v not in after)]:
        was, now = tuple(before.get(variable, ())), tuple(after.get(variable, ()))
        if was != now:
            found.append(Change(variable_name(*variable), *variable, was, now))
    return tuple(found)


_ESCAPE = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\b": "\\b"}


def _line(key: str, value: str | None) -> str:
    if not (key[:1].isascii() and key[:1].isalpha() and all(map(_keychar, key))):
        raise ConfigSyntax(f"cannot write a key named {key!r}")
    if value is None:
        return f"\t{key}\n"
    if "\0" in value:
        raise ConfigSyntax("cannot write a NUL in a value")
    body = "".join(_ESCAPE.get(char, char) for char in value)
    # Unquoted, git drops blanks at the ends, reads a CR as a space and # or ; as a comment.
    if value.strip(" \t\n\r") != value or not value or any(c in value for c in '#;"\r'):
        body = f'"{body}"'
    return f"\t{key} = {body}\n"


def _header(section: str, subsection: str | None) -> str:
    if not all(map(_keychar, section)) or not (section or subsection is not None):
        raise ConfigSyntax(f"cannot write a section named {section!r}")
    if subsection is None:
        return f"[{section}]\n"
    if "\n" in subsection or "\0" in subsection:
        raise ConfigSyntax("cannot write a newline or NUL in a subsection name")
    return '[{} "{}"]\n'.format(section, subsection.replace("\\", "\\\\").replace('"', '\\"'))


def rewrite(text: str, apply: Sequence[Change]) -> str:
    """The real config's `text` with `apply` (one Change per variable) written into it.

    Each variable's entries go and its new values are written at the end of
    its last section, or under a new header at the end; every other line is
    kept byte for byte. A section left empty keeps its header. ConfigSyntax when
    `text` does not parse or a change cannot be written so that git reads it back.
    """
    scan = _scan(text)
    wanted = {(c.section, c.subsection, c.key): c for c in apply}
    kept = [line + "\n" for line in text.split("\n")]
    kept[-1] = kept[-1][:-1]
    for entry, start in zip(scan.entries, scan.starts, strict=True):
        if (entry.section, entry.subsection, entry.key) in wanted:
            kept[entry.first : entry.last + 1] = [""] * (entry.last + 1 - entry.first)
            prefix = text[text.rfind("\n", 0, start) + 1 : start]
            if prefix.strip(" \t\r\ufeff"):  # `[section] key = value`: the header stays
                kept[entry.first] = prefix + "\n"
    # New values go after a section's last entry (or its header), where git puts them; a
    # section that shares its last line with the next header (`[a][b]`) has no such place.
    room: dict[tuple[str, str | None], int] = {}
    entries = iter(scan.entries)
    following = next(entries, None)
    for index, (stem, at) in enumerate(scan.headers):
        end = scan.headers[index + 1][1] if index + 1 < len(scan.headers) else len(kept)
        place = at + 1
        while following is not None and following.first < end:
            place, following = following.last + 1, next(entries, None)
        if end > at:
            room[stem] = place
    inserts: dict[int, list[str]] = {}
    appended: dict[tuple[str, str | None], list[str]] = {}
    for change in wanted.values():
        stem = (change.section, change.subsection)
        lines = [_line(change.key, value) for value in change.new]
        if lines and stem in room:
            inserts.setdefault(room[stem], []).extend(lines)
        elif lines:
            appended.setdefault(stem, [_header(*stem)]).extend(lines)
    last = scan.entries[-1] if scan.entries else None
    if (inserts or appended) and scan.dangling and last and (
            last.section, last.subsection, last.key) not in wanted:
        # The file ends in a backslash that would continue its last value onto ours.
        kept[last.last] += "\n" if kept[last.last].endswith("\n") else "\n\n"
    out = [piece for index, line in enumerate(kept) for piece in (*inserts.pop(index, ()), line)]
    tail = "".join(inserts.pop(len(kept), []) + [line for v in appended.values() for line in v])
    result = "".join(out)
    if tail and result and not result.endswith("\n"):
        result += "\n"
    result += tail
    expected = _values(scan.entries)
    expected.update((variable, list(change.new)) for variable, change in wanted.items())
    # What git will read is checked, not assumed: a slip here would write the real config.
    if _values(parse(result)) != {v: values for v, values in expected.items() if values}:
        raise ConfigSyntax("the rewritten config would not read back as intended")
    return result
