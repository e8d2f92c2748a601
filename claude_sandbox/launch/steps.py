"""The launch's steps after the janitor, in order: configuration, jail, one plan, the session.

run.py starts the janitor before this module (and the rest of the launcher) is
imported, and on a root launch forks the late-mount helper, which reads the root-only
cache from then on and so holds little memory (procmask.py). The order here: the
configuration and the caps (configured.py, which imports neither the facts nor the
planner); the jail's holder and pasta, whose attach
is the longest wait of a launch; only then the planning modules, imported while pasta
attaches (ADR 0004); a new helper where the store is not the home's (state-dir); the
facts, the credential broker's part and the plan (decide.decide, as `explain` makes it;
plan.py is pure); the things the plan needs made (making.py: the state store, the
workspace's overlays, descriptors, the /proc helper); bwrap, waited for; the undoing,
and the workspace's exit (making.py).
"""

from __future__ import annotations

import gc
import os
import sys
import time

from claude_sandbox.core import engine, libc
from claude_sandbox.core.trace import Trace
from claude_sandbox.launch.configure.request import Request
from claude_sandbox.launch.configured import configure
from claude_sandbox.launch.planner import limits
from claude_sandbox.launch.session import cgroups
from claude_sandbox.launch.session.janitor import Janitor

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from claude_sandbox.core.unowned import Mounter
    from claude_sandbox.launch.making import Prepared
    from claude_sandbox.launch.planner.plan import Plan
    from claude_sandbox.launch.session.procmask import Helper


def run(request: Request, environ: Mapping[str, str], trace: Trace, janitor: Janitor,
        keep_ignored: tuple[str, ...], helper: Helper | None = None) -> int:
    """The launch after the janitor: configuration, caps, jail, facts, plan, session.
    `helper`: the late-mount helper run.py forked on a root launch, ours to end."""
    try:
        configured = configure(request.agent, environ)
        profile, cfg, limit_plan = configured.profile, configured.cfg, configured.limit_plan
        limits.prefer_for_oom()
        cgroups.refuse_without_files(cfg.egress_jail)
        cgroups.refuse_without_room(cfg.egress_jail)
        trace.phase("config")
        cgroup = cgroups.create(limit_plan.cgroup)  # None unless a cap needs one
    except BaseException:
        if helper is not None:
            _stop_helper(helper)
        raise
    for directory in cgroup.dirs if cgroup is not None else ():
        janitor.tell("cgroup", directory)
    jail = None
    early = None
    mounter: Mounter | None = None
    prepared: Prepared | None = None
    record: tuple[str, int] | None = None
    made: list[Plan] = []  # the plan, once made: its digest is traced at the end
    modes = _terminal_modes()
    try:
        if cfg.egress_jail:
            from claude_sandbox.jail import preflight
            from claude_sandbox.jail import start as jail_start

            def host_ready() -> None:
                preflight.preflight(needs_socat=bool(cfg.local_ports or cfg.callback_ports))

            # Started first: the holder's namespace and pasta's attach are the longest
            # wait, and the facts and the plan are made meanwhile. The holder joins the
            # cgroup itself before it serves anything, and pasta before its exec, so that
            # they, the egress proxy and the session inherit the caps; the launcher never
            # joins (a move between cgroups waits for an RCU grace period, 10-25 ms
            # measured each way) nor leaves. The host's preflight runs while the holder
            # makes its namespaces, and its refusal is the launch's (start.begin).
            early = jail_start.begin(Trace(trace.enabled, "jail"),
                                     cgroup.dirs if cgroup is not None else (), host_ready)
            mounter = _mounter()
        else:
            engine.refuse_if_blocked()  # the jail's preflight asks the same
            sys.stderr.write("claude-sandbox: warning: the egress jail is off (egress-jail = 0): "
                             "the agent shares this container's network, including private "
                             "networks, cloud metadata and services on 127.0.0.1\n")
            mounter = _mounter()
        # Imported only now, with pasta attaching: the facts, the planner, the overlays
        # and git are most of the launcher's imports, and before the jail's start they
        # delayed pasta's attach, the longest wait, by as long (ADR 0004).
        from claude_sandbox.launch import decide, making
        from claude_sandbox.launch.facts import hostfacts
        from claude_sandbox.launch.planner import plan
        from claude_sandbox.launch.session import notices, state

        notices.at_start(profile, cfg, environ, limit_plan, agent=request.command is None)
        store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
        if cfg.state_dir is not None:
            notices.squatted_store(cfg.state_dir, store)

        if plan.masks_root_only(os.getuid()):
            # Where the walk has a cache (the trees no view shows, ADR 0020), the helper,
            # forked first (run.py), reads it and every cached directory's time while the
            # rest is planned (ADR 0015). It read the store run.py found ahead of the
            # configuration; where that is not this launch's, a new helper reads this one's.
            from claude_sandbox.launch.facts.rootcache import CACHE_NAME

            cache = os.path.join(store, CACHE_NAME)
            if helper is not None and helper.cache != cache:
                _stop_helper(helper)
                helper = None
            if helper is None and os.path.exists(cache):  # else the views may do it all
                from claude_sandbox.launch.session import procmask

                helper = procmask.start_helper(cache)
        elif helper is not None:  # run.py's rule and the planner's disagree: none early
            _stop_helper(helper)
            helper = None
        gathered, broker, the_plan = decide.decide(configured, request, environ, keep_ignored,
                                                   store)
        made.append(the_plan)
        trace.phase("plan")
        # A root launch's views are asked for now: its mounter makes them while the jail
        # starts and the rest is prepared.
        first = making.ask_first(the_plan, gathered.facts, store, mounter)
        if the_plan.jail is not None and early is not None:
            from claude_sandbox.jail import session  # only a jailed launch pays for it

            # From here the jail owns what `early` started, and ends it even when
            # start() fails: abandoning it again would close descriptors twice.
            handed, early = early, None
            jail = session.start(the_plan.jail, handed)
            trace.phase("jail started")
        started = time.time_ns()
        forked, helper = helper, None  # prepare() ends it, whatever happens there
        prepared = making.prepare(the_plan, cfg, gathered.facts, store, forked, mounter,
                                  first)
        if jail is not None:
            record = making.egress_record(store, the_plan, cfg)  # in the store prepare() made
        trace.phase("prepared")
        # The launcher always waits: git's changes are applied, cgroups removed and the
        # session's changes reported only by a process that outlives the sandbox.
        env = dict(the_plan.env)
        overlays = [(layer.view.target, layer.upper, layer.work, layer.view.target)
                    for layer in prepared.layers]
        if jail is not None:
            # Its teardown begins as the session ends and is waited for below, after the
            # workspace's exit: pasta's and the proxy's exits pass meanwhile.
            status = jail.run(prepared.argv, env, prepared.fds, overlays,
                              record[1] if record else -1, broker, close=False,
                              views=making.views_request(prepared))
        else:
            status = limits.run_supervised(prepared.argv, env, cgroup, pass_fds=prepared.fds,
                                           overlays=overlays,
                                           root_views=(prepared.views, prepared.view_fds))
        trace.phase("session ended")
        # The collector was off from the launch's start (__main__.py) through the session,
        # which the launcher spent in waitpid. The workspace's exit makes as much as the
        # workspace holds: the collector runs again for it, over what is made from here
        # on; what the set-up made is frozen, never walked again (its garbage, 20 to 140 KiB
        # measured, is held until the launch ends).
        gc.freeze()
        gc.enable()
        notices.caps(cgroup.events() if cgroup is not None else {}, status, limit_plan)
        for line in prepared.imported:  # a full-screen agent covered the first telling
            sys.stderr.write(f"claude-sandbox: first launch: {line}\n")
        if prepared.imported:
            sys.stderr.write(f"claude-sandbox: first launch: {the_plan.agent}'s home inside "
                             f"is {gathered.facts.store_home} (`claude-sandbox state show`)\n")
        making.workspace_exit(cfg, the_plan, prepared, started)
        if jail is not None:
            jail.close()  # the proxy has recorded what was still open, and exited
        if record is not None and the_plan.jail is not None:
            notices.egress(record[0], the_plan.jail.egress_policy)
            from claude_sandbox.jail import egressrecord

            egressrecord.prune(os.path.dirname(record[0]), record[0])
        trace.phase("workspace applied and reported")
        return status
    finally:
        if mounter is not None:  # not asked for views, or asked: ended either way
            mounter.stop()
        if record is not None:
            os.close(record[1])
        if jail is not None:
            jail.close()
        elif early is not None:
            early.abandon()
        if prepared is not None:
            from claude_sandbox.launch import making

            making.undo(prepared)  # first: the /proc helper is reaped before the cgroup goes
        if helper is not None:  # the launch stopped before it planned
            _stop_helper(helper)
        if cgroup is not None:
            cgroup.remove()
        _restore_terminal(modes)
        # The plan's digest (`explain` prints the same), also for a launch that failed
        # after its plan; worked out only now that nothing waits on it (Trace.note).
        if made:
            trace.note(lambda: _digest(made[0]))


