"""The pure planner and its bwrap rendering over a matrix of hosts and configurations."""

from __future__ import annotations

import itertools

import pytest

from claude_sandbox.core import paths
from claude_sandbox.core.errors import EXIT_REFUSED, SandboxError
from claude_sandbox.core.record import replace
from claude_sandbox.launch.configure import profiles
from claude_sandbox.launch.configure.config import Config
from claude_sandbox.launch.facts.gather import Gathered
from claude_sandbox.launch.facts.hostfacts import GuardEntry, HostFacts, path_facts
from claude_sandbox.launch.overlay import controlfiles
from claude_sandbox.launch.overlay.gitrepo import Repository
from claude_sandbox.launch.planner import environment, mounts, plan, render
from claude_sandbox.launch.planner.limits import LimitPlan
from claude_sandbox.launch.planner.mounts import Writable

HOME_ROOT = "/root"
HOME_USER = "/home/dev"


def facts(
    *,
    uid: int = 1000,
    existing: tuple[str, ...] = (),
    guard: tuple[GuardEntry, ...] = (),
    agent: str = "claude",
    real: str | None = None,
    root: str | None = None,
) -> HostFacts:
    home = HOME_ROOT if uid == 0 else HOME_USER
    real = real or f"/usr/libexec/claude-sandbox/agents/bin/{agent}"
    return HostFacts(
        uid=uid,
        gid=uid,
        user="root" if uid == 0 else "dev",
        home=home,
        cwd="/work/project",
        **path_facts(("/usr/local/bin", "/usr/bin", "/bin")),
        existing=frozenset(existing),
        real_binary=real,
        real_root=root or real,
        guard=guard,
        agent_tmp="/var/tmp/claude-agent" if agent == "claude" else None,
        store_home=f"{home}/.local/state/claude-sandbox/{agent}/home",
        runtime_dirs=("/run", "/var/tmp"),
        root_entries=(("bin", "usr/bin"), ("etc", None), ("home", None), ("lib", "usr/lib"),
                      ("opt", None), ("root", None), ("srv", None), ("usr", None), ("var", None),
                      ("work", None)),
        sockets=("/opt/app/app.sock", "/work/project/dev.sock", "/run/docker.sock",
                 f"{home}/.gnupg/S.gpg-agent"),
    )


def layout(allow_write: tuple[str, ...] = (), *, repo: bool = False) -> Writable:
    """The workspace /work/project; with `repo`, a git repository, a .vscode directory and
    a .mcp.json file."""
    present = {".vscode": "dir", ".mcp.json": "file"}
    table = controlfiles.controls((), ())
    root = "/work/project"
    kinds = {path: (present.get(path[len(root) + 1 :]) if repo else None)
             for path in controlfiles.candidates(root, table, ())}
    repos = (Repository(f"{root}/.git", root, "the workspace's .git"),) if repo else ()
    return Writable(root, allow_write, (controlfiles.plan(root, table, (), kinds),), repos)


FDS = {"gitconfig": "5", "seccomp": "6", "resolv-conf": "7", "codex-config": "8", "inner": "9"}


def build(
    profile_name: str = "claude",
    cfg: Config | None = None,
    host: HostFacts | None = None,
    allow_write: tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
    repo: bool = False,
    limits: LimitPlan | None = None,
) -> plan.Plan:
    profile = profiles.get(profile_name)
    host = host or facts(agent=profile_name)
    cfg = cfg or Config(egress_jail=False)
    environ = environ or {}
    gathered = Gathered(
        facts=host, layout=layout(allow_write, repo=repo), command=("/real/agent",),
        gitconfig="[user]\n", codex_config="" if profile_name == "codex" else None,
        resolv_conf="search example.test\nnameserver 10.0.0.2\n", host_addresses=(),
        keep_ignored=(),
        environ=tuple((n, environ[n]) for n in environment.passed_names(cfg, environ)),
    )
    return plan.make(profile, cfg, gathered, limits or LimitPlan((), (), ()))


def flat(made: plan.Plan) -> list[str]:
    pinned = {m.source: "4" for m in made.mounts if m.kind == "pin"}  # mountpoints.make's
    return render.bwrap_argv(made, "/usr/bin/bwrap", {**FDS, **pinned})


