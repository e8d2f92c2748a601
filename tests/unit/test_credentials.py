"""Brokered credentials' pure parts: the key, the sentinel's shape, the forge files."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claude_sandbox.core.errors import SandboxError
from claude_sandbox.launch.configure import config
from claude_sandbox.launch.facts import credentials

REAL = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2


def test_a_line_names_a_builtin_or_its_own_hosts() -> None:
    assert credentials.parse_line("GH_TOKEN", "f:1") == ("GH_TOKEN", credentials.GITHUB)
    assert credentials.parse_line("DEPLOY api.example.com, Up.Example.com", "f:1") == (
        "DEPLOY", ("api.example.com", "up.example.com"))


@pytest.mark.parametrize(("text", "why"), [
    ("1BAD", "not a variable name"), ("FOO", "no built-in hosts"),
    ("FOO localhost", "not a host name"), ("FOO a..b", "not a host name"),
    ("FOO -a.com", "not a host name"), ("FOO a.com/x", "not a host name"),
])
def test_a_bad_line_is_refused_naming_where(text: str, why: str) -> None:
    with pytest.raises(SandboxError, match=f"f:7: credential .*{why}"):
        credentials.parse_line(text, "f:7")


@given(st.text(max_size=60))
def test_any_line_parses_or_is_refused_cleanly(text: str) -> None:
    try:
        name, hosts = credentials.parse_line(text, "f:1")
    except SandboxError:
        return
    assert name and hosts and all("." in host for host in hosts)


def test_the_key_is_read_from_etc_only_and_checked() -> None:
    agents = ("claude", "codex", "pi")
    cfg = config.parse("credential = GH_TOKEN\ncredential = X api.x.com\n", {},
                       agent="claude", agents=agents, path="/etc/c.conf")
    assert cfg.credential == ("GH_TOKEN", "X api.x.com")
    with pytest.raises(SandboxError, match=r"/etc/c\.conf:2: credential"):
        config.parse("# a comment\ncredential = X\n", {}, agent="claude", agents=agents,
                     path="/etc/c.conf")


def test_a_sentinel_keeps_the_kind_and_length_and_nothing_else() -> None:
    made = {credentials.sentinel(REAL) for _ in range(20)}
    assert len(made) == 20 and REAL not in made  # fresh for each session
    for sentinel in made:
        assert len(sentinel) == len(REAL) and sentinel.startswith("ghp_")
        assert sentinel[4:].isalnum() and sentinel[4:].isascii()
    assert credentials.sentinel("sk-ant-api03-abcDEF123").startswith("sk-ant-api03-")
    assert credentials.sentinel("glpat-xyz").startswith("glpat-")
    # A short value, or one of an unknown kind, keeps no prefix and gets 22 random
    # characters at least: a UUID's first groups are not kept, and key-1 is no key-3.
    for value in ("key-1", "550e8400-e29b-41d4-a716-446655440000", "---"):
        sentinel = credentials.sentinel(value)
        assert len(sentinel) >= 22 and sentinel.isalnum() and sentinel[:4] != value[:4]


def test_sentinels_never_contain_one_another() -> None:
    forge = {".config/gh/hosts.yml": "github.com:\n    oauth_token: ghp_a\n"}
    brokered = credentials.broker(("GH_TOKEN",), {"GH_TOKEN": "ghp_ab"}, forge)
    sentinels = [s.sentinel for s in brokered.secrets]
    assert all(a == b or a not in b for a in sentinels for b in sentinels)
    # The forge file shows the sentinel of its own value, whole.
    shown = dict(brokered.forge)[".config/gh/hosts.yml"]
    short = next(s.sentinel for s in brokered.secrets if s.real == "ghp_a")
    assert f"oauth_token: {short}\n" in shown


def test_only_declared_variables_are_brokered() -> None:
    environ = {"GH_TOKEN": REAL, "OPENAI_API_KEY": "sk-proj-abc123"}
    assert credentials.wanted((), environ) == {}
    assert credentials.wanted(("GH_TOKEN", "NOT_SET api.x.com"), environ) == {
        "GH_TOKEN": credentials.GITHUB}


GH = f"""github.com:
    users:
        octo:
            oauth_token: {REAL}
    oauth_token: {REAL}
    user: octo
ghe.example.com:
    oauth_token: "gho_enterprise123"
"""
GLAB = """hosts:
    gitlab.com:
        token: glpat-abcdefghijklmnop
        api_host: gitlab.com
