"""Workspace control files: what programs outside run or trust, read-only inside.

The workspace is writable by design, but some of its paths are not ordinary
source: git runs hooks and reads its config (core.fsmonitor, core.hooksPath,
aliases, filters), Claude Code starts the MCP servers in .mcp.json and runs
the hooks in .claude/settings.json, VS Code runs tasks, a dev-container
rebuild runs lifecycle commands as the container's root. An agent that writes
one of them leaves code that a program outside runs later (ADR 0005, checks
51-54). The table below names them, with why; the operator can add paths
(`protect`) or leave built-in ones writable (`unprotect`), never from the
environment.

How each is held (all computed here, from facts, as a plan the argv builder
renders):
- an existing path is bound read-only onto itself. A mount point cannot be
  unlinked or renamed, so the agent can neither change it nor swap it;
- every directory between the writable root and a protected path is bound
  onto itself too ("pinned"): otherwise `mv .git .git.old && mkdir .git`
  would move the protection away with the directory;
- an absent path gets a placeholder, created by the launcher before the
  sandbox starts and removed after it ends, so that nothing can be created
  there during the session. Placeholders are empty directories (git ignores
  them, so they are never committed), except inside .git, where git would
  stop on a directory in place of a file: there they are files whose content
  git reads as "nothing changed" (commondir "." names the git directory
  itself; an empty config.worktree sets nothing);
- a protected path that is a symbolic link cannot be held (a mount follows
  the link, and the link itself could be swapped): the launch is refused.

git keeps working inside: commits, branches, checkouts and fetches write
objects, refs, the index and HEAD, which stay writable; what fails is what
would change the configuration (`git config`, `git remote add`, upstream
tracking) and `git init` where the workspace is not a repository.
"""

from __future__ import annotations

import os
import stat

from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.core.record import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence


@record
class Control:
    """One protected path, relative to a writable root, and what stands in when absent."""

    path: str
    why: str
    # What a placeholder is: "dir", or "file" with `content`.
    placeholder: str = "dir"
    content: str = ""
    # An existing directory is read-only as a whole; False: only pinned, so its
    # protected entries (rows of their own) are held and the rest stays writable.
    whole: bool = True


CONTROL: tuple[Control, ...] = (
    Control(".git", "git's own directory: a new one would bring its own config and hooks",
            whole=False),
    Control(".git/config", "git configuration: hooksPath, fsmonitor, aliases, filters and "
            "remotes run programs", placeholder="file"),
    Control(".git/config.worktree", "per-worktree git configuration", placeholder="file"),
    Control(".git/commondir", "moves git's config and hooks to another directory",
            placeholder="file", content=".\n"),
    Control(".git/hooks", "git hooks run on commit, checkout, merge and push"),
    Control(".git/modules", "submodules' git directories, each with its config and hooks"),
    Control(".gitmodules", "submodule URLs that git fetches from"),
    Control(".claude", "Claude Code project settings: hooks, env, MCP servers, commands, skills"),
    Control(".mcp.json", "project MCP servers: programs Claude Code starts"),
    Control(".codex", "Codex project configuration"),
    Control(".pi", "pi project settings and extensions (code pi loads)"),
    Control(".vscode", "VS Code tasks, launch configurations and settings that run programs"),
    Control(".idea", "JetBrains run configurations and external tools"),
    Control(".devcontainer", "dev container lifecycle commands, run as root on a rebuild"),
    Control(".devcontainer.json", "dev container lifecycle commands, run as root on a rebuild"),
    Control(".envrc", "direnv runs it in the user's shell on cd"),
    Control(".pre-commit-config.yaml", "pre-commit: the commands the installed git hook runs"),
    Control(".husky", "husky: the git hooks directory it points core.hooksPath at"),
    *(Control(name, "lefthook: the commands its git hooks run") for name in (
        "lefthook.yml", ".lefthook.yml", "lefthook.yaml", ".lefthook.yaml",
        "lefthook-local.yml")),
    *(Control(name, "mise: tasks, hooks and env it runs on cd") for name in (
        "mise.toml", ".mise.toml", "mise.local.toml", ".mise")),
    Control(".yarnrc.yml", "yarn: yarnPath names the program every `yarn` runs"),
    Control(".cursor", "Cursor's project MCP servers and rules"),
    Control(".gemini", "Gemini CLI's project settings and MCP servers"),
)


@record
class Placeholder:
    path: str  # absolute
    kind: str  # "dir" or "file"
    content: str = ""


@record
class ControlPlan:
    """What the argv builder binds, in order, and what the launcher makes and removes."""

    pinned: tuple[str, ...]  # directories bound read-write onto themselves
    read_only: tuple[str, ...]  # bound read-only onto themselves (placeholders included)
    placeholders: tuple[Placeholder, ...]
    reasons: tuple[tuple[str, str], ...]  # (absolute path, why) for explain