def index_of(argv: list[str], *sequence: str) -> int:
    for i in range(len(argv) - len(sequence) + 1):
        if tuple(argv[i : i + len(sequence)]) == sequence:
            return i
    raise AssertionError(f"{sequence} not in argv")


def assert_order(argv: list[str], *sequences: tuple[str, ...]) -> None:
    positions = [index_of(argv, *seq) for seq in sequences]
    assert positions == sorted(positions), list(zip(sequences, positions, strict=True))


ALL_EXISTING = (
    f"{HOME_USER}/.config/gh",
    f"{HOME_USER}/.config/glab-cli",
    f"{HOME_USER}/.local/bin/uv",
    f"{HOME_USER}/.local/bin/uvx",
    "/run/user",
    "/run/secrets",
    "/run/docker.sock",
)


@pytest.mark.parametrize(
    ("uid", "no_forge", "jailed", "profile_name"),
    list(itertools.product((0, 1000), (False, True), (False, True), profiles.AGENT_NAMES)),
)
def test_matrix_skeleton_and_order(
    uid: int, no_forge: bool, jailed: bool, profile_name: str
) -> None:
    home = HOME_ROOT if uid == 0 else HOME_USER
    existing = tuple(p.replace(HOME_USER, home) for p in ALL_EXISTING)
    host = facts(uid=uid, existing=existing, agent=profile_name)
    cfg = Config(no_forge=no_forge, egress_jail=jailed)
    argv = flat(build(profile_name, cfg, host, ("/srv/cache",), repo=True))
    store = host.store_home

    assert argv[0] == "/usr/bin/bwrap"
    for option in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert option in argv
    assert "--clearenv" not in argv and "--setenv" not in argv  # values never on a command line
    assert "--new-session" not in argv  # it breaks job control in a TUI (ADR 0000 §9)
    assert "--unshare-net" not in argv  # the network is the jail's (or the container's)
    assert_order(
        argv,
        ("--cap-drop", "ALL"),
        ("--ro-bind", "/usr", "/usr"),
        ("--dev", "/dev"),
        ("--tmpfs", "/tmp"),
        ("--tmpfs", "/run"),
        ("--tmpfs", "/var/tmp"),
        ("--ro-bind", paths.EMPTY_FILE, "/opt/app/app.sock"),
        ("--bind", store, home),
        ("--ro-bind", paths.EMPTY_FILE, f"{home}/.netrc"),
        ("--bind", "/work/project", "/work/project"),
        ("--bind", "/srv/cache", "/srv/cache"),
        ("--ro-bind", "/work/project/.mcp.json", "/work/project/.mcp.json"),
        ("--ro-bind", "/dev/null", paths.INSIDE_MARKER),
        ("--ro-bind-data", "5", paths.GITCONFIG_INSIDE),
        ("--seccomp", "6"),
        ("--", paths.INTERPRETER),
    )
    assert argv[-1] == "9"  # the inner record's descriptor: the agent's argv is in it
    forge = ("--ro-bind", f"{home}/.config/gh", f"{home}/.config/gh")
    if no_forge:
        assert f"{home}/.config/gh" not in argv
    else:
        assert_order(argv, ("--bind", store, home), forge,
                     ("--bind", "/work/project", "/work/project"))
    user_map = ("--unshare-user", "--uid", str(uid), "--gid", str(uid))
    # Always a user namespace, root included: outer processes' /proc entries stay closed.
    assert_order(argv, user_map, ("--cap-drop", "ALL"), ("--ro-bind", "/usr", "/usr"))
    # Sockets in the workspace, under a masked tree or in $HOME stay as they are.
    for kept in ("/work/project/dev.sock", "/run/docker.sock", f"{home}/.gnupg/S.gpg-agent"):
        assert kept not in argv
    if jailed:
        assert_order(
            argv, ("--ro-bind-data", "7", "/etc/resolv.conf"), ("--seccomp", "6")
        )
    else:
        assert "/etc/resolv.conf" not in argv


def test_home_is_the_agents_own_store_and_nothing_of_the_outer_home() -> None:
    for profile in profiles.PROFILES:
        host = facts(agent=profile.name)
        argv = flat(build(profile.name, host=host))
        assert ("--bind", host.store_home, HOME_USER) == tuple(
            argv[index_of(argv, "--bind", host.store_home) :][:3])
        assert "--tmpfs" not in [a for i, a in enumerate(argv) if argv[i + 1 : i + 2] ==
                                 [HOME_USER]]
        for rel in (".claude", ".claude.json", ".codex", ".pi", ".local/share", ".cache"):
            assert f"{HOME_USER}/{rel}" not in argv, (profile.name, rel)


