"""The facts a launch reads before its plan is made: host, workspace, command, files.

Everything the pure planner (plan.py) needs from the file system, the
password database, the workspace's git directory and /proc is read here, once,
into a frozen `Gathered`.
`claude-sandbox explain` gathers the same facts the same way and creates
nothing; the launch then makes what the plan needs (making.py).
"""

from __future__ import annotations

import os

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_JAIL, SandboxError
from claude_sandbox.core.record import record
from claude_sandbox.launch.configure import config, profiles
from claude_sandbox.launch.configure.request import Request
from claude_sandbox.launch.facts import credentials, gitconfig, hostfacts, workspace
from claude_sandbox.launch.overlay import controlfiles, gitrepo
from claude_sandbox.launch.planner import brokered, environment, mounts
from claude_sandbox.launch.planner.mounts import Writable
from claude_sandbox.launch.session import state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence


@record
class Gathered:
    facts: hostfacts.HostFacts
    layout: Writable  # the writable roots, checked, and the control files each holds
    command: tuple[str, ...]  # what the inner stage execs, argv[0] absolute as the inside sees it
    gitconfig: str  # the curated gitconfig's text (gitconfig.py)
    codex_config: str | None  # codex's managed config for inside, for a codex launch
    resolv_conf: str  # the host's /etc/resolv.conf: the jail keeps its search list
    host_addresses: tuple[str, ...]  # with the jail on: this namespace's own addresses
    keep_ignored: tuple[str, ...]  # terminal signals the launch inherited ignored
    environ: tuple[tuple[str, str], ...]  # the launching variables the sandbox may take
    runners: brokered.Runners | None = None  # hardening = brokered only (brokered.py)
    # The credentials the agent holds only as sentinels (credentials.py): real values
    # here, for the proxy; the plan takes only the rest.
    credentials: credentials.Brokered = credentials.Brokered()
    trust: tuple[str, str] | None = None  # the system bundle's path, its text inside
    # With the jail on: the proxy the network requires (upstreamproxy.Upstream.encode),
    # and the line that says why a proxy variable set here is not used.
    upstream: tuple[str, str] = ("", "")


def gather(profile: profiles.Profile, cfg: config.Config, request: Request,
           environ: Mapping[str, str], keep_ignored: tuple[str, ...], store: str) -> Gathered:
    """The facts of this launch. `store`: the one the launch chose (state.store_root),
    never chosen again here: with a shared state-dir, another user who makes or removes
    the squat in between would part the store the plan binds from the one the launch
    makes and checks, and could own the directory the agent's home is then bound from."""
    home = hostfacts.login_home()
    facts = hostfacts.probe(environ, agent=profile.name,
                            wanted=mounts.optional_paths(home),
                            tmp_base=profile.tmp_dir,
                            store_home=state.agent_home(store, profile.name),
                            toolchains=[os.path.join(home, t) for t in mounts.TOOLCHAINS],
                            secrets=mounts.TOOLCHAIN_SECRETS,
                            state_dir=cfg.state_dir)
    layout = resolve_writable(cfg, facts, store)
    if request.command is None:
        command: tuple[str, ...] = (facts.real_binary, *profiles.agent_args(profile, request.args))
    else:
        inner = environment.inner_path(facts)
        hidden = (*facts.runtime_dirs, "/tmp", "/dev")  # fresh inside: nothing of outside
        seen_as = hostfacts.inside_view(facts.home, facts.store_home, hidden)
        shown = (layout.workspace, *layout.allow_write, *layout.allow_read)

        def inside(directory: str) -> str | None:  # what is bound in shows through
            return directory if mounts.under(directory, shown) else seen_as(directory)

        command = (resolve_command(request.command, inner, inside, facts.cwd),
                   *request.command[1:])
    brokered_now = credentials.broker(cfg.credential, environ,
                                      {} if cfg.no_forge else credentials.read_forge(facts.home))
    passed = {name: environ[name] for name in environment.passed_names(cfg, environ)}
    passed.update(brokered_now.env)  # each brokered variable holds its sentinel instead
    host = _host_addresses() if cfg.egress_jail else ()
    return Gathered(
        facts=facts,
        layout=layout,
        command=command,
        gitconfig=gitconfig.render(gitconfig.identity(facts.user, facts.home),
                                   gitconfig.forge_helpers(cfg.no_forge)),
        codex_config=_codex_config() if profile.name == "codex" else None,
        resolv_conf=_read_text("/etc/resolv.conf"),
        host_addresses=host,
        keep_ignored=keep_ignored,
        environ=tuple(passed.items()),
        runners=(brokered.read(command[0], facts.real_root, environ,
                               (*profile.direct_tools, *cfg.agent_exec))
                 if cfg.hardening == "brokered" else None),
        credentials=brokered_now,
        upstream=upstream_proxy(environ, host) if cfg.egress_jail else ("", ""),
    )


