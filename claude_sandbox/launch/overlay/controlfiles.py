"""Workspace control files: what programs outside run or trust, never changed from inside.

The workspace is writable by design, but some of its paths are not ordinary
source: Claude Code starts the MCP servers in .mcp.json and runs the hooks in
.claude/settings.json, VS Code runs tasks, a dev-container rebuild runs
lifecycle commands as the container's root. An agent that writes one of them
leaves code that a program outside runs later (ADR 0005, checks 51-54). The
table below names them, with why; the operator can add paths (`protect`) or
leave built-in ones writable (`unprotect`), never from the environment. git's
own directory is not in the table: it is an overlay whose changes are applied
by rule after the session (gitapply.py, ADR 0010).

How each is held (all computed here, from facts, as a plan the argv builder
renders), without making anything in the workspace (ADR 0010):
- an existing directory is an overlay view: the agent sees the real one and
  writes its own per-workspace copy in the store, which the next sandboxed
  session sees again and nothing outside ever reads (Claude's "always allow"
  choices persist for the agent; the real .claude/ never changes);
- an existing file is bound read-only onto itself (a mount point cannot be
  unlinked or renamed);
- every directory between the writable root and a protected path is bound
  onto itself ("pinned"), so the protection cannot be moved away with it;
- an absent path is not held: nothing stands in for it, because a stand-in
  shows to git, the agents, the IDE and the user's terminal. What the session
  creates there is moved, when it ends, into the agent's per-workspace store
  and named (making.py), so no program outside finds it there afterwards;
- a protected path (or a directory above it) that is a symbolic link staying
  inside the writable root (dotfile managers make these) is held through its
  target: the target is planned like the path itself. The link is not a mount
  point and can be replaced during the session, so the session's end puts the
  same link back and moves what stood there into the store (making.py), like a
  path the session made. A link that leaves the root names something the plan
  cannot hold, and the launch is refused with what the user can do;
- what a link inside a held directory names elsewhere in the root is held read-only
  (`linked_from`): the view keeps the link, not the file it names.
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
    """One protected path, relative to a writable root."""

    path: str
    why: str


CONTROL: tuple[Control, ...] = (
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
class Link:
    """A symbolic link on the way to a control path, as found at launch."""

    path: str  # absolute, inside the writable root
    text: str  # what readlink gave: put back at the session's end if replaced
    target: str  # its realpath at launch


@record
class ControlPlan:
    """What the argv builder binds, in order, and the overlay views the launch mounts."""

    root: str  # the writable root these paths lie in
    pinned: tuple[str, ...]  # directories bound read-write onto themselves
    read_only: tuple[str, ...]  # existing files, bound read-only onto themselves
    views: tuple[str, ...]  # existing directories: overlays with the agent's copy on top
    absent: tuple[str, ...]  # not there at launch: what the session makes there is moved
    reasons: tuple[tuple[str, str], ...]  # (absolute path, why) for explain
    links: tuple[Link, ...] = ()  # followed to their targets: put back if replaced


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


def names(table: Sequence[Control]) -> frozenset[str]:
    """The last part of each control path: the names the session-end report and review
    class as control files at any depth (aftermath.py)."""
    return frozenset(control.path.split("/")[-1] for control in table)


_KINDS = {stat.S_IFDIR: "dir", stat.S_IFLNK: "link", stat.S_IFREG: "file"}


def probe(paths_: Iterable[str]) -> dict[str, str | None]:
    """lstat each path: the only file-system reads the planner needs."""
    found: dict[str, str | None] = {}
    for path in paths_:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            found[path] = None
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


# How many links one control path may pass through; the kernel's own limit is 40, and
# a chain this long in a workspace is a trap, not a dotfile manager's work.
MAX_LINKS = 8


def read_links(kinds: dict[str, str | None]) -> dict[str, Link]:
    """readlink and realpath of each link `probe` found: the planner's other facts."""
    found: dict[str, Link] = {}
    for path, kind in kinds.items():
        if kind == "link":
            try:
                found[path] = Link(path, os.readlink(path), os.path.realpath(path))
            except OSError:
                continue  # gone since the probe: the planner refuses an unresolved link
    return found