def test_a_state_dir_in_a_shown_tree_is_covered_before_the_agents_own_home() -> None:
    """With state-dir under /var, every user's and agent's store would be read by
    inversion: covered, and only this agent's home comes back, at $HOME (check 89)."""
    for state_dir, covered in (("/var/lib/claude-sandbox", True), ("/srv/stores", False),
                               (None, False)):
        argv = flat(build(cfg=Config(egress_jail=False, state_dir=state_dir)))
        masks = [i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == state_dir]
        assert bool(masks) == covered, (state_dir, argv)
        if covered:
            assert masks[0] < index_of(argv, "--bind", facts().store_home)
    # A link into a shown tree is covered where it leads.
    linked = replace(facts(), state_dir_real="/var/lib/stores")
    argv = flat(build(cfg=Config(egress_jail=False, state_dir="/srv/link"), host=linked))
    assert any(a == "--tmpfs" and argv[i + 1] == "/var/lib/stores" for i, a in enumerate(argv))


def test_max_memory_per_process_keeps_the_tmpfs_mounts_within_it_and_refuses_memfd() -> None:
    """No memory cgroup: RLIMIT_DATA per process, and what it does not count (files in
    memory, memfds) is held within max-memory another way (check 91)."""
    import resource

    from claude_sandbox.launch.planner import seccomp

    memory = 512 << 20
    per_process = LimitPlan((), ((resource.RLIMIT_DATA, memory),), ())
    made = build(cfg=Config(egress_jail=False), limits=per_process)
    sizes = [m.size for m in made.mounts if m.kind == "tmpfs" and m.size is not None]
    assert sizes and sum(sizes) <= memory, sizes
    assert seccomp.MEMORY_PER_PROCESS in made.seccomp_flags
    default = LimitPlan((), ((resource.RLIMIT_DATA, memory),), (), ("max-memory",))
    for loose in (build(cfg=Config(egress_jail=False)),
                  build(cfg=Config(egress_jail=False), limits=default)):
        assert seccomp.MEMORY_PER_PROCESS not in loose.seccomp_flags
        assert all(m.size in (None, 1 << 30, 1 << 20) for m in loose.mounts
                   if m.kind == "tmpfs"), loose.mounts


def test_missing_optional_dirs_are_not_bound() -> None:
    argv = flat(build(host=facts(existing=())))
    for rel in (".config/gh", ".local/bin/uv"):
        assert f"{HOME_USER}/{rel}" not in argv
    assert "/run/user" not in argv and "/run/docker.sock" not in argv


def test_allowed_sockets_and_the_resolver_come_back_after_the_runtime_masks() -> None:
    host = replace(facts(), resolv_target="/run/systemd/resolve/stub-resolv.conf")
    argv = flat(build(cfg=Config(allow_socket=("/run/postgresql", "/opt/app/app.sock")),
                      host=host))
    assert_order(argv, ("--tmpfs", "/run"),
                 ("--ro-bind-try", "/run/systemd/resolve/stub-resolv.conf",
                  "/run/systemd/resolve/stub-resolv.conf"),
                 ("--ro-bind-try", "/run/postgresql", "/run/postgresql"))
    assert paths.EMPTY_FILE + " /opt/app/app.sock" not in " ".join(argv)


def test_a_path_entry_never_brings_a_masked_tree_back() -> None:
    host = replace(facts(), **path_facts(("/run/.", "/run", "/run/../tmp", "/usr/bin")),
                   sockets=("/run/docker.sock",))
    assert mounts.restored(host) == []
    nix = replace(facts(), **path_facts(("/run/current-system/sw/bin",)),
                  sockets=("/run/current-system/sw/bin/agent.sock",))
    argv = flat(build(host=nix))
    assert_order(argv, ("--tmpfs", "/run"),
                 ("--ro-bind-try", "/run/current-system/sw/bin", "/run/current-system/sw/bin"),
                 ("--ro-bind", paths.EMPTY_FILE, "/run/current-system/sw/bin/agent.sock"))


