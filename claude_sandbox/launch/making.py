"""What a launch makes for its plan before the session, undoes after it, and the
workspace's exit: git's changes applied by rule, and what the session made reported by
class (ADR 0010).

steps.py imports this module once the jail's holder and pasta are started: its imports
(the overlays, git, the plan's renderer and seccomp) are then paid while pasta attaches,
not before its start (ADR 0004).
"""

from __future__ import annotations

import os
import sys

from claude_sandbox.core import paths, streams
from claude_sandbox.core.process import data_descriptor
from claude_sandbox.core.record import record, replace
from claude_sandbox.inside import spec
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.launch.overlay import controlexit, controlfiles, gitcheck, gitrepo, gitsession
from claude_sandbox.launch.planner import plan, render, seccomp
from claude_sandbox.launch.session import mountpoints, state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from claude_sandbox.core.unowned import Mounter
    from claude_sandbox.core.viewplaces import Views
    from claude_sandbox.launch.facts.rootonly import Walk
    from claude_sandbox.launch.planner.mounts import Mount
    from claude_sandbox.launch.session.procmask import Helper


@record
class Prepared:
    """What a launch made before the sandbox starts, and must undo after it."""

    argv: list[str]
    fds: tuple[int, ...]
    layers: tuple[gitsession.Layer, ...]  # the overlays' directories, made in the store
    quarantine: gitcheck.Quarantine  # what the checks moved out, and the lines to say
    helper: Helper | None  # the late-mount helper (procmask.py)
    imported: tuple[str, ...] = ()  # what a first launch's import did, said again at the end
    # A root launch's views of the trees it shows, and their detached mounts, attached where
    # bwrap starts (core/unowned.py); None where the walk's covers hide root's files.
    views: Views | None = None
    view_fds: tuple[int, ...] = ()


# A root launch's walk and the trees sent to its mounter (ask_first).
First = tuple["Walk | None", "tuple[list[str], list[str]] | None"]


def ask_first(the_plan: plan.Plan, facts: hostfacts.HostFacts, store: str,
              mounter: Mounter | None) -> First:
    """On a root launch, the walk's plan, and its trees sent to `mounter`, which makes
    their views while the jail starts and the rest is prepared (`prepare` takes them);
    the mounter stopped where it has nothing to make."""
    walk = asked = None
    if the_plan.inner.late_masks and plan.masks(the_plan, "root-only"):
        from claude_sandbox.launch.facts import rootonly

        walk = rootonly.plan_walk(store, facts, the_plan.layout, the_plan.mounts)
        asked = ask_views(walk, mounter, writable_sources(the_plan))
    if asked is None and mounter is not None:  # nothing for it to make
        mounter.stop()
    return walk, asked


def prepare(the_plan: plan.Plan, cfg: config.Config, facts: hostfacts.HostFacts,
             store: str, helper: Helper | None, mounter: Mounter | None = None,
             first: First = (None, None)) -> Prepared:
    """Make what the plan needs: the store, the scratch directory, overlays, descriptors.
    `helper`: the late-mount helper forked early (a root launch), ended here on failure,
    or by undo(). `mounter`: a root launch's, forked ahead (steps.py), and `first` what
    it was asked (ask_first)."""
    imported: list[str] = []
    opened: dict[str, int] = {}
    views: Views | None = None
    view_fds: list[int] = []
    quarantine = gitcheck.Quarantine(store)
    walk, asked = first
    try:
        bwrap_path = paths.tool("bwrap")
        state.ensure_home(store, the_plan.agent, facts.home,
                          profiles.get(the_plan.agent).imports, facts.uid,
                          default_root=cfg.state_dir is None, said=imported)
        if facts.agent_tmp:  # first: its bind's source, which may lie below $HOME
            state.private_dir(facts.agent_tmp, facts.uid,
                              f"{the_plan.agent}'s scratch directory")
        # Before bwrap, which would follow a link the agent left in its store on the way
        # to a mount point and make that point wherever the link leads (mountpoints.py).
        opened.update(mountpoints.make(facts.store_home, facts.home, the_plan.mounts,
                                       the_plan.agent))
        if in_review_mode(the_plan):
            # The overlay keeps the session's git writes from the real repositories, which
            # the launcher still checks: review apply and the user's git read them.
            for repo in the_plan.layout.repositories:
                gitcheck.check(repo.gitdir, quarantine)
        layers = gitsession.prepare(the_plan.views, quarantine)
        say(quarantine)
        # surrogateescape: a forge file's bytes come back as they were read (credentials.py)
        opened.update({name: data_descriptor(name, content.encode("utf-8", "surrogateescape"))
                       for name, content in the_plan.data})
        opened[render.SECCOMP] = seccomp.filter_fd(the_plan.inner.level,
                                                   the_plan.seccomp_flags)
        if walk is not None:
            from claude_sandbox.launch.facts import rootcache

            made = root_views(walk, mounter, asked)
            if made is not None:  # root's own files refused by class there: not walked
                views, view_fds, walked = made
                the_plan = replace(the_plan, mounts=through_views(the_plan.mounts, views))
                walk = replace(walk, roots=tuple(walked)) if walked else None
                if walk is None:  # no launch reads its times early again (run.py)
                    try:
                        rootcache.remove(os.path.join(store, rootcache.CACHE_NAME))
                    except OSError:
                        pass  # another launch's removal, a store that cannot: time only
            if walk is None and not plan.masks(the_plan, "outer-proc") and not plan.masks(
                    the_plan, "noexec"):  # the views did all the helper would have
                the_plan = replace(the_plan, inner=replace(the_plan.inner, late_masks=False))
        if the_plan.inner.late_masks:
            from claude_sandbox.launch.session import procmask

            if helper is None:  # not a root launch, or no walk's cache to read early
                helper = procmask.start_helper()
            opened["helper"] = helper.fd
            procmask.instruct(helper, plan.masks(the_plan, "outer-proc"),
                              plan.masks(the_plan, "noexec"), walk)
        elif helper is not None:  # nothing to mask after all
            stop_helper(helper, close=True)
            helper = None
        opened[render.INNER] = data_descriptor("inner", spec.encode(
            the_plan.inner, helper.fd if helper is not None else None))
    except BaseException:
        for fd in (*opened.values(), *view_fds):
            os.close(fd)
        if helper is not None:
            stop_helper(helper, close="helper" not in opened)
        raise
    # The agent shares the launching terminal, as it would without the sandbox:
    # job control, resizes and hang-ups reach it directly. What a shared
    # terminal allows beyond that, pushing input with TIOCSTI or TIOCLINUX, the
    # seccomp filter refuses (check 45; docs/explanation/terminal.md).
    argv = render.bwrap_argv(the_plan, bwrap_path, {k: str(v) for k, v in opened.items()})
    return Prepared(argv, tuple(opened.values()), layers, quarantine, helper, tuple(imported),
                    views, tuple(view_fds))


