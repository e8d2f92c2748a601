"""`claude-sandbox verify`: run the numbered checks inside the real sandbox.

The runner stays outside. It plants what the checks look for (a canary in an
outer process's environment, GH_TOKEN/OPENAI_API_KEY/DISPLAY in the launch
environment, a listener on the outer 127.0.0.1, an abstract socket, a socket
in the outer /tmp), writes the outside facts to a JSON file in a private
temporary workspace, and launches pytest there through the real shim, so the
checks see exactly what an agent sees. Secrets never ride on a command line:
the inside gets only the canary's prefix and hash. pytest writes its report
into the same workspace; the runner adds the checks only the outside can
judge (27, 35), renders the table and exits 1 on any FAIL or ESCAPED.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from claude_sandbox.core import paths
from claude_sandbox.launch.configure import profiles
from claude_sandbox.launch.session import state
from claude_sandbox.tools.verifyfacts import TOOLS_PYTHON, brokered_facts, gather
from claude_sandbox.tools.verifyplant import forge_root_only_cache, plant, plant_store_canary
from claude_sandbox.tools.verifyshow import FAILING, Row, render_plain, render_rich, write_junit

INSTALLED_CHECKS = f"{paths.LIBEXEC}/verification"
SHIM = f"{paths.SHIM_DIR}/claude-sandbox"
LAUNCH_TIMEOUT = 600


def load_catalogue(directory: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(directory, "checks.yaml").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def shim_prefix(agent: str) -> list[str]:
    return [SHIM, "shell", "--agent", agent, "--"]


def _inside_argv(prefix: Sequence[str], directory: str, workdir: str, adversarial: bool,
                 files: Sequence[str] = ("test_checks.py", "test_brokered.py"),
                 report: str = "report.json") -> list[str]:
    tests = [os.path.join(directory, name) for name in files]
    if adversarial and "test_checks.py" in files:
        tests.append(os.path.join(directory, "test_adversarial.py"))
    select = [] if adversarial else ["-k", "not test_a"]
    return [*prefix, TOOLS_PYTHON, "-I", "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "--rootdir", directory, "-c", os.path.join(directory, "pytest.ini"), *tests,
            *select, "--csbx-facts", os.path.join(workdir, "facts.json"),
            "--csbx-report", os.path.join(workdir, report)]


@dataclass(frozen=True, slots=True)
class Launch:
    status: int
    output: str
    rows: tuple[dict[str, Any], ...] | None  # None: no report came back


def launch(prefix: Sequence[str], directory: str, workdir: str, environ: Mapping[str, str],
           adversarial: bool, inherited: Sequence[int] = (), brokered: bool = False) -> Launch:
    """`inherited`: descriptors the launcher gets, as from whatever started it.

    `brokered`: the agent's commands run through a command server, so the catalogue
    runs twice. First as the agent itself (test_brokered.py: the side doors of its own
    process), then as a command the agent starts (`sh -c`, through the server): where
    every other check applies. The rows of both are one report."""
    if brokered:
        own = launch_once(_inside_argv(prefix, directory, workdir, adversarial,
                                       ("test_brokered.py",), "report-agent.json"),
                          workdir, environ, inherited, "report-agent.json")
        command = [*prefix, "/bin/sh", "-c", 'exec "$0" "$@"']
        rest = launch_once(_inside_argv(command, directory, workdir, adversarial),
                           workdir, environ, inherited)
        rows = None if own.rows is None or rest.rows is None else own.rows + rest.rows
        return Launch(rest.status or own.status, own.output + rest.output, rows)
    argv = _inside_argv(prefix, directory, workdir, adversarial)
    return launch_once(argv, workdir, environ, inherited)


def launch_once(argv: Sequence[str], workdir: str, environ: Mapping[str, str],
                inherited: Sequence[int], report_name: str = "report.json") -> Launch:
    process = subprocess.Popen(argv, cwd=workdir, env=dict(environ), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               pass_fds=tuple(inherited))
    late = Path(workdir, "late.json")
    late.with_suffix(".part").write_text(json.dumps({"launcher_pid": process.pid}))
    late.with_suffix(".part").replace(late)
    try:
        output, _ = process.communicate(timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    report = Path(workdir, report_name)
    rows = None
    if report.exists():
        rows = tuple(json.loads(report.read_text(encoding="utf-8"))["rows"])
    return Launch(process.returncode, output.decode(errors="replace"), rows)


def _adversarial_outcome(row: dict[str, Any]) -> tuple[str, str]:
    detail = str(row.get("detail", ""))
    if row["outcome"] == "PASS":
        return "BLOCKED", detail
    if row["outcome"] == "FAIL":
        return "ESCAPED", detail
    if detail.startswith("EXPOSED"):
        return "EXPOSED", detail.removeprefix("EXPOSED").lstrip(": ")
    return "SKIP", detail


def merge(catalogue: dict[str, Any], inside: Launch, outside: Sequence[Any],
          adversarial: bool) -> list[Row]:
    by_id: dict[str, dict[str, Any]] = {}
    for row in inside.rows or ():
        by_id.setdefault(row["id"], row)  # a parametrised check: its first failure wins
        if row["outcome"] == "FAIL":
            by_id[row["id"]] = row
    for result in outside:
        by_id[result.number] = {"outcome": result.outcome, "detail": result.detail}
    missing = "the sandbox did not start" if inside.rows is None else "not run (no result)"
    rows = []
    for check in catalogue["checks"]:
        got = by_id.get(check["number"])
        if got is None:
            rows.append(Row(check["number"], check["name"], "FAIL", missing))
        else:
            rows.append(Row(check["number"], check["name"], got["outcome"], got["detail"]))
    if adversarial:
        for attempt in catalogue.get("adversarial", []):
            got = by_id.get(attempt["id"])
            if got is None:
                rows.append(Row(attempt["id"], attempt["name"], "ESCAPED"
                                if inside.rows is not None else "FAIL", missing, "adversarial"))
            else:
                outcome, detail = _adversarial_outcome(got)
                rows.append(Row(attempt["id"], attempt["name"], outcome, detail, "adversarial"))
    return rows


@contextlib.contextmanager
def workspace() -> Iterator[str]:
    # A directory of our own, 0700: it becomes the sandbox's writable root and
    # carries the facts in and the report out.
    workdir = tempfile.mkdtemp(prefix="claude-sandbox-verify-", dir="/tmp")
    try:
        yield os.path.realpath(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_suite(agent: str, *, directory: str = INSTALLED_CHECKS,
              prefix: Sequence[str] | None = None, adversarial: bool = False,
              environ: Mapping[str, str] | None = None, outside_checks: bool = True,
              run_agents: bool = True, echo: Sequence[str] | None = None
              ) -> tuple[list[Row], Launch]:
    """Run the catalogue for `agent`; `prefix` runs a command inside (default: the shim)."""
    sys.path.insert(0, directory)
    outside_module = importlib.import_module("outside")  # verification/outside.py
    users_module = importlib.import_module("outside_users")  # probes as another user
    git_module = importlib.import_module("outside_git")  # checks 98 to 100 and 106
    store_module = importlib.import_module("outside_store")  # checks 101 and 105
    fds_module = importlib.import_module("outside_fds")  # checks 102 and 103

    sys.path.remove(directory)
    base_env = dict(os.environ if environ is None else environ)
    catalogue = load_catalogue(directory)
    with workspace() as workdir:
        fixtures, planted_facts, planted_env = plant(workdir)
        try:
            facts = {**gather(agent, workdir, base_env), **planted_facts}
            facts["store_canary"] = plant_store_canary(fixtures, facts["store_root"])
            facts["forged_cache"] = forge_root_only_cache(fixtures, facts["store_root"])
            facts.update(brokered_facts(facts, {**base_env, **planted_env}))
            Path(workdir, "facts.json").write_text(json.dumps(facts, indent=1))
            results = []
            if outside_checks:
                results.append(outside_module.check_27_workspace_refusal(
                    SHIM, agent, facts["home"], workdir, base_env))
                results.append(outside_module.check_53_environment_only_narrows(
                    SHIM, agent, facts["home"], workdir, base_env, facts["jail_may_widen"]))
                results.append(outside_module.check_48_not_redirectable(
                    SHIM, agent, workdir, base_env))
                results.append(outside_module.check_94_quick_questions_unsteerable(
                    agent, workdir, base_env))
                results.append(outside_module.check_49_killed_launcher(
                    SHIM, agent, workdir, base_env))
                results.append(outside_module.check_60_hang_up_ends_the_session(
                    SHIM, agent, workdir, base_env))
                results.append(outside_module.check_70_git_holds_only_what_git_makes(
                    SHIM, agent, facts["home"], base_env))
                results.append(outside_module.check_71_launcher_git_unsteerable(
                    SHIM, agent, facts["home"], base_env))
                results.append(outside_module.check_73_review_keeps_the_workspace(
                    SHIM, agent, facts["home"], base_env))
                results.append(outside_module.check_74_review_plants_run_nothing_outside(
                    SHIM, agent, facts["home"], base_env))
                results.append(git_module.check_98_git_plants_run_nothing_outside(
                    SHIM, agent, facts["home"], state.agent_home(facts["store_root"], agent),
                    base_env))
                results.append(git_module.check_99_control_files_do_not_come_out_through_git(
                    SHIM, agent, facts["home"], base_env))
                results.append(git_module.check_100_refs_name_only_objects_held(
                    SHIM, agent, facts["home"], base_env))
                results.append(git_module.check_106_git_directory_not_reached_through_a_link(
                    SHIM, agent, facts["home"], base_env))
                results.append(store_module.check_101_egress_records_bounded(
                    SHIM, agent, facts["store_root"], base_env, bool(facts["egress_jail"])))
                results.append(store_module.check_105_store_links_not_followed(
                    SHIM, agent, state.agent_home(facts["store_root"], agent), base_env))
                results.append(fds_module.check_102_no_inherited_descriptor_outside(
                    SHIM, agent, workdir, base_env))
                results.append(fds_module.check_103_sigchld_ignored_launcher(
                    SHIM, agent, workdir, base_env))
                fronted = outside_module.fronted_record(
                    SHIM, agent, facts["home"], base_env, facts["allowed_name"],
                    facts["egress_policy"])
                results.append(outside_module.check_77_allowed_tls_name_reaches_its_host(
                    fronted, facts["allowed_name"]))
                results.append(outside_module.check_78_allowed_http_host_reaches_its_host(
                    fronted, facts["allowed_name"]))
                results.append(outside_module.check_82_dead_proxy_ends_reach(
                    SHIM, agent, facts["home"], base_env, bool(facts["egress_jail"])))
                seen, earlier = outside_module.injection_seen(
                    SHIM, agent, facts["home"], base_env, echo, facts["credential_lines"])
                # For probes A55 and A56 inside: the echo, and a sentinel of another session.
                facts.update(echo=list(echo or ()), earlier_sentinel=earlier,
                             echo_variable=outside_module.echo_variable(
                                 echo, facts["credential_lines"]))
                Path(workdir, "facts.json").write_text(json.dumps(facts, indent=1))
                results += [outside_module.check_85_real_value_at_its_host(seen),
                            outside_module.check_86_sentinel_elsewhere(seen),
                            outside_module.check_87_no_injection_in_the_clear(seen)]
                if adversarial:
                    results.append(users_module.probe_a66_root_only_flood(
                        SHIM, agent, workdir, base_env))
                    results.append(users_module.probe_a67_squatted_scratch(
                        SHIM, agent, workdir, base_env))
                    results.append(users_module.probe_a72_time_set_back(
                        SHIM, agent, workdir, base_env))
            before = outside_module.snapshot()
            inside = launch(shim_prefix(agent) if prefix is None else prefix, directory, workdir,
                            {**base_env, **planted_env}, adversarial,
                            inherited=(fixtures.inherited_fd,),
                            brokered=facts["hardening"] == "brokered")
            if outside_checks:
                results.append(outside_module.check_35_no_leftovers(
                    before, ignore=[workdir, *fixtures.files]))
            else:
                results += [outside_module.Result(number, "SKIP", "outside checks not run")
                            for number in ("27", "48", "49", "60", "35", "53", "70", "71",
                                           "73", "74", "77", "78", "82", "85", "86", "87",
                                           "94", "98", "99", "100", "101", "102", "103", "105",
                                           "106", "A66", "A67", "A72")]
            results += post_checks(inside, facts, run_agents)
        finally:
            fixtures.close()
    return merge(catalogue, inside, results, adversarial), inside


def _full_list(facts: Mapping[str, Any]) -> str:
    """The session-end report's full list (aftermath.py), where a class was cut."""
    from claude_sandbox.launch.overlay import gitrepo
    from claude_sandbox.launch.planner import overlays

    store = os.path.dirname(str(facts["store_home"]))
    path = os.path.join(overlays.workspace_store(store, str(facts["workspace"])),
                        "last-session.txt")
    return gitrepo.read_small(path, 16 << 20) or ""  # never blocks on a planted FIFO