def _mounter() -> Mounter | None:
    """On a root launch, the views' mounter (ADR 0020), forked right after the holder;
    where it cannot make them, it says so when asked, and the walk covers root's files."""
    if os.getuid() != 0:
        return None
    from claude_sandbox.core import unowned

    return unowned.start()


def _digest(the_plan: Plan) -> str:
    from claude_sandbox.launch.planner import render  # a traced launch alone renders it

    return f"plan digest {render.digest(the_plan)}"


def _stop_helper(helper: Helper) -> None:
    """End a late-mount helper the launch no longer needs, its end of the socket closed.
    procmask is loaded already wherever there is a helper (run.py forked it); the
    planning modules may not be, and an error path must not depend on importing them."""
    from claude_sandbox.launch.session import procmask

    procmask.stop(helper, close=True)


# libc's own struct termios, kept whole (glibc's is 60 bytes on 64-bit Linux): libc's
# tcgetattr and tcsetattr, not the termios module, whose loading was 0.5 ms of every
# launch (ADR 0004). TCSADRAIN: applied once the output queued before it is written.
_TERMIOS_SIZE = 256
_TCSADRAIN = 1


def _terminal_modes() -> bytes | None:
    """The launching terminal's modes, to give back whatever state the agent leaves it in."""
    if not os.isatty(0):
        return None
    modes = libc.string_buffer(b"", _TERMIOS_SIZE)
    return modes.raw if libc.load_libc().tcgetattr(0, modes) == 0 else None


def _restore_terminal(modes: bytes | None) -> None:
    """An agent killed in raw mode leaves the terminal unusable; the shell gets it back sane.

    Only from the terminal's foreground group: a background launch writing the
    modes would be stopped by SIGTTOU.
    """
    if modes is None:
        return
    try:
        if os.tcgetpgrp(0) == os.getpgrp():
            libc.load_libc().tcsetattr(0, _TCSADRAIN, libc.string_buffer(modes, _TERMIOS_SIZE))
    except OSError:
        pass
