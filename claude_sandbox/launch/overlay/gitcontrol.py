"""Control files reached through git: a ref or an index that would bring one out waits.

Inside, an existing control file (controlfiles.py) is read-only, or an overlay view whose
copy stays in the store: the file outside never changes. But git records what the
agent's view holds. A commit of that copy, or the copy staged in the index, applied to
the real repository puts its content one `git checkout .`, `git stash`, `git reset
--hard` or merge away from the worktree, where the program that runs it (direnv, a hook
manager, an editor) finds it. So before the session's git is applied:

- each ref the session moved to an object not reachable at launch: every commit it adds
  is read (`git log --full-history -m`, limited to control names at any depth, the class
  the session-end report uses, case folded, and to the paths the launch held through
  links), and so is every submodule commit a gitlink there moves to, in that
  submodule's git directory. One that changes a control file leaves the ref where it
  was; the session's value is kept under refs/claude-sandbox/held/ and named, with the
  commands to review it and take it. Nothing there is ever a known value, and nothing
  may name it. A detached HEAD is read the same way, and so are the commits state files
  and reflogs name (gitstate.py);
- an index whose entries under a control name are not the launch's is not applied, and
  is kept with what else the session's git wrote and was not applied.

git reads the objects the applier has already copied (regular files only) through a git
directory of our own, empty but for HEAD: no configuration, hook, replace ref or
alternate the session wrote is read, nothing is fetched. Where git cannot tell (none
installed, a timeout, a value that is not a commit or that git cannot read), the ref
waits too (docs/adr/0010-the-workspace-exit.md).
"""

from __future__ import annotations

import os
import time

from claude_sandbox.core import paths
from claude_sandbox.core.spawn import capture
from claude_sandbox.launch.overlay import gitrepo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from claude_sandbox.launch.overlay.gitbudget import ExitBudget

OURS = "refs/claude-sandbox/"  # what the exit keeps aside, unread: never a known value
HELD = OURS + "held/"
TIMEOUT = 60.0  # seconds for one git run: a long history waits rather than pass unread
DEADLINE = 120.0  # seconds for one repository in all, past which every value waits
MOST = 1000  # distinct values read for one repository; past them every value waits
OUTPUT = 64 << 20  # bytes of one git run's answer: a larger one cannot be told, and waits
# Escaped in an operator's name: wildmatch's special characters (not `re`: the launch
# path imports this module, and `re` costs milliseconds at every launch).
_GLOB = str.maketrans({c: "\\" + c for c in "*?[\\"})
_SHOWN = 5  # control paths named in one line


def is_control(path: str, names: frozenset[str]) -> bool:
    """Whether a tree path (/-separated) is a control path: one with a control name as
    any of its parts, or at or below one of `names` that holds a `/` (a path the launch
    held through a link, relative to the repository's top). Case is folded: git on a
    case-insensitive file system writes `.ENVRC` as `.envrc`."""
    folded = path.lower()
    lowered = {name.lower() for name in names}
    return any(part in lowered for part in folded.split("/")) or any(
        folded == name or folded.startswith(name + "/") for name in lowered if "/" in name)


def pathspecs(names: Iterable[str]) -> list[str]:
    """git pathspecs for every control name at any depth and every held path, and what
    lies below each, case folded."""
    found = []
    for name in sorted(names):
        literal = name.translate(_GLOB)
        if "/" in name:
            found += [f":(glob,icase){literal}", f":(glob,icase){literal}/**"]
        else:
            found += [f":(glob,icase)**/{literal}", f":(glob,icase)**/{literal}/**"]
    return found


def held_paths(held: Iterable[str], top: str) -> frozenset[str]:
    """The absolute paths the launch held (control paths, the targets of links to them),
    relative to `top`, the repository's working tree."""
    return frozenset(os.path.relpath(path, top) for path in held
                     if path.startswith(top.rstrip("/") + "/"))


