"""After the session: name, by class, what it left that a program outside could run.

In `live` mode the agent writes the real workspace. When the session ends, this
module walks every writable root and names what the session created or changed
that a program started outside later runs, follows or is steered by: FIFOs and
sockets, links out of the roots, git directories, control files, Python startup
files and bytecode, executables, dot-configuration (the classes in CLASSES).

The walk is complete, not budgeted: a time budget lets an attacker who creates
enough directories (210,000 exhausted one second) push what matters past the
budget, so a cut-short report is a report the attacker wrote. The walk is bounded
by the tree alone and kept fast instead: iterative, links never followed, and at
most one lstat per entry (DirEntry.stat(follow_symlinks=False)).

A change is told by the inode's change time, which no process can set back
(utimensat sets only the access and modification times). A directory the walk
cannot list hides what is below it while git and other programs outside open
the names they know there with search permission alone: a hook the agent wrote
into a nested repository under `chmod 0311 vendor/lib` would run at the user's
next commit there. So such a directory of ours is given its owner's read and
search bits, named with the mode it had, and walked like any other; one that
cannot be opened so is named for itself when the session changed it.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core.record import record
from claude_sandbox.launch.overlay import gitrepo
from claude_sandbox.launch.overlay.controlexit import quote  # shlex (and re) only when used

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence
    from typing import Protocol

    Listing = list[tuple[os.DirEntry[str], os.stat_result]]

    class Adder(Protocol):
        def __call__(self, path: str, kind: str, note: str = "") -> None: ...

CLASSES: tuple[tuple[str, str], ...] = (
    ("special", "a FIFO, socket or device"),
    ("unreadable", "a directory that could not be listed: what is in it was hidden from "
                   "review"),
    ("link-out", "a symbolic link to outside the writable roots"),
    ("git", "a git directory or .git file, with its own config and hooks"),
    ("control", "a file that an agent, editor or tool loads as project settings"),
    ("python-startup", "a file that Python or a shell runs at start"),
    ("bytecode", "compiled Python, run in place of its source"),
    ("executable", "a regular file with an execute bit"),
    ("dot-config", "a dot file or a file in a dot directory, read as configuration"),
)
_RANK = {kind: rank for rank, (kind, _) in enumerate(CLASSES)}
# (one, many, what to do): the rest of each report line.
_WORDS = {
    "special": ("special file", "special files",
                "review {it} before a program outside opens {it}: it blocks or talks to the agent"),
    "unreadable": ("unreadable directory", "unreadable directories",
                   "review what is in {it} (made readable first where the walk could not) "
                   "before a program outside opens anything there"),
    "link-out": ("symbolic link", "symbolic links", "review {it} before a program outside "
                 "follows {it}"),
    "git": ("git repository", "git repositories", "review {it} before running git there outside"),
    "control": ("control file", "control files", "review {it} before running the agent, "
                "editor or tool outside there"),
    "python-startup": ("Python startup file", "Python startup files",
                       "review {it} before running that Python or shell outside"),
    "bytecode": ("bytecode file", "bytecode files", "review {it} before running Python there "
                 "outside"),
    "executable": ("executable file", "executable files",
                   "review {it} before running {it} outside"),
    "dot-config": ("configuration file", "configuration files",
                   "review {it} before running tools outside there"),
}
_SPECIAL = stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR, stat.S_IFBLK
_STARTUP = frozenset({"sitecustomize.py", "usercustomize.py", "pyvenv.cfg"})
# Project files, at any depth, that make a tool run a program they name: a bun
# preload, a pnpm hook, yarn's yarnPath, a git-hook manager's hooks, mise's tasks and
# hooks, a toolchain file's path. Named as control files, not held: editing them is
# ordinary work, and the session-end report says they changed.
_TOOL_CONFIG = frozenset({"bunfig.toml", ".pnpmfile.cjs", ".yarnrc.yml", ".yarnrc",
                          "lefthook.yml", ".lefthook.yml", ".pre-commit-config.yaml",
                          "mise.toml", ".mise.toml", "rust-toolchain.toml", "rust-toolchain",
                          ".npmrc", ".lfsconfig", ".pdbrc"})
_EXEC_BITS = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


@record
class Finding:
    """One entry the session created or changed. `path` is relative to the root when
    scan() was given one root (report_lines has no roots to relativize against), else
    absolute. `note`: what the walk did about it, where it did anything (an unreadable
    directory's mode changed, or left as it was and so not checked below)."""

    path: str
    kind: str
    note: str = ""


def scan(roots: Sequence[str], since_ns: int, control_names: frozenset[str]) -> tuple[Finding, ...]:
    """Every root walked completely, links never followed; each entry changed since
    `since_ns` given the first class that fits; ordered by class, then path.

    A .git directory or bare repository is named, not entered, for anything changed in
    it at any depth; a control directory is named once for anything changed in it; a
    directory of ours that cannot be listed is made listable, named with its old mode, and
    walked; one that still cannot be is named when the session changed it."""
    walked: list[tuple[str, int]] = []
    for root in roots:
        root = os.path.abspath(root)
        try:
            info = os.lstat(root)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):  # a root that is a link is not followed
            walked.append((root, info.st_ctime_ns))
    # "Inside" is tested both ways: lexically, as the link reads, and as the kernel
    # resolves it, since a directory link on the way can climb out unseen lexically.
    lexical = tuple(r.rstrip("/") + "/" for r, _ in walked)
    real = tuple(os.path.realpath(r).rstrip("/") + "/" for r, _ in walked)
    found: dict[str, int] = {}  # absolute path -> rank; a path reached twice keeps its first
    notes: dict[str, str] = {}

    def add(path: str, kind: str, note: str = "") -> None:
        found[path] = min(found.get(path, len(CLASSES)), _RANK[kind])
        if note:
            notes[path] = note

    for root, ctime in walked:
        _walk(root, ctime, since_ns, control_names, (lexical, real), add)
    cut = len(walked[0][0].rstrip("/")) + 1 if len(roots) == 1 and walked else 0
    ranked = sorted((rank, path) for path, rank in found.items())
    return tuple(Finding((path[cut:] or ".") if cut else path, CLASSES[rank][0],
                         notes.get(path, "")) for rank, path in ranked)