def survey(root: str, table: Sequence[Control],
           extra: Sequence[tuple[str, str]]) -> tuple[dict[str, str | None], dict[str, Link]]:
    """The kinds and links `plan` needs: every control path, its parents, and the same
    again through each link met on the way, to a bounded depth."""
    kinds: dict[str, str | None] = {}
    links: dict[str, Link] = {}
    rows = dict.fromkeys([*((c.path, c.why) for c in table), *extra])
    for _ in range(MAX_LINKS + 1):
        wanted = [p for p in candidates(root, (), [r for r, _ in rows]) if p not in kinds]
        if not wanted:
            break
        found = probe(wanted)
        kinds.update(found)
        links.update(read_links(found))
        rows.update(dict.fromkeys((r, w) for r, w, _ in through_links(root, list(rows), links)))
    return kinds, links


# How many entries of the held directories `linked_from` reads at most: the directories
# are the tools' settings, small. Past it the launch is refused: a link left unread there
# could name a file the agent writes and a program outside runs.
LINKED_WALK_MAX = 5000


def linked_from(root: str, views: Sequence[str],
                limit: int = LINKED_WALK_MAX) -> list[tuple[str, str]]:
    """Rows for what the links inside held directories name elsewhere in `root`.

    A view keeps the directory's own entries unchanged, links included, but not what a
    link names (`.vscode/tasks.json -> ../conf/tasks.json`): the agent would write
    conf/tasks.json, and VS Code outside would run it. Links to other places outside
    the root are left: nothing outside the writable roots is writable inside."""
    found: list[tuple[str, str]] = []
    seen = 0
    for view in views:
        for top, dirs, files in os.walk(view):  # links to directories are not entered
            for name in (*dirs, *files):
                seen += 1
                if seen > limit:
                    raise SandboxError(
                        f"refusing to launch: the held directory {view} has more than "
                        f"{limit} entries, too many to read for links that name files "
                        "elsewhere in the workspace (programs outside follow them); remove "
                        "what it does not need, or add `unprotect` for it in "
                        "/etc/claude-sandbox.conf", EXIT_REFUSED)
                path = os.path.join(top, name)
                if not os.path.islink(path):
                    continue
                target = os.path.realpath(path)
                if target.startswith(root + "/") and not any(
                        target == v or target.startswith(v + "/") for v in views):
                    found.append((target[len(root) + 1 :],
                                  f"named by the link {path[len(root) + 1 :]} in a held "
                                  "directory: programs outside follow it"))
    return found


def through_links(root: str, rows: Sequence[tuple[str, str]],
                  links: dict[str, Link]) -> list[tuple[str, str, bool]]:
    """Pure: for each row that passes through a link staying inside `root`, two rows,
    in the rows' order (one step; `plan` and `survey` repeat it):
    - the row rewritten to the link's target (its realpath), to hold (True);
    - the link's own text, as written, up to any `..`, only for the links and
      directories met on it (False): realpath skips over a link in the middle of a
      chain (`.claude -> config/claude`, `config -> dot/config`), which the session
      could replace as well as the first."""
    followed: list[tuple[str, str, bool]] = []
    for relative, why in rows:
        parts = relative.split("/")
        for depth in range(1, len(parts) + 1):
            path = os.path.join(root, *parts[:depth])
            link = links.get(path)
            if link is None:
                continue
            if link.target.startswith(root + "/"):
                rest = parts[depth:]
                through = os.path.join(link.target[len(root) + 1 :], *rest)
                because = f"{why} (through the link {relative})"
                followed.append((through, because, True))
                written = os.path.join(os.path.dirname(path), link.text)
                if written.startswith(root + "/"):
                    steps = []
                    for step in written[len(root) + 1 :].split("/"):
                        if step == "..":
                            break
                        if step and step != ".":
                            steps.append(step)
                    if steps:
                        followed.append(("/".join(steps), because, False))
            break
    return followed