def test_every_tmpfs_is_sized_and_counts_as_writable() -> None:
    made = build(cfg=Config(tmpfs_size=256 << 20, egress_jail=False))
    argv = flat(made)
    for tree in ("/tmp", "/dev/shm", "/run", "/var/tmp"):
        assert_order(argv, ("--size", str(256 << 20), "--tmpfs", tree))
    assert {"/tmp", "/run", "/var/tmp", "/dev/shm"} <= set(made.inner.writable)


def test_real_binary_is_bound_read_only_and_its_package_when_under_home() -> None:
    real = f"{HOME_USER}/.npm-global/lib/node_modules/@openai/codex/bin/codex.js"
    root = f"{HOME_USER}/.npm-global/lib/node_modules/@openai/codex"
    argv = flat(build("codex", host=facts(agent="codex", real=real, root=root)))
    store = facts(agent="codex").store_home
    assert_order(argv, ("--bind", store, HOME_USER), ("--ro-bind", root, root),
                 ("--ro-bind", real, real))
    claude = flat(build("claude"))
    real_claude = "/usr/libexec/claude-sandbox/agents/bin/claude"
    assert_order(
        claude,
        ("--ro-bind", real_claude, real_claude),
        ("--ro-bind", real_claude, f"{HOME_USER}/.local/bin/claude"),
    )


def test_environment_is_an_allow_list() -> None:
    environ = {
        "TERM": "xterm",
        "LC_ALL": "C",
        "ANTHROPIC_API_KEY": "k",
        "AWS_SECRET": "s",
        "GH_TOKEN": "t",
        "DISPLAY": ":0",
        "SSH_AUTH_SOCK": "/x",
        "PATH": "/evil",
    }
    cfg = Config(pass_env=("ANTHROPIC_API_KEY", "NOT_SET"), egress_jail=False)
    env = dict(build(cfg=cfg, environ=environ).env)
    assert env["IS_SANDBOX"] == "1" and env["IS_SANDBOX_AGENT"] == "claude"
    assert env["GIT_CONFIG_GLOBAL"] == paths.GITCONFIG_INSIDE
    assert env["GIT_CONFIG_SYSTEM"] == "/dev/null"
    assert env["HOME"] == HOME_USER and env["TERM"] == "xterm" and env["LC_ALL"] == "C"
    assert env["ANTHROPIC_API_KEY"] == "k"
    assert env["CLAUDE_CODE_TMPDIR"] == "/var/tmp/claude-agent"
    for name in ("AWS_SECRET", "GH_TOKEN", "DISPLAY", "SSH_AUTH_SOCK", "NOT_SET"):
        assert name not in env
    assert env["PATH"].endswith(f":{HOME_USER}/.local/bin")  # appended, never first


def test_connection_settings_pass_and_proxies_only_without_the_jail() -> None:
    """A CA bundle and a provider's routing reach the sandbox unasked; their keys do not;
    a proxy only where the egress proxy is not the way out."""
    environ = {"SSL_CERT_FILE": "/etc/ssl/corp.pem", "NODE_EXTRA_CA_CERTS": "/etc/corp.pem",
               "ANTHROPIC_BASE_URL": "https://gw.example", "CLAUDE_CODE_USE_BEDROCK": "1",
               "AWS_REGION": "eu-west-1", "AWS_SECRET_ACCESS_KEY": "s",
               "ANTHROPIC_AUTH_TOKEN": "t", "HTTPS_PROXY": "http://proxy.corp:3128",
               "no_proxy": "localhost"}
    for jailed in (False, True):
        env = dict(build(cfg=Config(egress_jail=jailed), environ=environ).env)
        for name in ("SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "ANTHROPIC_BASE_URL",
                     "CLAUDE_CODE_USE_BEDROCK", "AWS_REGION"):
            assert env[name] == environ[name], name
        assert "AWS_SECRET_ACCESS_KEY" not in env and "ANTHROPIC_AUTH_TOKEN" not in env
        assert ("HTTPS_PROXY" in env and "no_proxy" in env) == (not jailed)
    for keyed in ("https://user:key@gw.example/", "https://gw.example/v1?key=k"):
        env = dict(build(cfg=Config(egress_jail=True),
                         environ={"ANTHROPIC_BASE_URL": keyed}).env)
        assert "ANTHROPIC_BASE_URL" not in env, keyed


