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
cannot list is named for itself when the session changed it: git and other
programs outside open names in it with search permission alone, so what the
agent left there (a link, a hook) works while no review could see it.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    Listing = list[tuple[os.DirEntry[str], os.stat_result]]

CLASSES: tuple[tuple[str, str], ...] = (
    ("special", "a FIFO, socket or device"),
    ("unreadable", "a directory the session left unreadable: what is in it cannot be reviewed"),
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
                   "make {it} readable and review what is in {it} before a program outside "
                   "opens anything there"),
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
    absolute."""

    path: str
    kind: str


def scan(roots: Sequence[str], since_ns: int, control_names: frozenset[str]) -> tuple[Finding, ...]:
    """Every root walked completely, links never followed; each entry changed since
    `since_ns` given the first class that fits; ordered by class, then path.

    A .git directory or bare repository is named, not entered, for anything changed in
    it at any depth; a control directory is named once for anything changed in it; a
    directory that cannot be listed is named when the session changed it."""
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
    for root, ctime in walked:
        _walk(root, ctime, since_ns, control_names, (lexical, real), found)
    cut = len(walked[0][0].rstrip("/")) + 1 if len(roots) == 1 and walked else 0
    ranked = sorted((rank, path) for path, rank in found.items())
    return tuple(Finding((path[cut:] or ".") if cut else path, CLASSES[rank][0])
                 for rank, path in ranked)


def _walk(root: str, root_ctime: int, since_ns: int, control_names: frozenset[str],
          inside: tuple[tuple[str, ...], tuple[str, ...]], found: dict[str, int]) -> None:
    def add(path: str, kind: str) -> None:
        found[path] = min(found.get(path, len(CLASSES)), _RANK[kind])

    # (directory, its ctime, the control directory it lies in, below a dot directory,
    # named .git). Iterative: a deep tree must not exhaust the interpreter's stack.
    stack = [(root, root_ctime, "", False, False)]
    while stack:
        directory, ctime, owner, dotted, dotgit = stack.pop()
        if owner and owner in found:
            continue  # its control directory is named already: nothing more to say
        entries = _listing(directory)
        if dotgit or (entries is not None and git_directory([e.name for e, _ in entries])):
            # Not descended for classes (another module checks repositories); named
            # when anything in it changed, at any depth: git follows a link in logs/,
            # runs a hook rewritten in place, reads a submodule's config in modules/,
            # and each changes only its own directory's ctime.
            if ctime >= since_ns or _git_changed(entries, since_ns):
                add(owner or directory, "control" if owner and owner != directory else "git")
            continue
        if entries is None:
            if ctime >= since_ns:
                add(directory, "unreadable")
            continue
        if owner == directory and ctime >= since_ns:
            add(owner, "control")  # reported once, as the directory
            continue
        for entry, info in entries:
            name, mode, changed = entry.name, info.st_mode, info.st_ctime_ns >= since_ns
            if owner:
                if changed:
                    add(owner, "control")
                    break
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
    to be listed (mode 0311, say) still lets git open the names it knows in it."""
    listed: Listing = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    listed.append((entry, entry.stat(follow_symlinks=False)))
                except OSError:
                    pass  # removed while we listed: nothing left to report
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError:
        return None
    return listed


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


def _git_changed(entries: Listing | None, since_ns: int) -> bool:
    """Anything in a git directory changed since `since_ns`, at any depth, or a directory
    in it that cannot be listed (what git would find there cannot be told). Each
    directory's entries are checked before any below them: one the session used stops
    the walk at its top level."""
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
        listed = _listing(below.pop())


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
    """One line per class with findings; the complete list written to `full_list` when a
    line had to be cut."""
    by_kind: dict[str, list[str]] = {}
    for finding in findings:
        by_kind.setdefault(finding.kind, []).append(_shown(finding.path))
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


def _shown(path: str) -> str:
    """The path, with control characters escaped: a name must not drive the terminal."""
    return path if path.isprintable() else path.encode("unicode_escape").decode("ascii")


def _write_full_list(full_list: str, findings: Sequence[Finding]) -> bool:
    """Write `kind<TAB>path` lines, 0600, never through a link: a fresh `.part` file
    (O_EXCL, O_NOFOLLOW) renamed over the name, which replaces a link rather than follow it."""
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
            out.writelines(f"{f.kind}\t{_shown(f.path)}\n" for f in findings)
        os.replace(part, full_list)
    except OSError:
        return False  # the lines then name no file
    return True