def _walk(root: str, root_ctime: int, since_ns: int, control_names: frozenset[str],
          inside: tuple[tuple[str, ...], tuple[str, ...]], add: Adder) -> None:
    # (directory, its ctime, the control directory it lies in, below a dot directory,
    # named .git). Iterative: a deep tree must not exhaust the interpreter's stack.
    stack = [(root, root_ctime, "", False, False)]
    while stack:
        directory, ctime, owner, dotted, dotgit = stack.pop()
        entries, note, named = _listed(directory, ctime >= since_ns)
        git = dotgit or (entries is not None and git_directory([e.name for e, _ in entries]))
        if named and (owner or not git):  # a git directory's own finding carries the note
            add(directory, "unreadable", note)
        if git:
            # Not descended for classes (another module checks repositories); named
            # when anything in it changed, at any depth: git follows a link in logs/,
            # runs a hook rewritten in place, reads a submodule's config in modules/,
            # and each changes only its own directory's ctime. One that could not be
            # listed is named too: what it held could not be told.
            if note or ctime >= since_ns or _git_changed(entries, since_ns, add):
                # One inside a control directory is a repository all the same: only a
                # "git" finding reaches check_made, and git outside runs its hooks.
                add(directory, "git", note)
                if owner and owner != directory:
                    add(owner, "control")
            continue
        if entries is None:
            continue
        if owner == directory and ctime >= since_ns:
            add(owner, "control")  # reported once, as the directory
        for entry, info in entries:
            name, mode, changed = entry.name, info.st_mode, info.st_ctime_ns >= since_ns
            if owner:
                # Named once, as the directory; walked on only for repositories below.
                if changed:
                    add(owner, "control")
                if stat.S_ISDIR(mode):
                    stack.append((entry.path, info.st_ctime_ns, owner, dotted, name == ".git"))
                continue
            if stat.S_ISDIR(mode):
                own = entry.path if name in control_names and name != ".git" else ""
                stack.append((entry.path, info.st_ctime_ns, own,
                              dotted or name.startswith("."), name == ".git"))
            elif changed:
                kind = _classify(entry.path, name, mode, dotted, control_names, inside)
                if kind:
                    add(entry.path, kind)


