"""`claude-sandbox explain`: the plan a launch from here would run, made the way it makes it.

One `decide()` for the launch and for this (decide.py); nothing is made: no certificate,
no cache of the root-only walk, no directory.
"""

from __future__ import annotations

import os

from claude_sandbox import __version__
from claude_sandbox.core import paths, record
from claude_sandbox.launch import decide, run
from claude_sandbox.launch.facts import hostfacts
from claude_sandbox.launch.planner import plan, render
from claude_sandbox.launch.session import state


def explain(agent: str, command: tuple[str, ...] | None = None, *,
            as_json: bool = False) -> str:
    """The plan a launch of `agent` (or of `shell -- COMMAND`) from here would run, made
    the way the launch makes it."""
    configured = decide.configure(agent, os.environ)
    profile, cfg = configured.profile, configured.cfg
    store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
    request = run.Request(profile.name, command, ())
    gathered, _, the_plan = decide.decide(configured, request, os.environ,
                                          run.inherited_ignored(), store, make=False)
    if as_json:
        covered, viewed = None, None
        if plan.masks(the_plan, "root-only"):  # as the launch would: views, else the walk's
            from claude_sandbox.launch import making
            from claude_sandbox.launch.facts import rootonly

            walk = rootonly.plan_walk(store, gathered.facts, the_plan.layout, the_plan.mounts)
            made = making.root_views(walk)
            if made is not None:
                viewed, walked = made[0].roots, made[2]
                for fd in made[1]:
                    os.close(fd)
                walk = record.replace(walk, roots=tuple(walked))
            covered = rootonly.covers(walk, save_cache=False) if walk.roots else {}
        return render.explain_json(the_plan, covered, viewed)
    lines = [f"# claude-sandbox {__version__}: the sandbox for {profile.name}",
             f"# configuration: {paths.CONFIG_FILE}"]
    for key, where in sorted(cfg.origins.items()):
        lines.append(f"#   {key} from {where}")
    lines.append(f"# plan {render.digest(the_plan)} (a launch with CLAUDE_SANDBOX_TRACE=1 "
                 "prints the digest of the plan it runs)")
    lines += render.explain_lines(the_plan, paths.find_tool("bwrap") or "bwrap")
    return "\n".join(lines)
