"""A URL the agent sets reaches the real config only when it names a network host.

git pushes to a local path by running receive-pack on that repository itself, with
its hooks, as the user; `transport::address` runs a helper. The oracle for "how git
reads this URL" is git itself: `protocol.allow=never` makes it name the transport it
chose and stop before it connects or runs anything.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from claude_sandbox.launch.overlay import gitpolicy as gp
from claude_sandbox.launch.overlay import repoconfig as rc
from claude_sandbox.launch.overlay.repoconfig import Entry

URL_KEYS = [("remote", "origin", "url"), ("remote", "origin", "pushurl"),
            ("submodule", "lib", "url")]
NETWORK_TRANSPORTS = {"https", "http", "ssh", "git"}

ORDINARY = [
    "https://github.com/o/r.git", "git@github.com:o/r.git", "ssh://git@host:22/r",
    "http://example.com/r", "git://example.com/r", "git+ssh://git@host/r",
    "ssh+git://host/r", "host:/srv/r.git", "user@host:r", "ssh://[::1]:22/r",
]
# What git itself reads as a local repository or a helper's address.
LOCAL_OR_HELPER = [
    "/home/me/.local/state/claude-sandbox/evil.git", "./evil.git", "../evil.git", "~/evil.git",
    "evil", "evil.git/", "file:///tmp/evil.git", "file://localhost/tmp/evil.git",
    "FILE:///tmp/evil.git", "a/b:c", "./host:path", "foo::bar", "h::x",
    "HTTPS://example.com/r", "foo://example.com/r", "host://r",
]
# Network to git, but a host that is empty, blank or an option to ssh, or a form
# stricter than git's (a helper's `::`, a bracketed scp-like host).
REFUSED_NETWORK = [
    "ssh:///srv/r", "https:///r", "ssh://-oProxyCommand=sh/r", "ssh://u@-oProxyCommand=sh/r",
    "ssh://:22/r", "u@-o:r", ":r", "@:r", "git@:r", "https:// /r", " https://example.com/r",
    "https::https://example.com/r", "[::1]:r",
]

def entry(section: str, subsection: str | None, key: str, value: str | None) -> Entry:
    return Entry(section, subsection, key, value, 0, 0)


@pytest.mark.parametrize("key", URL_KEYS)
@pytest.mark.parametrize("url", ORDINARY)
def test_network_urls_pass(key: tuple[str, str, str], url: str) -> None:
    assert gp.refusal(entry(*key, url)) is None


@pytest.mark.parametrize("key", URL_KEYS)
@pytest.mark.parametrize("url", LOCAL_OR_HELPER + REFUSED_NETWORK)
def test_local_paths_helpers_and_bad_hosts_are_refused(key: tuple[str, str, str],
                                                       url: str) -> None:
    got = gp.refusal(entry(*key, url))
    assert got is not None
    assert got.startswith(f"{key[0]}.*.{key[2]} ")
    assert key[1] not in got  # the agent's subsection is never shown


def test_the_reason_says_what_is_wanted_and_why() -> None:
    got = gp.refusal(entry("remote", "origin", "pushurl", "/tmp/evil.git"))
    assert got == ("remote.*.pushurl must be a network URL (https://, http://, ssh://, git:// "
                   "or host:path): to a local path, file:// or a transport:: form git runs "
                   "that repository's hooks or a helper")


def transport(url: str, cwd: Path) -> str | None:
    """The transport git picks for `url`, stopped before it is used; None when git
    refuses the URL itself (no path, an unknown protocol)."""
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(cwd),
           "PATH": "/usr/bin:/bin", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
    done = subprocess.run(["git", "-c", "protocol.allow=never", "ls-remote", url], cwd=cwd,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                          check=False)
    message = done.stderr.decode("utf-8", "replace")
    if "transport '" not in message or "not allowed" not in message:
        assert message.startswith("fatal: "), message
        return None
    return message.split("transport '", 1)[1].split("'", 1)[0]


@pytest.mark.parametrize("url", ORDINARY)
def test_git_reads_the_ordinary_forms_as_network(url: str, tmp_path: Path) -> None:
    assert transport(url, tmp_path) in NETWORK_TRANSPORTS


@pytest.mark.parametrize("url", LOCAL_OR_HELPER)
def test_git_reads_the_refused_forms_as_local_or_a_helper(url: str, tmp_path: Path) -> None:
    assert transport(url, tmp_path) not in (*NETWORK_TRANSPORTS, None)


# Text shaped like URLs and paths: the characters git's rule turns on, and prefixes.
PIECES = st.sampled_from(["/", ":", "::", "//", "@", ".", "..", "~", "-", "+", "\\", " ",
                          "a", "h", "ssh", "git", "file", "https", "ext", "fd", "[", "]"])
URLISH = st.one_of(
    st.lists(PIECES, min_size=1, max_size=8).map("".join),
    st.tuples(st.sampled_from(["", "https://", "ssh://", "git://", "file://", "u@", "h:"]),
              st.text(alphabet="/:@.~-+ah", max_size=10)).map("".join),
)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(URLISH)
def test_what_passes_git_reads_as_a_network_transport(tmp_path: Path, url: str) -> None:
    if gp.refusal(entry("remote", "origin", "pushurl", url)) is None:
        assert transport(url, tmp_path) in (*NETWORK_TRANSPORTS, None), url


LOCAL = st.one_of(
    st.tuples(st.sampled_from(["/", "./", "../", "~/", "~", "file://", "file:///", "FILE://"]),
              st.text(max_size=20)).map("".join),
    st.text(max_size=20).filter(lambda text: ":" not in text),  # no ':' at all: a path
    st.tuples(st.text(max_size=8).filter(lambda text: ":" not in text), st.just("/"),
              st.text(max_size=8), st.just(":"), st.text(max_size=8)
              ).map("".join),  # a '/' before the first ':'
    st.tuples(st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,8}", fullmatch=True), st.just("::"),
              st.text(max_size=12)).map("".join),  # transport::address
)


@settings(max_examples=1000, deadline=None)
@given(LOCAL, st.sampled_from(URL_KEYS))
def test_no_local_or_helper_form_slips_through(url: str, key: tuple[str, str, str]) -> None:
    assert gp.refusal(entry(*key, url)) is not None
    assert not gp.network_url(url)


def split(before: str, after: str) -> tuple[list[str], dict[str, str]]:
    applicable, refused = gp.split(rc.changes(rc.parse(before), rc.parse(after)), before)
    return [c.name for c in applicable], {c.name: why for c, why in refused}


ORIGIN = '[remote "origin"]\n\turl = https://example.com/r.git\n'


def test_an_upstream_naming_no_remote_is_refused() -> None:
    # git reads `evil` as the repository ./evil and runs its pre-receive on push.
    names, refused = split(ORIGIN, ORIGIN + '[branch "main"]\n\tpushremote = evil\n'
                           "\tremote = /tmp/evil.git\n\tmerge = refs/heads/main\n")
    assert names == ["branch.main.merge"]
    assert set(refused) == {"branch.main.pushremote", "branch.main.remote"}
    assert all("names no remote with a url" in why and "main" not in why
               for why in refused.values())


@pytest.mark.parametrize("value", ["origin", "fork", ".", "https://example.com/o.git",
                                   "git@example.com:o/r.git"])
def test_an_upstream_naming_a_remote_the_repository_itself_or_a_url_passes(value: str) -> None:
    after = (ORIGIN + '[remote "fork"]\n\turl = git@example.com:me/r.git\n'
             f'[branch "main"]\n\tremote = {value}\n')
    assert split(ORIGIN, after) == (
        ["remote.fork.url", "branch.main.remote"], {})


def test_a_remote_whose_url_is_refused_cannot_be_an_upstream() -> None:
    after = ORIGIN + '[remote "evil"]\n\turl = /tmp/evil.git\n[branch "main"]\n\tremote = evil\n'
    names, refused = split(ORIGIN, after)
    assert names == []
    assert "must be a network URL" in refused["remote.evil.url"]
    assert "names no remote" in refused["branch.main.remote"]


def test_removing_the_url_of_a_remote_a_branch_names_is_refused() -> None:
    before = ORIGIN + '[branch "main"]\n\tremote = origin\n'
    names, refused = split(before, '[remote "origin"]\n[branch "main"]\n\tremote = origin\n')
    assert names == []
    assert "removes a remote's url the repository had at launch" in refused["remote.origin.url"]


def test_git_remote_remove_applies_but_for_the_url() -> None:
    # The url stays (test_gitpolicy_removal.py): the name would read as a local path.
    before = ORIGIN + "\tfetch = +refs/heads/*:refs/remotes/origin/*\n" \
        '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n'
    names, refused = split(before, "")
    assert set(refused) == {"remote.origin.url"}
    assert set(names) == {"remote.origin.fetch", "branch.main.remote", "branch.main.merge"}


def test_a_repository_made_in_the_session_keeps_no_unbound_upstream() -> None:
    # gitsession.strip_made: the whole config is the agent's, judged against nothing.
    text = ORIGIN + '[branch "main"]\n\tremote = origin\n[branch "x"]\n\tremote = evil\n'
    allowed, refused = gp.split(rc.changes((), rc.parse(text)))
    assert [c.name for c in allowed] == ["remote.origin.url", "branch.main.remote"]
    assert [c.name for c, _ in refused] == ["branch.x.remote"]


def git(cwd: Path, *args: str) -> None:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(cwd),
           "PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    subprocess.run(["git", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=60, check=True)


def test_a_push_url_set_by_git_to_the_agents_bare_repository_stays_behind(
        tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main", "repo")
    repo = tmp_path / "repo"
    git(repo, "remote", "add", "origin", "https://example.com/r.git")
    config = repo / ".git" / "config"
    before = config.read_text()
    store = tmp_path / "store" / "evil.git"
    git(tmp_path, "init", "-q", "--bare", str(store))
    git(repo, "remote", "set-url", "--push", "origin", str(store))
    git(repo, "config", "submodule.lib.url", f"file://{store}")
    names, refused = split(before, config.read_text())
    assert names == []
    assert set(refused) == {"remote.origin.pushurl", "submodule.lib.url"}
    assert os.fspath(store) not in "".join(refused.values())