def _listing(directory: str) -> Listing | None:
    """The entries of `directory` with their lstat; None when it cannot be listed.

    Only a directory gone since its parent was listed counts as empty: one that refuses
    to be listed (mode 0311, say) still lets git open the names it knows in it. One
    whose entries cannot be looked at (mode 0600) cannot be listed either: its names
    alone tell nothing, and `chmod u+x` outside makes what is there usable."""
    listed: Listing = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    listed.append((entry, entry.stat(follow_symlinks=False)))
                except FileNotFoundError:
                    pass  # removed while we listed: nothing left to report
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError:
        return None
    return listed


def _listed(directory: str, changed: bool) -> tuple[Listing | None, str, bool]:
    """(the entries of `directory`, a note for the report, whether to name it as
    unreadable). A directory of ours that cannot be listed is opened up and listed again:
    an agent that takes the read bit away must not hide a repository below it from the
    checks. It is named whenever its mode was changed, so the user can put it back."""
    entries = _listing(directory)
    if entries is not None:
        return entries, "", False
    modes = _open_up(directory)
    entries = _listing(directory) if modes else None
    return entries, _unlisted_note(directory, modes, entries is not None), bool(modes) or changed


def _open_up(directory: str) -> tuple[int, int] | None:
    """(old mode, new mode) once `directory`, ours, has its owner's read and search bits;
    None when it is not a directory of ours, already has them, or cannot be changed."""
    mode = gitrepo.add_mode(directory, 0o500, own_only=True)
    return None if mode is None else (mode, mode | 0o500)


def _unlisted_note(directory: str, modes: tuple[int, int] | None, listed: bool) -> str:
    if modes is None:
        return "it could not be listed or made listable: nothing below it could be checked"
    old, new = modes
    done = ("so that what it holds was checked" if listed else
            "and still it could not be listed: nothing below it could be checked")
    return (f"its mode {old:04o} was made {new:04o} {done}; to put it back: "
            f"chmod {old:04o} {quote(directory)}")


def git_directory(names: Collection[str]) -> bool:
    """git's test for a git directory (setup.c, is_git_directory), on the names in it
    alone and so wider than git's: an entry HEAD, and an entry commondir or entries
    objects and refs, each of any type.

    git takes a HEAD that is a link into refs/, objects and refs that it may search
    (access X_OK: a link to a directory does), or a commondir naming where they are.
    Any narrower test (a regular HEAD, real directories) lets a plant that git still
    takes pass unnamed: this one is meant for every caller that holds the names."""
    if len(names) < 2:
        return False  # most directories: no set to build
    held = set(names)
    return "HEAD" in held and ("commondir" in held or ("objects" in held and "refs" in held))


def _git_changed(entries: Listing | None, since_ns: int, add: Adder) -> bool:
    """Anything in a git directory changed since `since_ns`, at any depth, or a directory
    in it that cannot be listed (what git would find there cannot be told). Each
    directory's entries are checked before any below them: one the session used stops
    the walk at its top level. A directory of ours in it that cannot be listed is opened
    up as in the workspace, and named with its old mode; the git directory is then named
    too, so that the check after the session judges what it hid."""
    listed, below = entries, []
    while True:
        if listed is None:
            return True
        for entry, info in listed:
            if info.st_ctime_ns >= since_ns:
                return True
            if stat.S_ISDIR(info.st_mode):
                below.append(entry.path)
        if not below:
            return False
        directory = below.pop()
        listed, note, named = _listed(directory, False)
        if named:
            add(directory, "unreadable", note)
            return True


