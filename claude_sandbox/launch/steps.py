"""The launch's steps after the janitor, in order: facts, one plan, then making and running it.

run.py forks the janitor before this module (and the rest of the launcher) is
imported, so that the janitor, waiting the whole session, holds little memory, and on a
root launch the late-mount helper, which reads the root-only cache from then on
(procmask.py). The order here: the configuration and the caps (decide.configure); a new
helper where the store is not the home's (state-dir); the jail's holder
and pasta, whose attach the rest overlaps; the facts, the credential broker's part and
the plan (decide.decide, as `explain` makes it; plan.py is pure);
the things the plan needs made (the state store, the workspace's overlays,
descriptors, the /proc helper); bwrap, waited for; the undoing, and the
workspace's exit: git's changes applied by rule, and what the session made
reported by class (ADR 0010).
"""

from __future__ import annotations

import os
import sys
import termios
import time

from claude_sandbox.core import engine, paths
from claude_sandbox.core.process import data_descriptor
from claude_sandbox.core.record import record
from claude_sandbox.core.trace import Trace
from claude_sandbox.inside import spec
from claude_sandbox.launch import decide
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.configure.request import Request
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.launch.overlay import controlexit, controlfiles, gitcheck, gitrepo, gitsession
from claude_sandbox.launch.planner import limits, plan, render, seccomp
from claude_sandbox.launch.session import cgroups, notices, state
from claude_sandbox.launch.session.janitor import Janitor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from claude_sandbox.launch.session.procmask import Helper