def upstream_proxy(environ: Mapping[str, str], host: tuple[str, ...]) -> tuple[str, str]:
    """The proxy the launching environment names, for the egress proxy to chain to:
    (its encoding, "") or ("", why it is not used). Not using one is no loss of
    defence: the egress proxy then connects directly, as the line says."""
    from claude_sandbox.jail import upstreamproxy

    direct = "; the egress proxy connects directly"
    try:
        found = upstreamproxy.from_environ(environ)
    except upstreamproxy.UpstreamError as exc:
        return "", f"{exc}{direct}"
    if found is None:
        return "", ""
    import _socket

    try:
        address = str(_socket.getaddrinfo(found.host, found.port, _socket.AF_INET,
                                          _socket.SOCK_STREAM)[0][4][0])
    except (OSError, UnicodeError) as exc:
        return "", f"{found.origin}: {found.host} does not resolve here ({exc}){direct}"
    if address.startswith("127.") or any(
            upstreamproxy.in_cidr(address, h) for h in host):
        return "", (f"{found.origin}: {found.host} ({address}) is this host's own address, "
                    f"which the jail does not reach{direct}")
    return upstreamproxy.Upstream(found.host, found.port, found.auth, found.exempt,
                                  found.origin, address).encode(), ""


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _codex_config() -> str:
    """codex's managed config as inside sees it (codexconfig.py)."""
    from claude_sandbox.launch.planner import codexconfig

    return codexconfig.inside(config.read_file(paths.CODEX_MANAGED_CONFIG) or "")


def resolve_writable(cfg: config.Config, facts: hostfacts.HostFacts, store: str) -> Writable:
    """The writable roots, each checked, and the control files each holds."""
    rules = workspace.PathRules(
        home=facts.home,
        homes=hostfacts.login_homes(facts.home),
        path_dirs=tuple(os.path.realpath(p) for p in facts.path if p.startswith("/")),
        store=store,
    )
    where = cfg.origins.get("workspace-root", "the launch directory")
    root = workspace.check_writable(
        cfg.workspace_root or facts.cwd, rules, what="workspace", where=where
    )
    extra = tuple(
        workspace.check_writable(
            path, rules, what="allow-write path", directory=False,
            where=cfg.path_origins.get(path, "allow-write"),
        )
        for path in cfg.allow_write
    )
    table = controlfiles.controls(cfg.protect, cfg.unprotect)
    plans = []
    for top in (root, *extra):
        if not os.path.isdir(top):
            continue
        rows = derived_controls(top, facts)
        kinds, links = controlfiles.survey(top, table, rows)
        made = controlfiles.plan(top, table, rows, kinds, links)
        linked = controlfiles.linked_from(top, made.views)
        if linked:  # what links in the held directories name is held too, read-only
            rows = [*rows, *linked]
            kinds, links = controlfiles.survey(top, table, rows)
            made = controlfiles.plan(top, table, rows, kinds, links)
        plans.append(made)
    readable = tuple(workspace.check_readable(path, rules,
                                              where=cfg.path_origins.get(path, "allow-read"))
                     for path in cfg.allow_read)
    on_path = tuple(path for path in rules.path_dirs
                    if workspace.readable_refusal(path, rules) is None)
    return Writable(root, extra, tuple(plans), gitrepo.find(root), readable, on_path)


def derived_controls(top: str, facts: hostfacts.HostFacts) -> list[tuple[str, str]]:
    """Control paths this host makes: PATH directories ahead of the system's."""
    rows = []
    for entry in facts.path:
        resolved = os.path.realpath(entry) if entry.startswith("/") else ""
        if resolved in paths.SYSTEM_DIRS or resolved == paths.SHIM_DIR:
            break  # after the system directories a planted name shadows nothing
        if resolved.startswith(top + "/") and os.path.isdir(resolved):
            rows.append((resolved[len(top) + 1 :], "on the launching PATH ahead of the system "
                         "directories: a program planted here runs in the user's shell"))
    return rows


def _host_addresses() -> tuple[str, ...]:
    """This network namespace's own addresses and gateways, read before the jail exists."""
    from claude_sandbox.jail.routes import host_addresses

    texts = []
    for name in ("/proc/net/fib_trie", "/proc/net/route"):
        try:
            with open(name, "rb") as handle:
                texts.append(handle.read().decode("ascii", "replace"))
        except OSError as error:
            raise SandboxError(f"egress jail: cannot read {name} ({error.strerror}): the "
                               "host's addresses must be known to block them", EXIT_JAIL) from None
    return host_addresses(texts[0], texts[1])


def resolve_command(command: Sequence[str], path: str,
                     seen_as: Callable[[str], str | None] = lambda d: d, cwd: str = "/") -> str:
    """argv[0] of a `shell` command, found on the inner PATH as the inside sees it; a
    path (`./script.sh`) from `cwd`, the directory the session starts in.

    `seen_as(directory)` is where the launcher can look at what the sandbox will
    show at that directory, or None where the sandbox shows nothing there (a
    private tmpfs): a pyenv shim in the outer home does not exist inside.
    """
    name = command[0]
    if "/" in name:
        absolute = os.path.normpath(os.path.join(cwd, name))
        if seen_as(os.path.dirname(absolute)) is None:
            raise SandboxError(f"{name}: {os.path.dirname(absolute)} is private inside the "
                               "sandbox (a fresh, empty tmpfs): the program is not there; "
                               "put it in the workspace", 127)
        return absolute

    def inside(directory: str) -> str | None:
        # What comes back read-only from the outer ~/.local/bin is seen where it is.
        if directory.endswith("/.local/bin") and f".local/bin/{name}" in mounts.LOCAL_BIN_TOOLS:
            return directory
        return seen_as(directory)

    found = paths.which(name, path.split(":"), inside)
    if found is None:
        raise SandboxError(f"{name}: command not found on the sandbox's PATH", 127)
    return found
