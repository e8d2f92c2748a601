"""Renderings of the one plan: bwrap's command line, `explain`, the reference page.

Each function reads a `Plan` (plan.py) and nothing else of the launch, so what
`claude-sandbox explain` prints is what a launch runs: the same object, drawn
another way. Descriptors appear by name in the plan; `fds` gives them the
numbers a launch opened (or, for explain, the names themselves).
"""

from __future__ import annotations

from claude_sandbox.core import paths
from claude_sandbox.jail.egresspolicy import WEB_PORTS, Rule
from claude_sandbox.launch.planner import pins
from claude_sandbox.launch.planner.mounts import Mount
from claude_sandbox.launch.planner.plan import Plan, masks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

# Descriptor names beyond the data mounts': the seccomp filter, the inner record.
SECCOMP, INNER = "seccomp", "inner"


def mount_args(mount: Mount, fds: Mapping[str, str]) -> tuple[str, ...]:
    """One mount as bwrap's options."""
    if mount.kind == "tmpfs":
        size = ("--size", str(mount.size)) if mount.size is not None else ()
        return (*size, "--tmpfs", mount.dest)
    if mount.kind in ("proc", "dev", "remount-ro"):
        return (f"--{mount.kind}", mount.dest)
    if mount.kind == "data":
        return ("--ro-bind-data", fds[mount.source], mount.dest)
    if mount.kind == pins.PIN:  # a directory of the store, bound from the descriptor checked
        return ("--bind-fd", fds[mount.source], mount.dest)
    return (f"--{mount.kind}", mount.source, mount.dest)


def enter_argv(plan: Plan, fds: Mapping[str, str]) -> list[str]:
    """bwrap's program: the inner stage, reading its record from a descriptor; the
    compiled one where the plan names it (ADR 0017), else `_enter` in Python."""
    return [*([plan.stage] if plan.stage else paths.internal_argv("_enter")), fds[INNER]]


def bwrap_argv(plan: Plan, bwrap: str, fds: Mapping[str, str]) -> list[str]:
    # Every descriptor is required: a missing one is a KeyError, never a sandbox
    # without its seccomp filter.
    args = [arg for options, _ in option_rows(plan, fds) for arg in options]
    return [bwrap, *args, "--", *enter_argv(plan, fds)]


HIDDEN = "<from the launching environment>"


def shown_env(plan: Plan) -> tuple[tuple[str, str], ...]:
    """The environment with pass-env values hidden: they are the operator's secrets."""
    return tuple((name, HIDDEN if name in plan.pass_env else value) for name, value in plan.env)


def as_json(plan: Plan) -> str:
    """The whole plan as JSON, keys in field order, pass-env values hidden: `explain
    --json`, and the digest a launch traces."""
    import json  # explain and the trace only: the launch itself never pays for it

    plain = {name: _plain(getattr(plan, name)) for name in Plan.__annotations__}
    plain["env"] = [list(pair) for pair in shown_env(plan)]
    return json.dumps(plain, indent=1)


def explain_json(plan: Plan, root_only: Mapping[str, bool] | None = None,
                 views: Sequence[str] | None = None) -> str:
    """`explain --json`: the plan, and beside it what is applied outside bwrap's argv, each
    from the code that applies it: the seccomp and Landlock rules, the late masks (on a
    root launch, the trees shown through views, `views`, or where the kernel refuses one,
    the root-only covers of this host, `root_only`), and the jail's routes (for pasta's
    usual addresses) and packet filter."""
    import json
    from errno import errorcode

    from claude_sandbox.inside import landlock
    from claude_sandbox.launch.planner import seccomp

    whole = json.loads(as_json(plan))
    level = plan.inner.level
    whole["kernel_layers"] = {
        "seccomp": [{"call": row.name, "errno": errorcode[row.errno], "why": row.why,
                     "when": " and ".join(seccomp.condition(a) for a in row.args) or None}
                    for row in seccomp.rules_for(level, plan.seccomp_flags)],
        "landlock": {"writable": list(plan.inner.writable),
                     "exec_files": list(plan.inner.exec_files),
                     "rules": landlock.describe(level)},
    }
    # What each row of `late` covers on this host: the root-only entries the launch's own
    # walk finds, every writable mount; the outer tasks are those alive at session start.
    whole["late_masks"] = {
        "outer_proc": masks(plan, "outer-proc"),
        "root_only": sorted(root_only or {}),
        "root_only_views": list(views or ()),
        "noexec": list(plan.inner.writable) if masks(plan, "noexec") else [],
    }
    if plan.jail is not None:
        from claude_sandbox.jail import netfilter, routes

        example = routes.example_plan(plan.jail.allow_ip, plan.jail.host)
        whole["routes"] = [{"type": row.expect.type, "dst": row.expect.dst,
                            "command": row.command, "why": row.why, "required": row.required}
                           for row in example.routes]
        whole["packet_filter"] = {"filter": list(netfilter.FILTER), "nat": list(netfilter.NAT)}
    return json.dumps(whole, indent=1)