def run(request: Request, environ: Mapping[str, str], trace: Trace, janitor: Janitor,
        keep_ignored: tuple[str, ...], helper: Helper | None = None) -> int:
    """The launch after the janitor: configuration, caps, jail, facts, plan, session.
    `helper`: the late-mount helper run.py forked on a root launch, ours to end."""
    try:
        configured = decide.configure(request.agent, environ)
        profile, cfg, limit_plan = configured.profile, configured.cfg, configured.limit_plan
        limits.prefer_for_oom()
        notices.at_start(profile, cfg, environ, limit_plan, agent=request.command is None)
        trace.phase("config")
        cgroup = cgroups.create(limit_plan.cgroup)  # None unless a cap needs one
    except BaseException:
        if helper is not None:
            _stop_helper(helper, close=True)
        raise
    for directory in cgroup.dirs if cgroup is not None else ():
        janitor.tell("cgroup", directory)
    jail = None
    early = None
    prepared: Prepared | None = None
    record: tuple[str, int] | None = None
    modes = _terminal_modes()
    try:
        store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
        if cfg.state_dir is not None:
            notices.squatted_store(cfg.state_dir, store)
        if plan.masks_root_only(os.getuid()):
            # The plan will cover root's own files. Forked first (run.py), the helper reads
            # the walk's cache and every cached directory's time while the rest is planned:
            # most of what a root launch costs (ADR 0015). It read the store run.py found
            # ahead of the configuration; where that is not this launch's, a new helper
            # reads this one's.
            from claude_sandbox.launch.facts.rootcache import CACHE_NAME
            from claude_sandbox.launch.session import procmask

            cache = os.path.join(store, CACHE_NAME)
            if helper is not None and helper.cache != cache:
                _stop_helper(helper, close=True)
                helper = None
            if helper is None:
                helper = procmask.start_helper(cache)
        elif helper is not None:  # run.py's rule and the planner's disagree: none early
            _stop_helper(helper, close=True)
            helper = None
        if cfg.egress_jail:
            from claude_sandbox.jail import preflight
            from claude_sandbox.jail import start as jail_start

            preflight.preflight(needs_socat=bool(cfg.local_ports or cfg.callback_ports))
            # Started first: the holder's namespace and pasta's attach are the longest
            # wait, and the facts and the plan are made meanwhile. The holder joins the
            # cgroup itself before it serves anything, and pasta before its exec, so that
            # they, the egress proxy and the session inherit the caps; the launcher never
            # joins (a move between cgroups waits for an RCU grace period, 10-25 ms
            # measured each way) nor leaves.
            early = jail_start.begin(Trace(trace.enabled, "jail"),
                                     cgroup.join if cgroup is not None else None,
                                     cgroup.dirs if cgroup is not None else ())
        else:
            engine.refuse_if_blocked()  # the jail's preflight asks the same
            sys.stderr.write("claude-sandbox: warning: the egress jail is off (egress-jail = 0): "
                             "the agent shares this container's network, including private "
                             "networks, cloud metadata and services on 127.0.0.1\n")
        gathered, broker, the_plan = decide.decide(configured, request, environ, keep_ignored,
                                                   store)
        if trace.enabled:
            trace.phase(f"plan {render.digest(the_plan)}")
        if the_plan.jail is not None and early is not None:
            from claude_sandbox.jail import session  # only a jailed launch pays for it

            # From here the jail owns what `early` started, and ends it even when
            # start() fails: abandoning it again would close descriptors twice.
            handed, early = early, None
            jail = session.start(the_plan.jail, handed)
            trace.phase("jail started")
        started = time.time_ns()
        forked, helper = helper, None  # _prepare ends it, whatever happens there
        prepared = _prepare(the_plan, cfg, gathered.facts, store, forked)
        if jail is not None:
            record = _egress_record(store, the_plan, cfg)  # in the store _prepare made
        trace.phase("prepared")
        # The launcher always waits: git's changes are applied, cgroups removed and the
        # session's changes reported only by a process that outlives the sandbox.
        env = dict(the_plan.env)
        overlays = [(layer.view.target, layer.upper, layer.work, layer.view.target)
                    for layer in prepared.layers]
        if jail is not None:
            status = jail.run(prepared.argv, env, prepared.fds, overlays,
                              record[1] if record else -1, broker)
        else:
            status = limits.run_supervised(prepared.argv, env, cgroup, pass_fds=prepared.fds,
                                           overlays=overlays)
        trace.phase("session ended")
        notices.caps(cgroup.events() if cgroup is not None else {}, status, limit_plan)
        for line in prepared.imported:  # a full-screen agent covered the first telling
            sys.stderr.write(f"claude-sandbox: first launch: {line}\n")
        if prepared.imported:
            sys.stderr.write(f"claude-sandbox: first launch: {the_plan.agent}'s home inside "
                             f"is {gathered.facts.store_home} (`claude-sandbox state show`)\n")
        _workspace_exit(cfg, the_plan, prepared, started)
        if record is not None and the_plan.jail is not None:
            notices.egress(record[0], the_plan.jail.egress_policy)
            from claude_sandbox.jail import egressrecord

            egressrecord.prune(os.path.dirname(record[0]), record[0])
        trace.phase("workspace applied and reported")
        return status
    finally:
        if record is not None:
            os.close(record[1])
        if jail is not None:
            jail.close()
        elif early is not None:
            early.abandon()
        if prepared is not None:
            _undo(prepared)  # first: the /proc helper is reaped before the cgroup goes
        if helper is not None:  # the launch stopped before it planned
            _stop_helper(helper, close=True)
        if cgroup is not None:
            cgroup.remove()
        _restore_terminal(modes)


@record
class Prepared:
    """What a launch made before the sandbox starts, and must undo after it."""

    argv: list[str]
    fds: tuple[int, ...]
    layers: tuple[gitsession.Layer, ...]  # the overlays' directories, made in the store
    quarantine: gitcheck.Quarantine  # what the checks moved out, and the lines to say
    helper: Helper | None  # the late-mount helper (procmask.py)
    imported: tuple[str, ...] = ()  # what a first launch's import did, said again at the end