def controls(protect: Sequence[str], unprotect: Sequence[str]) -> tuple[Control, ...]:
    """The built-in table with the operator's additions and removals."""
    dropped = set(unprotect)
    kept = [control for control in CONTROL if control.path not in dropped]
    known = {control.path for control in kept}
    for path in protect:
        if path not in known:
            kept.append(Control(path, "protected by the operator (protect)"))
            known.add(path)
    return tuple(kept)


_KINDS = {stat.S_IFDIR: "dir", stat.S_IFLNK: "link", stat.S_IFREG: "file"}


def probe(paths_: Iterable[str], shared: frozenset[str] = frozenset()) -> dict[str, str | None]:
    """lstat each path: the only file-system reads the planner needs.

    An absent path whose directory this user cannot write, and does not own, is
    "locked": the agent, with the same uid and no capabilities, cannot create it
    and cannot chmod the directory to do so. A path in `shared` holds another live
    session's placeholder (placeholders.made_by_others): absent for this plan too,
    which then holds the same placeholder read-only rather than planning inside it.
    """
    found: dict[str, str | None] = {}
    for path in paths_:
        if path in shared:
            found[path] = None
            continue
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            parent = os.path.dirname(path)
            try:
                ours = os.stat(parent).st_uid == os.getuid()
            except OSError:
                ours = False
            writable = os.path.isdir(parent) and (ours or os.access(parent, os.W_OK | os.X_OK))
            found[path] = None if writable else "locked"
            continue
        found[path] = _KINDS.get(stat.S_IFMT(mode), "other")
    return found


def candidates(root: str, table: Sequence[Control], extra: Sequence[str]) -> list[str]:
    """Every absolute path whose type the plan depends on: each control path and its parents."""
    wanted: list[str] = []
    for relative in [*(control.path for control in table), *extra]:
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            path = os.path.join(root, *parts[:depth])
            if path not in wanted:
                wanted.append(path)
    return wanted


def plan(
    root: str,
    table: Sequence[Control],
    extra: Sequence[tuple[str, str]],
    kinds: dict[str, str | None],
) -> ControlPlan:
    """Pure: the binds and placeholders that keep `table` (and `extra`) read-only under `root`.

    `extra` holds (relative path, why) rows derived at launch (git's hooksPath,
    PATH directories inside the workspace); `kinds` is `probe` over `candidates`.
    """
    rows = [*table, *(Control(relative, why) for relative, why in extra)]
    pinned: list[str] = []
    read_only: list[str] = []
    placeholders: list[Placeholder] = []
    reasons: list[tuple[str, str]] = []

    def hold(path: str, why: str, placeholder: Placeholder | None = None) -> None:
        if placeholder is not None and path not in [p.path for p in placeholders]:
            placeholders.append(placeholder)
        if path not in read_only:
            read_only.append(path)
            reasons.append((path, why))

    for control in rows:
        parts = control.path.split("/")
        for depth in range(1, len(parts)):
            ancestor = os.path.join(root, *parts[:depth])
            kind = kinds.get(ancestor)
            if kind == "link":
                _refuse_link(ancestor, control.path)
            if kind == "locked":
                break  # nothing below can be created by this user at all
            if kind is None:
                # Nothing below can be created while an empty read-only directory stands here.
                hold(ancestor, f"placeholder for {control.path}: {control.why}",
                     Placeholder(ancestor, "dir"))
                break
            if ancestor not in pinned:
                pinned.append(ancestor)  # a directory, or a file nothing can be made below
            if kind != "dir":
                break
        else:  # every ancestor is a directory: hold the path itself
            path = os.path.join(root, control.path)
            kind = kinds.get(path)
            if kind == "link":
                _refuse_link(path, control.path)
            if kind == "locked":
                continue
            if kind is None:
                hold(path, f"{control.why} (absent: a placeholder stands in until the end)",
                     Placeholder(path, control.placeholder, control.content))
            elif kind == "dir" and not control.whole:
                if path not in pinned:
                    pinned.append(path)
            else:
                hold(path, control.why)
    # A pin inside a read-only path would make part of it writable again.
    pinned = [p for p in pinned if p not in read_only
              and not any(p.startswith(r + "/") for r in read_only)]
    # Parents first: a bind over a directory must not cover a bind made inside it.
    return ControlPlan(
        pinned=tuple(sorted(pinned, key=_depth)),
        read_only=tuple(sorted(read_only, key=_depth)),
        placeholders=tuple(placeholders),
        reasons=tuple(reasons),
    )


def _depth(path: str) -> int:
    return path.count("/")


def _refuse_link(path: str, relative: str) -> None:
    raise SandboxError(
        f"{path} is a symbolic link, so the sandbox cannot keep the control path {relative} "
        "read-only (the link itself could be replaced); make it a real file or directory, "
        f"or leave it writable with `unprotect = {relative}` in /etc/claude-sandbox.conf",
        EXIT_REFUSED,
    )