def digest(plan: Plan) -> str:
    """A short name for the plan: equal digests, identical plans (a launch traces it)."""
    return paths.sha256_hex(as_json(plan).encode())[:16]


def _plain(value: object) -> object:
    fields = getattr(value, "_fields", None)
    if fields is not None:  # a record or a named tuple
        return {name: _plain(getattr(value, name)) for name in fields}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


def named_fds(plan: Plan) -> dict[str, str]:
    """Descriptor numbers as a person reads them: `<gitconfig>`, `<inner>`."""
    names = ([name for name, _ in plan.data] + [SECCOMP, INNER]
             + [mount.source for mount in plan.mounts if mount.kind == pins.PIN])
    return {name: f"<{name}>" for name in names}


def option_rows(
    plan: Plan, fds: Mapping[str, str] | None = None
) -> list[tuple[tuple[str, ...], str]]:
    """bwrap's options in order, each with its reason: the launch's command line, explain
    and docs/reference/mounts.md (`fds`: the launch's numbers, else `named_fds`)."""
    fds = named_fds(plan) if fds is None else fds
    rows = [(option.args, option.reason) for option in plan.options]
    rows += [(mount_args(mount, fds), mount.reason) for mount in plan.mounts]
    rows += [(("--chdir", plan.cwd), "start where you launched"),
             (("--seccomp", fds[SECCOMP]), "the seccomp filter (check 23)")]
    return rows


