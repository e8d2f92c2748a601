"""/proc/self/mountinfo, read exactly as the kernel writes it (proc(5)).

One record per "\\n"-ended line, its fields separated by single spaces. In the
two path fields the kernel escapes only space, tab, newline and backslash, as
\\ooo; every other character is written raw, other line breaks (\\r, \\x85,
U+2028) and other white space included. So the file is read without newline
translation and cut on "\\n" and " " only: text mode, str.splitlines() or
str.split() would cut a mount point named with one of those into bogus
records, and could hide a read-write mount from the harsh EXECUTE plan or
make up a mount point that is not there.

Imported by the shim's guard and by `_enter` (harsh, brokered) at every launch: no imports
beyond core/record.py (see landlock.py on why not a dataclass).
"""

from __future__ import annotations

from claude_sandbox.core.record import record


#   dev: "major:minor"; root: the path inside its file system that is mounted.
#   fstype: the file system's type, after the " - " separator.
@record
class Mount:
    dev: str
    root: str
    mountpoint: str
    readonly: bool
    fstype: str = ""

_OCTAL = frozenset("01234567")


def unescape(field: str) -> str:
    if "\\" not in field:  # nearly every field: the loop below is the slow part of a parse
        return field
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and _OCTAL.issuperset(code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def read(path: str = "/proc/self/mountinfo") -> str:
    """The file's text with every byte kept: newline="" because text mode would
    turn a raw \r in a mount point into "\n" and cut the record there, and
    surrogateescape so a path that is not UTF-8 still names the same bytes."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
        return handle.read()


def parse(text: str) -> tuple[Mount, ...]:
    mounts = []
    for line in text.split("\n"):
        fields = line.split(" ")
        if len(fields) < 6:
            continue
        readonly = "ro" in fields[5].split(",")
        separator = fields.index("-", 6) if "-" in fields[6:] else -1
        fstype = fields[separator + 1] if 0 < separator < len(fields) - 1 else ""
        mounts.append(Mount(fields[2], unescape(fields[3]), unescape(fields[4]), readonly,
                            fstype))
    return tuple(mounts)