def test_the_agent_gets_bash_as_its_shell_and_no_setenv() -> None:
    made = build()
    assert dict(made.env)["SHELL"] == "/bin/bash"
    assert "--setenv" not in flat(made)


def test_entry_point_guard_binds_devnull_in_writable_dirs_ahead_of_shims() -> None:
    guard = (
        GuardEntry("/work/project/node_modules/.bin", "claude", "absent"),
        GuardEntry("/work/project/node_modules/.bin", "codex", "placeholder"),
        GuardEntry("/opt/readonly/bin", "claude", "absent"),  # not writable inside: no bind
    )
    argv = flat(build(host=facts(guard=guard)))
    assert_order(
        argv,
        ("--bind", "/work/project", "/work/project"),
        ("--ro-bind", "/dev/null", "/work/project/node_modules/.bin/claude"),
        ("--ro-bind", "/dev/null", "/work/project/node_modules/.bin/codex"),
    )
    assert "/opt/readonly/bin/claude" not in argv


def test_entry_point_guard_refuses_a_real_program() -> None:
    guard = (GuardEntry("/work/project/bin", "claude", "other"),)
    with pytest.raises(SandboxError) as caught:
        build(host=facts(guard=guard))
    assert caught.value.status == EXIT_REFUSED
    assert "/work/project/bin/claude would shadow" in caught.value.message


def test_every_option_and_mount_has_a_reason() -> None:
    for args, reason in render.option_rows(build(host=facts(existing=ALL_EXISTING))):
        assert reason and args[0].startswith("--")


def test_agent_args_strip_and_inject() -> None:
    claude = profiles.get("claude")
    assert profiles.agent_args(claude, ("--chrome", "-p", "hi")) == ("--no-chrome", "-p", "hi")
    assert profiles.agent_args(claude, ("--no-chrome",)) == ("--no-chrome",)
    assert profiles.agent_args(profiles.get("codex"), ("--chrome",)) == ("--chrome",)
    # A version query keeps Claude Code's own fast path: nothing injected.
    assert profiles.agent_args(claude, ("--version",)) == ("--version",)
    assert profiles.agent_args(claude, ("--version", "x")) == ("--no-chrome", "--version", "x")


def test_a_held_back_credential_is_named() -> None:
    claude = profiles.get("claude")
    environ = {"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o", "ANTHROPIC_AUTH_TOKEN": ""}
    assert profiles.held_back(claude, environ, ()) == ["ANTHROPIC_API_KEY"]
    assert profiles.held_back(claude, environ, ("ANTHROPIC_API_KEY",)) == []
    assert profiles.held_back(profiles.get("codex"), environ, ()) == ["OPENAI_API_KEY"]


def test_fresh_procfs_keeps_kernel_knobs_read_only_for_root() -> None:
    for uid in (0, 1000):
        host = replace(facts(uid=uid), proc_mountable=True)
        argv = flat(build(host=host))
        assert_order(argv, ("--ro-bind", "/usr", "/usr"), ("--proc", "/proc"), ("--dev", "/dev"))
        knobs = ("--ro-bind-try", "/proc/sys", "/proc/sys")
        if uid == 0:
            assert_order(argv, ("--proc", "/proc"), knobs, ("--dev", "/dev"))
        else:
            assert "/proc/sys" not in argv  # a nested sandbox can then mount its own procfs
    argv = flat(build(host=facts(uid=0)))
    assert_order(argv, ("--ro-bind", "/usr", "/usr"), ("--ro-bind", "/proc", "/proc"))
    assert "--proc" not in argv


def test_control_paths_follow_every_writable_bind() -> None:
    argv = flat(build(allow_write=("/work",), repo=True))
    assert_order(
        argv,
        ("--bind", "/work", "/work"),  # a root that holds the workspace comes first
        ("--bind", "/work/project", "/work/project"),
        ("--ro-bind", "/work/project/.mcp.json", "/work/project/.mcp.json"),
    )
    # git's directory and the existing .vscode are overlays mounted before bwrap: the
    # workspace's recursive bind carries them in, and no bind covers them.
    assert "/work/project/.git" not in argv and "/work/project/.vscode" not in argv