def _prepare(the_plan: plan.Plan, cfg: config.Config, facts: hostfacts.HostFacts,
             store: str, helper: Helper | None) -> Prepared:
    """Make what the plan needs: the store, the scratch directory, overlays, descriptors.
    `helper`: the late-mount helper forked early (a root launch), ended here on failure,
    or by _undo."""
    imported: list[str] = []
    opened: dict[str, int] = {}
    quarantine = gitcheck.Quarantine(store)
    try:
        bwrap_path = paths.tool("bwrap")
        state.ensure_home(store, the_plan.agent, facts.home,
                          profiles.get(the_plan.agent).imports, facts.uid,
                          default_root=cfg.state_dir is None, said=imported)
        if facts.agent_tmp:
            state.private_dir(facts.agent_tmp, facts.uid,
                              f"{the_plan.agent}'s scratch directory")
        if _review(the_plan):
            # The overlay keeps the session's git writes from the real repositories, which
            # the launcher still checks: review apply and the user's git read them.
            for repo in the_plan.layout.repositories:
                gitcheck.check(repo.gitdir, quarantine)
        layers = gitsession.prepare(the_plan.views, quarantine)
        _say(quarantine)
        # surrogateescape: a forge file's bytes come back as they were read (credentials.py)
        opened.update({name: data_descriptor(name, content.encode("utf-8", "surrogateescape"))
                       for name, content in the_plan.data})
        opened[render.SECCOMP] = seccomp.filter_fd(the_plan.inner.level,
                                                   the_plan.seccomp_flags)
        if the_plan.inner.late_masks:
            from claude_sandbox.launch.facts import rootonly
            from claude_sandbox.launch.session import procmask

            if helper is None:  # not a root launch: forked now
                helper = procmask.start_helper()
            opened["helper"] = helper.fd
            walk = (rootonly.plan_walk(store, facts, the_plan.layout, the_plan.mounts)
                    if plan.masks(the_plan, "root-only") else None)
            procmask.instruct(helper, plan.masks(the_plan, "outer-proc"),
                              plan.masks(the_plan, "noexec"), walk)
        elif helper is not None:  # nothing to mask after all
            _stop_helper(helper, close=True)
            helper = None
        opened[render.INNER] = data_descriptor("inner", spec.encode(
            the_plan.inner, helper.fd if helper is not None else None))
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        if helper is not None:
            _stop_helper(helper, close="helper" not in opened)
        raise
    # The agent shares the launching terminal, as it would without the sandbox:
    # job control, resizes and hang-ups reach it directly. What a shared
    # terminal allows beyond that, pushing input with TIOCSTI or TIOCLINUX, the
    # seccomp filter refuses (check 45; docs/explanation/terminal.md).
    argv = render.bwrap_argv(the_plan, bwrap_path, {k: str(v) for k, v in opened.items()})
    return Prepared(argv, tuple(opened.values()), layers, quarantine, helper, tuple(imported))


def _undo(prepared: Prepared) -> None:
    """After the session: the /proc helper reaped."""
    if prepared.helper is not None:
        _stop_helper(prepared.helper, close=False)  # its end went with prepared.fds


def _stop_helper(helper: Helper, *, close: bool) -> None:
    from claude_sandbox.launch.session import procmask

    procmask.stop(helper, close=close)


def _terminal_modes() -> list[Any] | None:
    """The launching terminal's modes, to give back whatever state the agent leaves it in."""
    try:
        return termios.tcgetattr(0) if os.isatty(0) else None
    except termios.error:
        return None


def _restore_terminal(modes: list[Any] | None) -> None:
    """An agent killed in raw mode leaves the terminal unusable; the shell gets it back sane.

    Only from the terminal's foreground group: a background launch writing the
    modes would be stopped by SIGTTOU.
    """
    if modes is None:
        return
    try:
        if os.tcgetpgrp(0) == os.getpgrp():
            termios.tcsetattr(0, termios.TCSADRAIN, modes)
    except (OSError, termios.error):
        pass


def _egress_record(store: str, the_plan: plan.Plan, cfg: config.Config) -> tuple[str, int]:
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


def _say(quarantine: gitcheck.Quarantine) -> None:
    for line in quarantine.lines:
        sys.stderr.write(f"claude-sandbox: {line}\n")
    quarantine.lines.clear()


def _review(the_plan: plan.Plan) -> bool:
    return any(view.kind == "workspace" for view in the_plan.views)


def _workspace_exit(cfg: config.Config, the_plan: plan.Plan, prepared: Prepared,
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
    review = _review(the_plan)
    controlexit.move_created(layout, the_plan.workspace_store, quarantine.lines, review)
    # What the launch held, a link's target included: git must not bring it out either.
    held = tuple(path for held_plan in layout.controls for path in (
        *held_plan.views, *held_plan.read_only, *(link.target for link in held_plan.links)))
    gitsession.finish(prepared.layers, layout.workspace, quarantine, names, held)
    roots = [r for r in (*(() if review else (layout.workspace,)), *layout.allow_write)
             if os.path.isdir(r)]
    if not roots:
        _say(quarantine)
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
    _say(quarantine)
    report = os.path.join(the_plan.workspace_store, "last-session.txt")
    for line in aftermath.report_lines(findings, report):
        sys.stderr.write(f"claude-sandbox: {line}\n")