def plan(
    root: str,
    table: Sequence[Control],
    extra: Sequence[tuple[str, str]],
    kinds: dict[str, str | None],
    links: dict[str, Link] | None = None,
) -> ControlPlan:
    """Pure: the binds and views that keep `table` (and `extra`) from changing under `root`.

    `extra` holds (relative path, why) rows derived at launch (PATH directories
    inside the workspace, which stay read-only: a program planted there would
    run in the user's shell); `kinds` and `links` are `survey`'s.
    """
    links = links or {}
    # (relative, why, viewable, hold): a row through a link's text only records the links
    # and pins the directories it passes (through_links).
    pending = [*((c.path, c.why, True, True) for c in table),
               *((r, why, False, True) for r, why in extra)]
    for _ in range(MAX_LINKS):
        known = {(r, h) for r, _, _, h in pending}
        new = []
        for relative, why, viewable, _ in pending:
            for through, because, hold in through_links(root, [(relative, why)], links):
                if (through, hold) not in known:
                    known.add((through, hold))
                    new.append((through, because, viewable, hold))
        if not new:
            break
        pending += new
    pinned: list[str] = []
    read_only: list[str] = []
    views: list[str] = []
    absent: list[str] = []
    reasons: list[tuple[str, str]] = []
    held_links: list[Link] = []
    for relative, why, viewable, hold in pending:
        control = Control(relative, why)
        if not hold:
            _walk_link_text(root, relative, kinds, links, pinned, held_links)
            continue
        parts = control.path.split("/")
        for depth in range(1, len(parts)):
            ancestor = os.path.join(root, *parts[:depth])
            kind = kinds.get(ancestor)
            if kind == "link":
                _hold_link(root, ancestor, control.path, links, held_links)
                break  # the row through the link's target holds what it names
            if kind is None and ancestor not in absent:
                absent.append(ancestor)
            if kind != "dir":
                break  # absent (nothing to hold), or a file nothing can be made below
            if ancestor not in pinned:
                pinned.append(ancestor)
        else:  # every ancestor is a directory: hold the path itself
            path = os.path.join(root, control.path)
            kind = kinds.get(path)
            if kind == "link":
                _hold_link(root, path, control.path, links, held_links)
                continue
            if kind is None and path not in absent:
                absent.append(path)
            if kind is None or path in read_only or path in views:
                continue
            if kind == "dir" and viewable:
                views.append(path)
                reasons.append((path, f"{control.why}: the agent writes its own copy"))
            else:
                read_only.append(path)
                reasons.append((path, control.why))
    held = [*read_only, *views]
    # A pin inside a held path would make part of it writable again.
    pinned = [p for p in pinned if p not in held and not any(p.startswith(h + "/") for h in held)]
    views = [v for v in views if not any(v.startswith(h + "/") for h in held)]
    # A view already keeps the real directory unchanged: nothing inside it needs a bind.
    read_only = [r for r in read_only if not any(r.startswith(v + "/") for v in views)]
    # Parents first: a bind over a directory must not cover a bind made inside it.
    return ControlPlan(
        root=root,
        pinned=tuple(sorted(pinned, key=_depth)),
        read_only=tuple(sorted(read_only, key=_depth)),
        views=tuple(sorted(views, key=_depth)),
        absent=tuple(absent),
        reasons=tuple(reasons),
        links=tuple(held_links),
    )


def _depth(path: str) -> int:
    return path.count("/")


def _walk_link_text(root: str, relative: str, kinds: dict[str, str | None],
                    links: dict[str, Link], pinned: list[str], held: list[Link]) -> None:
    """The directories a link's text passes are pinned and its links kept, up to the
    first that is neither."""
    parts = relative.split("/")
    for depth in range(1, len(parts) + 1):
        path = os.path.join(root, *parts[:depth])
        kind = kinds.get(path)
        if kind == "link":
            _hold_link(root, path, relative, links, held)
            return
        if kind != "dir":
            return
        if path not in pinned:
            pinned.append(path)


def _hold_link(root: str, path: str, relative: str, links: dict[str, Link],
               held: list[Link]) -> None:
    """A link inside the root is kept (put back at the end); any other is refused."""
    link = links.get(path)
    if link is not None and link.target.startswith(root + "/"):
        if link not in held:
            held.append(link)
        return
    where = (f"to {link.target}, which is not inside {root}" if link is not None
             else "that cannot be read")
    raise SandboxError(
        f"{path} is a symbolic link {where}, so the sandbox cannot keep the control path "
        f"{relative} from changing; replace the link with a copy of what it names "
        f"(cp -a --remove-destination, or rm and cp -a), or move that into the workspace and "
        f"link to it there; the operator may leave it writable with `unprotect = {relative}` "
        "in /etc/claude-sandbox.conf",
        EXIT_REFUSED,
    )