def _classify(path: str, name: str, mode: int, dotted: bool,
              control_names: frozenset[str],
              inside: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """The first class a changed non-directory entry fits, or "" for ordinary source."""
    if stat.S_IFMT(mode) in _SPECIAL:
        return "special"
    if stat.S_ISLNK(mode) and _points_out(path, inside):
        return "link-out"
    return name_class(path, name, mode, dotted, control_names)


def name_class(path: str, name: str, mode: int, dotted: bool,
               control_names: frozenset[str]) -> str:
    """The classes told by the name and the mode bits: git, control, python-startup,
    bytecode, executable, dot-config; "" for ordinary source. They hold for a link
    inside too: a program that opens the name follows it."""
    if name == ".git":
        return "git"
    if name in control_names or name in _TOOL_CONFIG:
        return "control"
    activate = name == "activate" or name.startswith("activate.") or name == "Activate.ps1"
    if name.endswith(".pth") or name in _STARTUP or (
            activate and os.path.basename(os.path.dirname(path)) in ("bin", "Scripts")):
        return "python-startup"
    if name.endswith((".pyc", ".pyo")):
        return "bytecode"
    if not stat.S_ISREG(mode):
        return ""  # a link's mode bits mean nothing; its target is reported on its own
    if mode & _EXEC_BITS:
        return "executable"
    if dotted or name.startswith("."):
        return "dot-config"
    return ""


def _points_out(path: str, inside: tuple[tuple[str, ...], tuple[str, ...]]) -> bool:
    try:
        target = os.readlink(path)
    except OSError:
        return False  # gone since we listed it
    lexical = os.path.normpath(os.path.join(os.path.dirname(path), target))
    real = os.path.realpath(path)
    return not (lexical + "/").startswith(inside[0]) or not (real + "/").startswith(inside[1])


def report_lines(findings: Sequence[Finding], full_list: str | None,
                 limit: int = 10) -> list[str]:
    """One line per class with findings, each path with its note; the complete list written
    to `full_list` when a line had to be cut."""
    by_kind: dict[str, list[str]] = {}
    for finding in findings:
        by_kind.setdefault(finding.kind, []).append(_named(finding))
    cut = any(len(paths) > limit for paths in by_kind.values())
    written = bool(full_list) and cut and _write_full_list(full_list or "", findings)
    lines = []
    for kind, meaning in CLASSES:
        paths = by_kind.get(kind)
        if not paths:
            continue
        one, many, advice = _WORDS[kind]
        named = ", ".join(paths[:limit])
        if len(paths) > limit:
            named += f" and {len(paths) - limit} more"
            if written:
                named += f" (all {len(paths)} in {full_list})"
        count = f"1 {one}" if len(paths) == 1 else f"{len(paths)} {many}"
        it = "it" if len(paths) == 1 else "them"
        lines.append(f"the session created or changed {count} ({meaning}): {named}; "
                     + advice.format(it=it))
    return lines


def _named(finding: Finding) -> str:
    return _shown(finding.path) + (f" ({_shown(finding.note)})" if finding.note else "")


def _shown(path: str) -> str:
    """The path, with control characters escaped: a name must not drive the terminal."""
    return path if path.isprintable() else path.encode("unicode_escape").decode("ascii")


def _write_full_list(full_list: str, findings: Sequence[Finding]) -> bool:
    """Write `kind<TAB>path[<TAB>note]` lines, 0600, never through a link: a fresh `.part`
    file (O_EXCL, O_NOFOLLOW) renamed over the name, which replaces a link rather than
    follow it."""
    part = full_list + ".part"
    try:
        try:
            os.unlink(part)  # a stale one from an earlier run; unlink does not follow links
        except FileNotFoundError:
            pass
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with open(fd, "w", encoding="utf-8") as out:
            os.fchmod(fd, 0o600)  # whatever the umask
            for f in findings:
                note = f"\t{_shown(f.note)}" if f.note else ""
                out.write(f"{f.kind}\t{_shown(f.path)}{note}\n")
        os.replace(part, full_list)
    except OSError:
        return False  # the lines then name no file
    return True