"""


def test_forge_tokens_are_found_with_their_hosts() -> None:
    assert credentials.forge_tokens(GH, "oauth_token") == [
        ("github.com", REAL), ("github.com", REAL), ("ghe.example.com", "gho_enterprise123")]
    assert credentials.forge_tokens(GLAB, "token") == [("gitlab.com", "glpat-abcdefghijklmnop")]


def test_a_launch_brokers_one_sentinel_per_real_value() -> None:
    forge = {".config/gh/hosts.yml": GH, ".config/glab-cli/config.yml": GLAB}
    brokered = credentials.broker(("GH_TOKEN",), {"GH_TOKEN": REAL}, forge)
    by_real = {s.real: s for s in brokered.secrets}
    assert set(by_real) == {REAL, "gho_enterprise123", "glpat-abcdefghijklmnop"}
    assert by_real[REAL].hosts == credentials.GITHUB
    assert by_real["gho_enterprise123"].hosts == ("ghe.example.com",)
    assert dict(brokered.env) == {"GH_TOKEN": by_real[REAL].sentinel}
    for rel, text in brokered.forge:
        assert all(real not in text for real in by_real), rel
    assert by_real[REAL].sentinel in dict(brokered.forge)[".config/gh/hosts.yml"]


def test_a_value_that_is_not_a_token_is_not_provided_and_leaves_the_file() -> None:
    forge = {".config/gh/hosts.yml": "github.com:\n    oauth_token: has space\n"}
    brokered = credentials.broker(("GH_TOKEN",), {"GH_TOKEN": "a\r\nb"}, forge)
    assert brokered.env == () and brokered.secrets == ()
    assert "has space" not in brokered.forge[0][1]
    assert len(brokered.unusable) == 2


def test_a_token_copied_into_another_forge_file_is_replaced_there_too(tmp_path: str) -> None:
    home = str(tmp_path)
    for rel, text in ((".config/gh/hosts.yml", GH), (".config/gh/hosts.yml.bak", GH),
                      (".config/gh/sub/notes", f"token={REAL}\n"),
                      (".config/glab-cli/config.yml", GLAB)):
        path = os.path.join(home, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
    forge = credentials.read_forge(home)
    assert set(forge) == {".config/gh/hosts.yml", ".config/gh/hosts.yml.bak",
                          ".config/gh/sub/notes", ".config/glab-cli/config.yml"}
    brokered = credentials.broker((), {}, forge)
    shown = dict(brokered.forge)
    assert set(shown) == set(forge)
    reals = {s.real for s in brokered.secrets}
    assert all(real not in text for text in shown.values() for real in reals)


def test_a_token_under_no_valid_host_is_replaced_and_never_brokered() -> None:
    text = ("hosts:\n    gitlab.com:\n        token: glpat-AAAAAAAAAAAAAAAAAAAA\n"
            "    corp.example:8443:\n        token: glpat-BBBBBBBBBBBBBBBBBBBB\n")
    assert credentials.forge_tokens(text, "token") == [
        ("gitlab.com", "glpat-AAAAAAAAAAAAAAAAAAAA"), ("", "glpat-BBBBBBBBBBBBBBBBBBBB")]
    brokered = credentials.broker((), {}, {".config/glab-cli/config.yml": text})
    assert [s.real for s in brokered.secrets] == ["glpat-AAAAAAAAAAAAAAAAAAAA"]
    shown = dict(brokered.forge)[".config/glab-cli/config.yml"]
    assert "glpat-BBBB" not in shown and "glpat-AAAA" not in shown
    assert any("under no host name" in line for line in brokered.unusable)


def test_a_forge_file_too_large_to_scan_is_shown_empty(tmp_path: str) -> None:
    path = os.path.join(str(tmp_path), ".config/gh/big.log")
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as handle:
        handle.write(b"\xff" + b"x" * (2 << 20))
    forge = credentials.read_forge(str(tmp_path))
    assert forge == {".config/gh/big.log": None}
    assert credentials.broker((), {}, forge).forge == ((".config/gh/big.log", ""),)


def test_a_fifo_or_link_in_place_of_a_forge_file_is_not_read(tmp_path: str) -> None:
    """One put there after the directory was listed must not hold the launch."""
    fifo, link = os.path.join(str(tmp_path), "fifo"), os.path.join(str(tmp_path), "link")
    os.mkfifo(fifo)
    os.symlink("/etc/hostname", link)
    assert credentials._read_regular(fifo, 100) is None
    assert credentials._read_regular(link, 100) is None


@pytest.mark.parametrize("alphabet", ["0123456789abcdef", credentials._ALNUM, "ab", "xyz"])
def test_draws_are_of_the_alphabet_and_even(alphabet: str) -> None:
    """Each character equally likely: 62 does not divide 256, and a draw taken modulo
    without dropping the top bytes would favour the first eight letters by a quarter."""
    drawn = credentials.draw(alphabet, 40_000)
    assert len(drawn) == 40_000 and set(drawn) <= set(alphabet)
    expected = len(drawn) / len(alphabet)
    counts = [drawn.count(c) for c in alphabet]
    # 40,000 / 62 is about 645 a letter, whose deviation is about 25: six deviations
    # leave a fair draw out about once in 10**8 runs; a biased one is 160 over.
    assert max(abs(n - expected) for n in counts) < 6 * expected ** 0.5 + 1, counts