def ask_views(walk: Walk, mounter: Mounter | None,
              writable: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The trees of `walk` a view can show and those left to the walk, the first sent to
    `mounter` (steps.py forked it) to make their views now. A tree in one of the
    sandbox's own places (~/.config/gh under the home) is neither: nothing of it was ever
    covered, and its files are the agent's to read. A tree with a mount below it
    (viewplaces.split) or a place bound writable from it (a git directory outside the
    workspace: the real one, not a view, below the session's overlay) is walked."""
    from claude_sandbox.core import mountinfo, viewplaces

    roots = [root for root in walk.roots if paths.under_any(root, walk.bound)
             or not paths.under_any(root, walk.shown)]
    viewed, walked = viewplaces.split(roots, mountinfo.read())
    held = [root for root in viewed if any(paths.under(source, root)
                                            and not paths.under_any(source, walk.shown)
                                            for source in writable)]
    viewed = [root for root in viewed if root not in held]
    walked += held
    if viewed and mounter is not None:
        mounter.ask(viewed)
    return viewed, walked


def root_views(walk: Walk, mounter: Mounter | None = None,
               asked: tuple[list[str], list[str]] | None = None,
               ) -> tuple[Views, list[int], list[str]] | None:
    """The views of the trees a root launch shows, made by an id that owns nothing there
    (ADR 0020), their descriptors, and the trees left to the walk (those with a mount
    below them); None where there is no view to make or the kernel refuses one: the walk's
    covers hide root's files in every tree then (ADR 0015). `asked`: what ask_views sent
    `mounter`; without either, a mounter is started here (explain)."""
    from claude_sandbox.core import unowned, viewplaces

    viewed, walked = asked if asked is not None else ask_views(walk, None)
    if not viewed and mounter is not None:
        mounter.stop()
    if not viewed:
        return None
    made = (mounter.answer(len(viewed)) if mounter is not None and asked is not None
            else unowned.make(viewed))
    if isinstance(made, str):
        return None
    own = tuple(place for place in (*walk.skip, *walk.shown)
                if any(paths.under(place, root) for root in viewed))
    bound = tuple(place for place in walk.bound if paths.under_any(place, viewed))
    return viewplaces.Views(tuple(viewed), own, bound), made, walked


def writable_sources(the_plan: plan.Plan) -> list[str]:
    """What the session writes from the host: its writable binds' sources and the places
    its overlays show (git directories, control directories)."""
    return [*(m.source for m in the_plan.mounts if m.kind == "bind"),
            *(view.target for view in the_plan.views)]


def through_views(mounts: Sequence[Mount], views: Views) -> tuple[Mount, ...]:
    """`mounts` with every read-only bind from a tree shown through a view bound from that
    view: bwrap starts where the views are attached (core/unowned.py)."""
    from claude_sandbox.core.viewplaces import staged

    out = []
    for mount in mounts:
        place = staged(mount.source, views) if mount.kind in ("ro-bind", "ro-bind-try") else None
        out.append(mount if place is None else replace(mount, source=place))
    return tuple(out)


def views_request(prepared: Prepared) -> tuple[list[str], Sequence[int]] | None:
    from claude_sandbox.core import viewplaces

    return None if prepared.views is None else viewplaces.request(prepared.views,
                                                                prepared.view_fds)


def undo(prepared: Prepared) -> None:
    """After the session: the views' descriptors closed, the /proc helper reaped."""
    for fd in prepared.view_fds:
        os.close(fd)
    if prepared.helper is not None:
        stop_helper(prepared.helper, close=False)  # its end went with prepared.fds


def stop_helper(helper: Helper, *, close: bool) -> None:
    """End a late-mount helper; `close`: its end of the socket too (not yet handed on)."""
    from claude_sandbox.launch.session import procmask

    procmask.stop(helper, close=close)


def egress_record(store: str, the_plan: plan.Plan, cfg: config.Config) -> tuple[str, int]:
    """The session's egress record, made before the agent runs (jail/egressrecord.py)."""
    from claude_sandbox.jail import egressrecord

    uid = os.getuid()
    state.private_dir(os.path.join(store, "egress"), uid, "the egress records' directory")
    where = egressrecord.directory(store, the_plan.layout.workspace)
    state.private_dir(where, uid, "a workspace's egress records")
    header = {"session": egressrecord.session_id(), "agent": the_plan.agent,
              "policy": cfg.egress_policy, "workspace": the_plan.layout.workspace,
              "time": egressrecord.utc()}
    return egressrecord.create(where, header)


def say(quarantine: gitcheck.Quarantine) -> None:
    """What the git checks found, a line each; a name in it is the session's to choose, so
    nothing in it reaches the terminal as a control sequence."""
    for line in quarantine.lines:
        sys.stderr.write(f"claude-sandbox: {streams.terminal_safe(line)}\n")
    quarantine.lines.clear()


def in_review_mode(the_plan: plan.Plan) -> bool:
    return any(view.kind == "workspace" for view in the_plan.views)


def workspace_exit(cfg: config.Config, the_plan: plan.Plan, prepared: Prepared,
                    since_ns: int) -> None:
    """git's changes applied by rule, then what the session made, by class (ADR 0010)."""
    from claude_sandbox.launch.overlay import aftermath

    layout = the_plan.layout
    quarantine = prepared.quarantine
    names = controlfiles.names(controlfiles.controls(cfg.protect, cfg.unprotect))
    # In review mode the workspace was not written: what waits there is for
    # `claude-sandbox review`; the allow-write roots outside it were. The control paths
    # the session made go first: nothing the git apply below may meet (a history that
    # takes long, a kill) leaves them in the workspace.
    review = in_review_mode(the_plan)
    controlexit.move_created(layout, the_plan.workspace_store, quarantine.lines, review)
    # What the launch held, a link's target included: git must not bring it out either.
    held = tuple(path for held_plan in layout.controls for path in (
        *held_plan.views, *held_plan.read_only, *(link.target for link in held_plan.links)))
    gitsession.finish(prepared.layers, layout.workspace, quarantine, names, held)
    roots = [r for r in (*(() if review else (layout.workspace,)), *layout.allow_write)
             if os.path.isdir(r)]
    if not roots:
        say(quarantine)
        return
    # The overlaid repositories were applied by rule above: not the user's to review.
    # Their `.git` entry too, but only while it still leads there: a `.git` file is the
    # agent's to rewrite, and one repointed at a repository it made would have git
    # outside run that one's hooks and config. It goes to check_made as any plant does.
    overlaid = {repo.gitdir for repo in layout.repositories}
    overlaid.update(os.path.join(repo.top, ".git") for repo in layout.repositories
                    if gitrepo.names_gitdir(os.path.join(repo.top, ".git"), repo.gitdir))
    # scan() names paths relative to the root when it has one root.
    def absolute(path: str) -> str:
        return path if os.path.isabs(path) else os.path.normpath(os.path.join(roots[0], path))

    findings: list[aftermath.Finding] = []
    try:
        findings = [f for f in aftermath.scan(roots, since_ns, names)
                    if absolute(f.path) not in overlaid]
        gitsession.check_made([absolute(f.path) for f in findings if f.kind == "git"],
                              layout.workspace,
                              [repo.gitdir for repo in layout.repositories], since_ns,
                              quarantine)
    except (OSError, UnicodeError, ValueError) as error:
        # What the agent left can race or trip the walk: the quarantine's lines and
        # whatever the walk had returned are still said, and the user is told the
        # check is not whole.
        quarantine.lines.append(f"warning: the check of what the session left did not finish "
                                f"({error}): review {layout.workspace} before running git or "
                                "tools there outside")
    say(quarantine)
    report = os.path.join(the_plan.workspace_store, "last-session.txt")
    for line in aftermath.report_lines(findings, report):
        sys.stderr.write(f"claude-sandbox: {streams.terminal_safe(line)}\n")