def post_checks(inside: Launch, facts: Mapping[str, Any], run_agents: bool = True
                ) -> list[Any]:
    """Adversarial plants confirmed from outside (they only count when they persisted),
    and check 54's outside half: the real agents started outside run no plant."""
    from claude_sandbox.tools import adversarial

    results: list[Any] = list(adversarial.confirm(inside.rows or (), facts,
                                                  inside.output + _full_list(facts)))
    for row in inside.rows or ():
        if row.get("id") != "54" or not row.get("markers"):
            continue
        refused = row.get("outcome") == "PASS"
        if not run_agents and refused:
            results.append(adversarial.Confirmed("54", "PASS", f"{row.get('detail', '')} "
                                                 "(--quick: the agents were not started)"))
            continue
        from claude_sandbox.tools import unwrapped

        got = unwrapped.run_all(str(facts["workspace"]), str(row["markers"]))
        if refused:
            results.append(adversarial.Confirmed("54", got.outcome, got.detail))
        else:
            results.append(adversarial.Confirmed("54", "FAIL", f"{row.get('detail', '')}; "
                                                 f"{got.detail}"))
    return results


# ------------------------------------------------------------------ output


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="claude-sandbox verify",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--agent", default=os.environ.get("CLAUDE_SANDBOX_AGENT", "claude"),
                        choices=profiles.AGENT_NAMES)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--junit", metavar="FILE")
    parser.add_argument("--plain", action="store_true")
    parser.add_argument("--adversarial", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--echo-host", nargs=2, default=None)
    options = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(INSTALLED_CHECKS, "checks.yaml")):
        print(f"claude-sandbox: no checks at {INSTALLED_CHECKS}; re-run the installer",
              file=sys.stderr)
        return 69
    try:
        rows, inside = run_suite(options.agent, adversarial=options.adversarial,
                                 run_agents=not options.quick, echo=options.echo_host)
    except Exception as error:  # a nameable failure of the runner itself, not a check
        print(f"claude-sandbox: verify could not run: {error}", file=sys.stderr)
        return 70
    if inside.rows is None:
        tail = "\n".join(inside.output.strip().splitlines()[-15:])
        print(f"claude-sandbox: the sandbox did not start (exit {inside.status}):\n{tail}",
              file=sys.stderr)
    if options.junit:
        write_junit(options.junit, rows, options.agent)
    if options.json:
        print(json.dumps({"agent": options.agent, "rows": [asdict(r) for r in rows]}, indent=1))
    elif options.plain:
        print(render_plain(rows))
    else:
        render_rich(rows, options.agent)
    return 1 if any(r.outcome in FAILING for r in rows) or inside.rows is None else 0


if __name__ == "__main__":
    sys.exit(main())
