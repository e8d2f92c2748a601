"""Every row of the plan has a closed kind, a reason and the numbered check that proves it.

The plans are this host's (each agent, each level this user may launch) and the
representative ones the reference page renders (docs/reference/mounts.md), root's too.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from claude_sandbox.core.record import replace
from claude_sandbox.launch import decide
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.configure.request import Request
from claude_sandbox.launch.facts import gather, hostfacts
from claude_sandbox.launch.planner import limits, mounts, plan
from claude_sandbox.launch.session import state
from claude_sandbox.tools import render as pages

CATALOGUE = Path(__file__).resolve().parents[2] / "verification" / "checks.yaml"
NAMED = re.compile(r"\bchecks? (\d\d)((?:(?:, | and |-)\d\d)*)")


def _numbers() -> set[str]:
    return {str(check["number"]) for check in yaml.safe_load(CATALOGUE.read_text())["checks"]}


def _checks(reason: str) -> list[str]:
    return [number for match in NAMED.finditer(reason)
            for number in re.findall(r"\d\d", match.group(0))]


def _host_plans(workspace: Path) -> list[plan.Plan]:
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "xterm"}
    levels = ("standard", "harsh") if os.getuid() == 0 else ("standard", "harsh", "brokered")
    made = []
    for agent in ("claude", "codex", "pi"):
        configured = decide.configure(agent, environ)
        for level in levels:
            cfg = replace(configured.cfg, hardening=level)
            store = state.store_root(cfg.state_dir, hostfacts.login_home(), os.getuid())
            gathered = gather.gather(configured.profile, cfg,
                                     Request(agent=agent, command=None, args=()), environ, (),
                                     store)
            made.append(plan.make(configured.profile, cfg, gathered, configured.limit_plan))
    return made


def _representative_plans() -> list[plan.Plan]:
    made = []
    for profile in profiles.PROFILES:
        for uid in (1000, 0):
            facts = replace(pages.representative_facts(profile), uid=uid)
            gathered = gather.Gathered(
                facts=facts, layout=pages.representative_layout(),
                command=(facts.real_binary,), gitconfig="", codex_config="", resolv_conf="",
                host_addresses=(), keep_ignored=(), environ=())
            made.append(plan.make(profile, config.Config(), gathered,
                                  limits.LimitPlan((), (), ())))
    return made


@pytest.fixture
def plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[plan.Plan]:
    workspace = tmp_path / "project"
    workspace.mkdir()
    monkeypatch.chdir(workspace)
    return [*_host_plans(workspace), *_representative_plans()]


def test_every_row_names_a_check_the_catalogue_has(plans: list[plan.Plan]) -> None:
    known = _numbers()
    unproved, unknown = set(), set()
    for made in plans:
        rows = [(m.kind, m.dest, m.reason) for m in made.mounts]
        rows += [("option", " ".join(o.args), o.reason) for o in made.options]
        rows += [(f"late {row.kind}", row.what, f"{row.reason} (check {row.check})")
                 for row in made.late]
        for kind, what, reason in rows:
            named = _checks(reason)
            if not named:
                unproved.add(f"{kind} {what}: {reason}")
            unknown |= {f"{kind} {what}: check {n}" for n in named if n not in known}
    assert not unproved, "\n".join(sorted(unproved))
    assert not unknown, sorted(unknown)


def test_every_row_has_a_closed_kind(plans: list[plan.Plan]) -> None:
    for made in plans:
        assert {m.kind for m in made.mounts} <= set(mounts.MOUNT_KINDS)
        assert {row.kind for row in made.late} <= set(plan.LATE_KINDS)