def explain_lines(plan: Plan, bwrap: str = "bwrap") -> list[str]:
    """The plan for people: every option and mount with its reason, the rest in words.
    `bwrap`: the program as the host has it (a fact: the caller finds it)."""
    import shlex

    from claude_sandbox.inside import landlock
    from claude_sandbox.launch.planner import limits, seccomp

    fds = named_fds(plan)
    rows = option_rows(plan)

    width = min(48, max(len(shlex.join(args)) for args, _ in rows))
    lines = [f"{bwrap} \\"]
    lines += [f"  {shlex.join(args):<{width}}  # {reason}" for args, reason in rows]
    lines.append(f"  -- {shlex.join(enter_argv(plan, fds))}")
    if plan.views:
        lines.append("# overlays, mounted before bwrap starts; its binds carry them in:")
        lines += [f"  {view.target}  (the agent's writes: {view.store})  # {view.reason}"
                  for view in plan.views]
    links = [link for control in plan.layout.controls for link in control.links]
    if links:
        lines.append("# links on the way to control paths: their targets are held above, "
                     "and a link the session replaces is put back when it ends (check 52):")
        lines += [f"  {link.path} -> {link.text}" for link in links]
    stage = plan.stage or "_enter"
    lines.append(f"# inside, the inner stage ({stage}) applies the kernel layers below, then "
                 "runs:")
    lines.append(f"  {shlex.join(plan.inner.command)}")
    lines.append("# environment (the whole of it; pass-env values hidden):")
    lines += [f"  {name}={value}" for name, value in shown_env(plan)]
    for name, content in plan.data:
        if name == "trust-bundle":  # the system's certificates: their count is enough
            lines.append(f"# <{name}>, bound read-only: the system bundle and the "
                         f"broker's CA, {content.count('BEGIN CERTIFICATE')} certificates")
            continue
        lines.append(f"# <{name}>, bound read-only:")
        lines += [f"  {line}" for line in content.splitlines()]
    level = plan.inner.level  # the seccomp filter's and Landlock's
    lines.append(f"# kernel layers (hardening = {level}):")
    lines += [f"  {line}" for line in seccomp.describe(level, plan.seccomp_flags)]
    lines += [f"  {line}" for line in landlock.describe(level)]
    if masks(plan, "noexec"):
        inside = [path for path in plan.inner.exec_files
                  if any(path.startswith(w.rstrip("/") + "/") for w in plan.inner.writable)]
        lines.append("  EXECUTE where nothing is writable, and in these programs bound "
                     "read-only inside writable trees, unless another mount makes them "
                     "writable too (then the launch says so in one line):")
        lines += [f"    {path}" for path in inside] or ["    (none)"]
    lines += [f"  {line}" for line in limits.describe(plan.limits)]
    if plan.late:
        lines.append("# late masks, made by the launcher's helper before the agent runs "
                     "(`explain --json` lists what each covers):")
        lines += [f"  {row.what}  # {row.reason} (check {row.check})" for row in plan.late]
    if plan.jail is None:
        lines.append("# egress jail: OFF (egress-jail = 0): the container's network is shared")
    else:
        from claude_sandbox.jail import routes

        lines.append("# egress jail: on (a per-launch network namespace; routes below)")
        lines += [f"  {line}" for line in routes.explain_plan(allow_ip=plan.jail.allow_ip)]
        from claude_sandbox.jail import netfilter

        lines.append("# packet filter in the jail (iptables-restore, read back before the "
                     "session): everything to the egress proxy or nowhere")
        lines += [f"  -t {table} {rule}" for table, rules in (("nat", netfilter.NAT),
                                                             ("filter", netfilter.FILTER))
                  for rule in rules]
        lines += egress_lines(plan.jail.egress_policy, plan.jail.rules)
        if plan.jail.upstream:
            from claude_sandbox.jail import upstreamproxy

            chained = upstreamproxy.Upstream.decode(plan.jail.upstream)
            assert chained is not None
            lines.append(f"# upstream proxy ({chained.origin}): what the egress proxy allows "
                         f"goes through {upstreamproxy.shown(chained)} at {chained.address}, "
                         "by CONNECT; the agent cannot reach it itself"
                         + (f"; direct for NO_PROXY's {', '.join(chained.exempt)}"
                            if chained.exempt else ""))
    lines += credential_lines(plan)
    return lines


def credential_lines(plan: Plan) -> list[str]:
    """Each brokered credential, its hosts and where its value is read; never the value."""
    if not plan.credentials:
        return ["# credentials: none brokered (`credential = VAR [HOST,...]` declares one; "
                "a bound forge file's token always is)"]
    lines = ["# credentials (checks 83-87): the agent holds a sentinel; the egress proxy "
             "puts the real value back for these hosts only, over TLS"]
    for credential in plan.credentials:
        lines.append(f"  {credential.variable:<24} {','.join(credential.hosts):<32} "
                     f"from {credential.source}")
    return lines


def egress_lines(policy: str, rules: tuple[Rule, ...]) -> list[str]:
    """The egress proxy's policy, and each allowed name with the preset it came from."""
    if policy != "allow-list":
        return [f"# egress proxy: egress-policy = {policy}: every public name, each "
                "connection recorded (`claude-sandbox log`)"
                + ("; the session ends with the allow-domain lines it needed"
                   if policy == "learn" else "")]
    lines = ["# egress proxy: egress-policy = allow-list (checks 75-81): TLS by server name, "
             "HTTP by Host, other TCP only by a NAME:PORT line; everything else refused"]
    for rule in rules:
        ports = "80, 443" if rule.ports == WEB_PORTS else ", ".join(map(str, rule.ports))
        origin = f"@{rule.origin}" if rule.origin else "allow-domain"
        lines.append(f"  {rule.pattern:<32} {ports:<8} {origin}")
    return lines
