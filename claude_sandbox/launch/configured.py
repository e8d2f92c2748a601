"""The configuration and the caps for one agent: all a launch must know before its jail
starts.

A jailed launch starts the jail's holder and pasta's attach, its longest wait, as soon as
it knows the jail is on and which cgroup the caps need; the planning modules are imported
after that (steps.py, ADR 0004). So this module imports only the configuration's parser,
the profiles and the caps' planner, never the facts or the plan.
"""

from __future__ import annotations

import os

from claude_sandbox.core.record import record
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.planner import limits
from claude_sandbox.launch.session import cgroups

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


@record
class Configured:
    """What the operator's file says for this agent, and the caps it asks for here."""

    profile: profiles.Profile
    cfg: config.Config
    limit_plan: limits.LimitPlan


def configure(agent: str, environ: Mapping[str, str]) -> Configured:
    """The agent's profile, the configuration for it, and the caps this host can hold."""
    profile = profiles.get(agent)
    cfg = config.load(profile.name, environ)
    limit_plan = limits.plan_limits(cfg.max_pids, cfg.max_memory, cgroups.probe_cgroups(),
                                    os.getuid())
    return Configured(profile, cfg, limit_plan)