def own_gitdir(prefix: str, sha256: bool, shallow: str | None = None) -> str:
    """An empty git directory of our own in `prefix` (HEAD, refs/, the object format, a
    shallow list): git run there reads no configuration, hook or ref of a repository."""
    os.mkdir(os.path.join(prefix, "refs"))
    _write(os.path.join(prefix, "HEAD"), "ref: refs/heads/none\n")
    if sha256:
        _write(os.path.join(prefix, "config"), "[core]\n\trepositoryformatversion = 1\n"
               "[extensions]\n\tobjectformat = sha256\n")
    if shallow:
        _write(os.path.join(prefix, "shallow"), shallow)
    return prefix


def own_env(own: str, objects: str) -> dict[str, str]:
    """git's environment in `own` over the object directory `objects`: no system or user
    configuration, no replace refs, nothing fetched, no prompt."""
    return {"PATH": ":".join(paths.SYSTEM_DIRS), "HOME": own, "GIT_DIR": own,
            "GIT_OBJECT_DIRECTORY": objects, "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull, "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_NO_LAZY_FETCH": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


class History:
    """git, over the real git directory `real`'s objects, in a git directory of our own.

    `known`: every ref's value at launch but the sandbox's own (refs/claude-sandbox/,
    where values wait unread: known, they would pass unread at the next session). What
    git found is kept by value; past DEADLINE seconds in all, or past MOST values, every
    value not yet read waits."""

    def __init__(self, real: str, known: Iterable[tuple[str, str]], *, sha256: bool = False,
                 top: str = "", spend: ExitBudget | None = None) -> None:
        self.real = real
        self.sha256 = sha256  # the repository's object format: ids of the other length
        # name no object of it, and are read as values git cannot read
        self.top = top  # its working tree, where a submodule not absorbed has its .git
        self.git = paths.find_tool("git")
        self._known = sorted({value for name, value in known if not name.lower().startswith(
            OURS) and gitrepo.is_object_id(value)})
        self._present: list[str] | None = None
        self._found: dict[str, tuple[str, ...] | None] = {}
        self.modules: dict[str, History] = {}  # a submodule's, by its path in the tree
        self._complete: dict[str, bool] = {}  # complete(): by the values asked
        self._spent = 0.0
        self._shared = spend  # the whole application's clock (gitbudget.py)
        # Read before anything is applied: the session's own shallow list is not ours.
        self._shallow = gitrepo.read_small(os.path.join(real, "shallow"), 64 << 20)

    def _run(self, own: str, args: list[str], lines: Iterable[str]) -> tuple[int, str]:
        left = DEADLINE - self._spent
        if self._shared is not None:
            left = min(left, self._shared.left())
        if self.git is None or left <= 0:
            return 127, ""
        with open(os.path.join(own, "input"), "w", encoding="utf-8",
                  errors="surrogateescape") as handle:
            handle.write("".join(f"{line}\n" for line in lines))
        env = own_env(own, os.path.join(self.real, "objects"))
        fd = os.open(os.path.join(own, "input"), os.O_RDONLY | os.O_CLOEXEC)
        started = time.monotonic()
        try:
            return capture([self.git, "--no-pager", *args], env, stdin=fd,
                           timeout=max(1.0, min(TIMEOUT, left)),
                           limit=OUTPUT)
        finally:
            os.close(fd)
            self._spent += time.monotonic() - started

    def _own(self, prefix: str, sha256: bool) -> str:
        # A shallow clone's boundary: without it git walks to parents it does not have.
        return own_gitdir(prefix, sha256, self._shallow)

    def _negatives(self, own: str) -> list[str] | None:
        """The values known at launch that name an object: git refuses a negative it
        cannot read (a broken ref)."""
        if self._present is None:
            status, out = self._run(own, ["cat-file", "--batch-check=%(objectname) "
                                          "%(objecttype)"], self._known)
            if status != 0:
                return None
            self._present = [line.split()[0] for line in out.splitlines()
                             if len(line.split()) == 2 and line.split()[1] != "missing"]
        return self._present

    def _log(self, values: list[str], names: frozenset[str]) -> tuple[str, ...] | None:
        """The control paths the commits reachable from `values`, and from nothing known,
        change; None where git cannot tell."""
        import tempfile  # here: the launch path imports this module, and rarely needs it

        with tempfile.TemporaryDirectory(prefix="csbx-gitcontrol-") as prefix:
            own = self._own(prefix, self.sha256)
            negatives = self._negatives(own)
            if negatives is None:
                return None
            # ^{commit}: a tree, a blob or a missing object is refused, never read as empty.
            status, out = self._run(own, ["log", "--stdin", "--format=", "--name-only", "-z",
                                          "--full-history", "-m", "--no-renames",
                                          "--no-ext-diff", "--no-textconv", "--",
                                          *pathspecs(names)],
                                    [*(f"{v}^{{commit}}" for v in values),
                                     *(f"^{k}" for k in negatives)])
            if status != 0 or not self.complete(values):
                return None
            found = tuple(dict.fromkeys(p.strip("\n") for p in out.split("\0")
                                        if p.strip("\n") and is_control(p.strip("\n"), names)))
            linked = self._gitlinks(own, values, names)
            return None if linked is None else (*found, *linked)
        return found

    def _gitlinks(self, own: str, values: list[str],
                  names: frozenset[str]) -> tuple[str, ...] | None:
        """The control paths inside the submodules the new commits move (`git submodule
        update` checks the new commit out there), read in each one's git directory under
        modules/, by its path, known as it was at launch (`self.modules`, where the session
        changed it). None where the submodule's git directory is not found by its path
        (renamed): it cannot be read."""
        status, out = self._run(own, ["log", "--stdin", "--format=", "--raw", "-z",
                                      "--no-abbrev", "--full-history", "-m", "--no-renames"],
                                [*(f"{v}^{{commit}}" for v in values),
                                 *(f"^{k}" for k in self._present or ())])
        if status != 0:
            return None
        fields = [f.strip("\n") for f in out.split("\0")]
        found: list[str] = []
        for at, field in enumerate(fields[:-1]):
            parts = field.split()
            if field.startswith(":") and len(parts) >= 4 and parts[1] == "160000":
                path, commit = fields[at + 1], parts[3]
                module = self.module(path)
                inside = None if module is None else module.changes(commit, names)
                if inside is None:
                    return None
                found += [f"{path}/{p}" for p in inside]
        return tuple(found)

    def module(self, path: str) -> History | None:
        """A submodule's git directory, absorbed (modules/PATH) or in its own working
        tree (PATH/.git); None where neither is a directory."""
        if path not in self.modules:
            module = os.path.join(self.real, "modules", path)
            if not gitrepo.real_dir(module):
                module = os.path.join(self.top, path, ".git") if self.top else ""
            if not module or not gitrepo.real_dir(module):
                return None
            head = (gitrepo.read_small(os.path.join(module, "HEAD")) or "").strip()
            self.modules[path] = History(module, [*gitrepo.all_refs(module).items(),
                                                  ("HEAD", head)], sha256=self.sha256,
                                         top=os.path.join(self.top, path) if self.top else "",
                                         spend=self._shared)
        return self.modules[path]

    def read(self, values: Iterable[str], names: frozenset[str]) -> None:
        """Read `values` together: where their new commits change no control file (the
        common case), one git run clears them all; otherwise each is read alone."""
        size = 64 if self.sha256 else 40
        new = sorted({v for v in values if v not in self._known and v not in self._found
                      and len(v) == size})
        if len(self._found) + len(new) > MOST:
            new = new[:max(0, MOST - len(self._found))]
        if new and self._log(new, names) == ():
            self._found.update((v, ()) for v in new)

    @property
    def shallow(self) -> str | None:
        """The repository's shallow list before the session's was applied."""
        return self._shallow

    def unknown(self, value: str) -> bool:
        """Whether `value` names a commit reachable from no value known at launch (one
        the session made or fetched); False where git cannot tell."""
        if value in self._known or len(value) != (64 if self.sha256 else 40):
            return False
        import tempfile

        with tempfile.TemporaryDirectory(prefix="csbx-gitcontrol-") as prefix:
            own = self._own(prefix, self.sha256)
            if self._negatives(own) is None:
                return False
            status, out = self._run(own, ["rev-list", "--stdin", "-1"],
                                    [f"{value}^{{commit}}",
                                     *(f"^{k}" for k in self._present or ())])
        return status == 0 and out.strip() == value

    def complete(self, values: Iterable[str]) -> bool:
        """Whether every object `values` name, and every object they reach beyond what
        was known at launch, blobs included, is in the repository: a ref to a commit whose
        tree or blob is missing (one the agent made up, or one whose objects were not
        carried) makes `git gc`, `git fsck` and a checkout of it fail outside. False where
        git cannot tell."""
        wanted = sorted(set(values))
        if not wanted:
            return True
        key = " ".join(wanted)
        if key not in self._complete:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="csbx-gitcontrol-") as prefix:
                own = self._own(prefix, self.sha256)
                negatives = self._negatives(own)
                status = 1 if negatives is None else self._run(
                    own, ["rev-list", "--objects", "--quiet", "--stdin"],
                    [*wanted, *(f"^{k}" for k in negatives)])[0]
            self._complete[key] = status == 0
        return self._complete[key]

    def reaches(self, ancestor: str, descendant: str) -> bool:
        """Whether `ancestor` is `descendant` or one of its ancestors; False where git
        cannot tell."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="csbx-gitcontrol-") as prefix:
            status, _ = self._run(self._own(prefix, self.sha256),
                                  ["merge-base", "--is-ancestor", ancestor, descendant], ())
        return status == 0

    def changes(self, new: str, names: frozenset[str]) -> tuple[str, ...] | None:
        """The control paths that the commits reachable from `new`, and from nothing
        known at launch, change, each once; () for none; None where git cannot tell."""
        if new in self._known:
            return ()
        if len(new) != (64 if self.sha256 else 40):
            return None
        if new not in self._found:
            self._found[new] = None if len(self._found) >= MOST else self._log([new], names)
        return self._found[new]


def held_line(real: str, name: str, keep: str, found: tuple[str, ...] | None, *,
              existed: bool = True) -> str:
    """What the user is told of a ref that waits: why, where its value is, what to run.
    `existed`: the ref was there at launch (what it adds is then read against it)."""
    from claude_sandbox.launch.overlay import gitindex  # it imports `re`: not at launch

    if found is None:
        why = "git could not read the commits it adds (not a commit, or unreadable)"
    else:
        shown = ", ".join(gitindex.shown(p) for p in found[:_SHOWN]) + (
            f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else "")
        why = f"the session's commits change control files ({shown}), which programs " \
              "outside run"
    review = f"git log -p {name}..{keep}" if existed else f"git log -p {keep}"
    # HEAD is detached to the value, never moves the branch it names.
    take = f"git update-ref {'--no-deref ' if name == 'HEAD' else ''}{name} {keep}"
    return (f"{real}: {name} was not moved: {why}; the session's value is kept as {keep} "
            f"(review: {review}; take it: {take})")


def staged_changes(before: bytes | None, after: bytes, names: frozenset[str],
                   history: History | None = None) -> list[str]:
    """The control paths whose staged entry in the index `after` is not the one in
    `before` (the index at launch; None: there was none), read as sha1's and as sha256's
    as git may read either; and, with `history`, the submodules a new gitlink entry
    moves to a commit that changes one (`git submodule update` checks out what the
    index records), or to one that cannot be read."""
    from claude_sandbox.launch.overlay import gitindex  # it imports `re`: not at launch

    found: dict[str, None] = {}
    for hash_size in (20, 32):
        try:
            new = gitindex.staged(after, hash_size=hash_size)
        except gitindex.IndexFormat:
            continue
        try:
            old = gitindex.staged(before, hash_size=hash_size) if before else frozenset()
        except gitindex.IndexFormat:
            old = frozenset()
        found.update((path, None) for path, _oid in sorted(new - old) if is_control(path, names))
        if history is not None:
            moved = gitindex.gitlinks(after, hash_size=hash_size) - old
            for path, commit in sorted(moved):
                module = history.module(path)
                inside = None if module is None else module.changes(commit, names)
                if inside is None:
                    found[f"{path} (a submodule commit git cannot read)"] = None
                found.update((f"{path}/{p}", None) for p in inside or ())
    return list(found)


def _write(path: str, text: str) -> None:
    with open(path, "x", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(text)