def test_views_are_git_directories_then_control_directories_in_the_store() -> None:
    made = build(repo=True)
    assert [(v.kind, v.target) for v in made.views] == [
        ("git", "/work/project/.git"), ("control", "/work/project/.vscode")]
    for view in made.views:
        assert view.store.startswith(made.workspace_store + "/")
        assert not view.store.startswith(made.layout.workspace)  # never in the workspace


def test_a_git_directory_outside_the_workspace_is_bound_writable() -> None:
    """A launch from a subdirectory, or in a linked worktree: the overlay must be reached."""
    profile = profiles.get("claude")
    gathered = Gathered(
        facts=facts(), command=("/real/agent",), gitconfig="", codex_config=None,
        layout=Writable("/work/project/sub", (), (),
                        (Repository("/work/project/.git", "/work/project", "x"),)),
        resolv_conf="", host_addresses=(), keep_ignored=(), environ=())
    argv = flat(plan.make(profile, Config(egress_jail=False), gathered, LimitPlan((), (), ())))
    assert_order(argv, ("--bind", "/work/project/sub", "/work/project/sub"),
                 ("--bind", "/work/project/.git", "/work/project/.git"))


def test_the_unwrapped_claude_policy_is_empty_inside() -> None:
    argv = flat(build(host=facts(existing=(paths.UNWRAPPED_SETTINGS,))))
    assert_order(argv, ("--ro-bind", "/usr", "/usr"),
                 ("--ro-bind", paths.EMPTY_SETTINGS, paths.UNWRAPPED_SETTINGS))
    assert paths.UNWRAPPED_SETTINGS not in flat(build())


def test_the_whole_plan_renders_as_json_for_explain_and_the_trace() -> None:
    """explain --json and CLAUDE_SANDBOX_TRACE's digest render every field of the plan."""
    import json

    from claude_sandbox.launch.planner import render

    for cfg in (Config(egress_jail=False), Config(egress_jail=False, allow_vsock=True)):
        made = build(cfg=cfg)
        assert json.loads(render.as_json(made))["agent"] == "claude"
        assert len(render.digest(made)) == 16
    assert build(cfg=Config(egress_jail=False, allow_vsock=True)).seccomp_flags == (
        "allow-vsock",)


def test_toolchains_of_the_home_come_back_read_only_and_their_credentials_empty() -> None:
    host = replace(facts(), toolchains=(f"{HOME_USER}/.pyenv", f"{HOME_USER}/.cargo/bin"),
                   toolchain_secrets=(f"{HOME_USER}/.pyenv/versions/3.12.1/pip.conf",))
    made = build(host=host)
    argv = flat(made)
    assert_order(argv, ("--bind", host.store_home, HOME_USER),
                 ("--ro-bind", f"{HOME_USER}/.pyenv", f"{HOME_USER}/.pyenv"),
                 ("--ro-bind", paths.EMPTY_FILE, f"{HOME_USER}/.pyenv/versions/3.12.1/pip.conf"))
    assert f"{HOME_USER}/.cargo/bin" in made.inner.exec_files  # harsh lets them run
    # cargo's login stays out: ~/.cargo is only the store's own, pinned (planner/pins.py)
    assert [argv[i - 2] for i, arg in enumerate(argv) if arg == f"{HOME_USER}/.cargo"] == [
        "--bind-fd"]
    # A toolchain on PATH ahead of the shims is read-only: no guard bind (none could be
    # made in it either).
    guarded = replace(host, guard=(GuardEntry(f"{HOME_USER}/.cargo/bin", "claude",
                                              "absent"),))
    assert f"{HOME_USER}/.cargo/bin/claude" not in flat(build(host=guarded))


def test_path_entries_the_sandbox_hides_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    from claude_sandbox.launch.session import notices

    host = replace(facts(), toolchains=(f"{HOME_USER}/.pyenv",),
                   **path_facts((f"{HOME_USER}/.pyenv/shims", f"{HOME_USER}/bin",
                                 f"{HOME_USER}/.foo/bin", f"{HOME_USER}/.local/bin", "/usr/bin")))
    notices.hidden_path(host)
    said = capsys.readouterr().err
    assert f"allow-read = {HOME_USER}/bin" in said and "~/.foo/bin" in said
    assert ".pyenv" not in said and ".local/bin" not in said
