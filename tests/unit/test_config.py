"""The configuration parser: strict, naming FILE:LINE or the variable, never a traceback."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core.errors import EXIT_CONFIG, SandboxError
from claude_sandbox.launch.configure import config, keys

AGENTS = ("claude", "codex", "pi")
PATH = "/etc/claude-sandbox.conf"


def parse(text: str, environ: dict[str, str] | None = None, agent: str = "claude") -> config.Config:
    return config.parse(text, environ or {}, agent=agent, agents=AGENTS, path=PATH)


def refusal(text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(SandboxError) as caught:
        parse(text, environ)
    assert caught.value.status == EXIT_CONFIG
    return caught.value.message


def test_defaults() -> None:
    cfg = parse("")
    assert cfg.egress_jail is True
    assert cfg.hardening == "standard"
    assert (cfg.allow_write, cfg.pass_env, cfg.allow_ip) == ((), (), ())
    assert cfg.workspace_root is None and cfg.max_pids is None


def test_every_key_parses() -> None:
    cfg = parse("""
        # comment
        workspace-root = /srv/project
        no-forge
        allow-write = /srv/cache
        allow-write = /srv/other   # trailing comment
        pass-env = ANTHROPIC_API_KEY
        egress-jail = 0
        allow-ip = 10.1.2.3
        local-port = 11434
        local-model-port = 8080
        callback-port = 54545
        hardening = harsh
        max-pids = 512
        max-memory = 2G
    """)
    assert cfg.workspace_root == "/srv/project"
    assert cfg.no_forge is True
    assert cfg.allow_write == ("/srv/cache", "/srv/other")
    assert cfg.pass_env == ("ANTHROPIC_API_KEY",)
    assert cfg.egress_jail is False
    assert cfg.allow_ip == ("10.1.2.3",)
    assert cfg.local_ports == (11434, 8080)
    assert cfg.callback_ports == (54545,)
    assert cfg.hardening == "harsh"
    assert cfg.max_pids == 512
    assert cfg.max_memory == 2 << 30
    assert cfg.origins["hardening"] == f"{PATH}:13"


def test_the_brokered_keys_parse_and_refuse_a_relative_program() -> None:
    cfg = parse("hardening = brokered\nagent-exec = /usr/bin/git\n"
                "agent-exec = /usr/lib/git-core\noffline-commands\n")
    assert cfg.agent_exec == ("/usr/bin/git", "/usr/lib/git-core")
    assert cfg.offline_commands is True
    assert parse("").offline_commands is False
    assert refusal("agent-exec = git\n").startswith(f"{PATH}:1: ")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("bogus = 1", "unknown key 'bogus'"),
        ("workspace-root = relative/path", "is not an absolute path"),
        ("allow-write = ./x", "is not an absolute path"),
        ("allow-ip = 10.0.0.0/8", "not a single IPv4 address"),
        ("allow-ip = example.com", "not a single IPv4 address"),
        ("allow-ip = 127.0.0.1", "cannot be allowed"),
        ("local-port = 0", "outside 1-65535"),
        ("local-port = 65536", "outside 1-65535"),
        ("callback-port = -1", "not a port number"),
        ("local-model-port = http", "not a port number"),
        ("egress-jail = maybe", "not a flag value"),
        ("hardening = paranoid", "is not one of standard, harsh, brokered"),
        ("max-pids = 0", "not a positive integer"),
        ("max-memory = lots", "not a size"),
        ("workspace-root", "needs a value"),
        ("allow-write =", "has an empty value"),
        ("pass-env = 1BAD", "is not a variable name"),
        ("hardening.gemini = harsh", "'gemini' is not an agent"),
        ("allow-ip.codex = 10.1.1.1", "cannot be set per agent"),
        ("= value", "unknown key ''"),
        ("protect = /etc", "is not a plain path inside the workspace"),
        ("env-may-widen = bogus", "not a key with a variable"),
        ("state-dir = relative", "is not an absolute path"),
        ("egress-policy = closed", "is not one of allow-list, open, learn"),
        ("allow-domain = *.", "is not a host name"),
        ("allow-domain = example.com:0", "is not a port 1-65535"),
        ("allow-domain = @nosuch", "is not a preset"),
        ("allow-domain = exa*mple.com", "a wildcard is only `*.suffix`"),
        ("allow-domain = 10.1.2.3", "allow-ip names addresses"),
        ("allow-domain =", "has an empty value"),
    ],
)
def test_bad_lines_name_file_and_line(line: str, expected: str) -> None:
    message = refusal(f"# first line\n{line}\n")
    assert message.startswith(f"{PATH}:2: ")
    assert expected in message


def test_port_both_local_and_callback() -> None:
    assert "both a local-port and a callback-port" in refusal(
        "local-port = 9000\ncallback-port = 9000"
    )


@pytest.mark.parametrize(
    "name",
    [
        *sorted(keys.DENIED_NAMES),
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "CLAUDE_SANDBOX_EGRESS_JAIL",
        "DYLD_INSERT_LIBRARIES",
    ],
)
def test_every_denied_pass_env_name_is_refused(name: str) -> None:
    assert "deny-list" in refusal(f"pass-env = {name}")
    message = refusal("", {"CLAUDE_SANDBOX_PASS_ENV": f"OK_NAME,{name}"})
    assert message.startswith("$CLAUDE_SANDBOX_PASS_ENV: ") and "deny-list" in message


def test_environment_may_narrow_but_never_widen() -> None:
    # Items the file already has, the jail on, no-forge on: nothing widens.
    cfg = parse(
        "allow-write = /a\nallow-write = /b\nno-forge\nlocal-port = 9000\n",
        {"CLAUDE_SANDBOX_EGRESS_JAIL": "1", "CLAUDE_SANDBOX_ALLOW_WRITE": "/b",
         "CLAUDE_SANDBOX_NO_FORGE": "1", "CLAUDE_SANDBOX_LOCAL_PORTS": "9000",
         "CLAUDE_SANDBOX_LOCAL_MODEL_PORT": "0"},
    )
    assert cfg.egress_jail is True and cfg.no_forge is True
    assert cfg.allow_write == ("/a", "/b")
    widening = [
        ("", {"CLAUDE_SANDBOX_EGRESS_JAIL": "0"}, "turns the egress jail off"),
        ("", {"CLAUDE_SANDBOX_ALLOW_WRITE": "/home/u/.ssh"}, "/home/u/.ssh is not in"),
        ("allow-write = /a", {"CLAUDE_SANDBOX_ALLOW_WRITE": "/a,/b"}, "/b is not in"),
        ("", {"CLAUDE_SANDBOX_ALLOW_IP": "10.1.2.3"}, "10.1.2.3 is not in"),
        ("", {"CLAUDE_SANDBOX_LOCAL_PORTS": "8080"}, "8080 is not in"),
        ("", {"CLAUDE_SANDBOX_CALLBACK_PORTS": "8080"}, "8080 is not in"),
        ("", {"CLAUDE_SANDBOX_LOCAL_MODEL_PORT": "11434"}, "port 11434"),
        ("", {"CLAUDE_SANDBOX_PASS_ENV": "AWS_SECRET_ACCESS_KEY"}, "is not in"),
        ("no-forge", {"CLAUDE_SANDBOX_NO_FORGE": "0"}, "turns no-forge off"),
        ("workspace-root = /srv/p", {"CLAUDE_SANDBOX_WORKSPACE_ROOT": "/srv"}, "outside"),
    ]
    for text, environ, expected in widening:
        message = refusal(text, environ)
        variable = next(iter(environ))
        assert message.startswith(f"${variable}: ") and expected in message, message
        assert "env-may-widen" in message


def test_the_file_may_let_the_environment_widen_a_key() -> None:
    cfg = parse(
        "env-may-widen = egress-jail\nenv-may-widen = allow-write\n",
        {"CLAUDE_SANDBOX_EGRESS_JAIL": "0", "CLAUDE_SANDBOX_ALLOW_WRITE": "/srv/x"},
    )
    assert cfg.egress_jail is False and cfg.allow_write == ("/srv/x",)
    assert cfg.path_origins["/srv/x"] == "$CLAUDE_SANDBOX_ALLOW_WRITE"
    # The permission is for that key only.
    assert "is not in" in refusal("env-may-widen = egress-jail",
                                  {"CLAUDE_SANDBOX_ALLOW_IP": "10.1.2.3"})
    assert "not a key with a variable" in refusal("env-may-widen = hardening")
    # Inside the file's workspace-root the variable only narrows it.
    cfg = parse("workspace-root = /srv", {"CLAUDE_SANDBOX_WORKSPACE_ROOT": "/srv/p"})
    assert cfg.workspace_root == "/srv/p"


def test_the_new_keys_parse() -> None:
    cfg = parse("state-dir = /var/lib/cs\nprotect = .github/workflows\nunprotect = .idea\n"
                "allow-read = /opt/cache\nallow-socket = /run/postgresql\n")
    assert cfg.state_dir == "/var/lib/cs"
    assert cfg.protect == (".github/workflows",) and cfg.unprotect == (".idea",)
    assert cfg.allow_read == ("/opt/cache",) and cfg.allow_socket == ("/run/postgresql",)
    assert cfg.path_origins["/opt/cache"] == f"{PATH}:4"
    for bad in ("/abs", "../up", "a/../b", "a//b", ".", ""):
        line = f"protect = {bad}" if bad else "protect ="
        assert refusal(line)


def test_bad_variable_is_named() -> None:
    message = refusal("", {"CLAUDE_SANDBOX_ALLOW_IP": "10.0.0.1/32"})
    assert message.startswith("$CLAUDE_SANDBOX_ALLOW_IP: ")


def test_our_keys_cannot_come_from_the_environment() -> None:
    # hardening has no variable: the launching environment cannot loosen it.
    cfg = parse("hardening = harsh", {"CLAUDE_SANDBOX_HARDENING": "standard"})
    assert cfg.hardening == "harsh"


def test_per_agent_value_wins_whatever_the_order() -> None:
    text_a = "hardening.codex = harsh\nhardening = standard\n"
    text_b = "hardening = standard\nhardening.codex = harsh\n"
    for text in (text_a, text_b):
        assert parse(text, agent="codex").hardening == "harsh"
        assert parse(text, agent="claude").hardening == "standard"


def test_unreadable_file_refuses(tmp_path: pytest.TempPathFactory) -> None:
    directory = str(tmp_path)
    with pytest.raises(SandboxError) as caught:
        config.read_file(directory)  # a directory cannot be read as a file
    assert caught.value.status == EXIT_CONFIG and directory in caught.value.message
    assert config.read_file(directory + "/absent") is None


def test_the_commented_default_file_parses_to_defaults() -> None:
    assert parse(config.DEFAULT_FILE) == config.Config()


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_any_text_parses_or_refuses_cleanly(text: str) -> None:
    try:
        parse(text)
    except SandboxError as error:
        assert error.status == EXIT_CONFIG
        assert error.message.startswith(f"{PATH}:")


_line = st.one_of(
    st.builds(
        lambda k, v: f"{k} = {v}",
        st.sampled_from([k.name for k in keys.KEYS]),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30),
    ),
    st.sampled_from([k.name for k in keys.KEYS]),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_line, max_size=8),
    st.dictionaries(
        st.sampled_from([k.variable for k in keys.KEYS if k.variable]), st.text(max_size=30)
    ),
)
def test_fuzz_keys_with_random_values(lines: list[str], environ: dict[str, str]) -> None:
    try:
        parse("\n".join(lines), environ)
    except SandboxError as error:
        assert error.status == EXIT_CONFIG
        assert error.message.startswith((f"{PATH}:", "$", "configuration"))


def test_egress_policy_and_allow_domain_come_from_the_file_only() -> None:
    cfg = parse("egress-policy = learn\negress-policy.codex = open\n"
                "allow-domain = example.com\nallow-domain.codex = db.example.com:5432\n")
    assert (cfg.egress_policy, cfg.allow_domain) == ("learn", ("example.com",))
    codex = parse("egress-policy.codex = open\nallow-domain.codex = db.example.com:5432\n",
                  agent="codex")
    assert (codex.egress_policy, codex.allow_domain) == ("open", ("db.example.com:5432",))
    # No variable: the launching environment cannot open the egress.
    assert keys.KEYS_BY_NAME["egress-policy"].variable is None
    assert keys.KEYS_BY_NAME["allow-domain"].variable is None


_STATE_LINES = st.lists(st.sampled_from([
    "state-dir = /srv/state", "state-dir=/var/lib/x/../y  # shared", "  state-dir =  /a//b/ ",
    "# state-dir = /commented", "egress-jail = 1", "state-dir = relative/path", "",
    "allow-read = /opt", "state-dir", "max-memory = 2G",
]), max_size=6)


@given(_STATE_LINES)
@settings(max_examples=300)
def test_the_launchers_early_state_dir_agrees_with_the_parser(lines: list[str]) -> None:
    """run.py reads state-dir ahead of the parser, to start a root launch's late-mount
    helper on the right store; wherever the parser accepts the file, the two agree."""
    from claude_sandbox.launch.run import state_dir_line

    text = "\n".join(lines)
    try:
        parsed = parse(text).state_dir
    except SandboxError:
        return  # refused: the launch stops, and the guess's helper with it
    assert state_dir_line(text) == parsed, text
