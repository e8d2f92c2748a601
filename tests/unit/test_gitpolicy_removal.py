"""A remote's url or pushurl that the repository had at launch is never removed by the
session's config.

Without its url, git reads a remote's name as a local path: the agent unsets
remote.origin.url (and the upstream that names it, which would have stopped the removal
before), links `origin` in the workspace to a bare repository with a pre-receive hook,
and the user's habitual `git push origin HEAD:x` runs that hook.
"""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest

from claude_sandbox.launch.overlay import gitpolicy as gp
from claude_sandbox.launch.overlay import repoconfig as rc

if TYPE_CHECKING:
    from pathlib import Path

URL = "https://example.com/r.git"


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(cwd),
           "PATH": "/usr/bin:/bin", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0",
           "GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.com",
           "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, check=check)


def split(before: str, after: str) -> tuple[dict[str, tuple[str | None, ...]], dict[str, str]]:
    applicable, refused = gp.split(rc.changes(rc.parse(before), rc.parse(after)), before)
    return {c.name: c.new for c in applicable}, {c.name: why for c, why in refused}


def repository(tmp_path: Path) -> tuple[Path, str]:
    """(a repository with a commit, remote origin and an upstream, its config's text)."""
    repo = tmp_path / "ws"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    git(repo, "remote", "add", "origin", URL)
    git(repo, "config", "branch.main.remote", "origin")
    git(repo, "config", "branch.main.merge", "refs/heads/main")
    return repo, (repo / ".git" / "config").read_text()


def plant(repo: Path, tmp_path: Path) -> Path:
    """The agent's half: `origin` in the workspace, a bare repository whose pre-receive
    hook leaves a marker; the url and the upstream unset. The marker's path."""
    marker = tmp_path / "owned"
    store = tmp_path / "store.git"
    git(tmp_path, "init", "-q", "--bare", str(store))
    hook = store / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (repo / "origin").symlink_to(store)
    git(repo, "config", "--unset", "remote.origin.url")
    git(repo, "branch", "--unset-upstream")
    return marker


def push(repo: Path) -> subprocess.CompletedProcess[str]:
    # Network transports stop before they connect; a local path is not stopped.
    return git(repo, "-c", "protocol.https.allow=never", "push", "origin", "HEAD:x",
               check=False)


def test_unsetting_origins_url_is_refused_and_the_push_stays_off_the_plant(
        tmp_path: Path) -> None:
    repo, before = repository(tmp_path)
    marker = plant(repo, tmp_path)
    config = repo / ".git" / "config"
    after = config.read_text()
    # The plant works with the agent's config: git pushes to ./origin and runs its hook.
    push(repo)
    assert marker.exists()
    marker.unlink()
    applied, refused = split(before, after)
    assert set(refused) == {"remote.origin.url"}
    assert refused["remote.origin.url"] == (
        "it removes a remote's url the repository had at launch: git would then read the "
        "remote's name as a local path and run that repository's hooks")
    assert applied == {"branch.main.remote": (), "branch.main.merge": ()}
    config.write_text(rc.rewrite(before, tuple(
        c for c in rc.changes(rc.parse(before), rc.parse(after)) if c.name in applied)))
    done = push(repo)
    assert "transport 'https' not allowed" in done.stderr
    assert not marker.exists()


ORIGIN = f'[remote "origin"]\n\turl = {URL}\n\tpushurl = git@example.com:o/r.git\n'


@pytest.mark.parametrize(("after", "gone"), [
    ('[remote "origin"]\n\tpushurl = git@example.com:o/r.git\n', "url"),
    (f'[remote "origin"]\n\turl = {URL}\n', "pushurl"),
    ('[remote "origin"]\n\turl = ""\n\tpushurl = git@example.com:o/r.git\n', "url"),
    ("", "url"),
])
def test_a_url_or_pushurl_from_launch_removed_or_emptied_is_refused(after: str,
                                                                    gone: str) -> None:
    _, refused = split(ORIGIN, after)
    assert refused[f"remote.origin.{gone}"].startswith(f"it removes a remote's {gone} ")


def test_a_local_url_the_user_set_is_not_removed_either() -> None:
    # The user's own choice of a local path; still, without it `origin` is ./origin.
    applied, refused = split('[remote "origin"]\n\turl = /srv/r.git\n', "")
    assert applied == {} and set(refused) == {"remote.origin.url"}


def test_changing_a_url_to_another_network_url_applies() -> None:
    after = ('[remote "origin"]\n\turl = ssh://git@example.com/o/r.git\n'
             "\tpushurl = https://example.com/fork.git\n")
    assert split(ORIGIN, after) == ({"remote.origin.url": ("ssh://git@example.com/o/r.git",),
                                     "remote.origin.pushurl": ("https://example.com/fork.git",)},
                                    {})


def test_one_of_several_urls_may_go() -> None:
    before = f'[remote "origin"]\n\turl = {URL}\n\turl = git@example.com:o/r.git\n'
    assert split(before, f'[remote "origin"]\n\turl = {URL}\n') == (
        {"remote.origin.url": (URL,)}, {})


def test_a_remote_the_session_added_and_removed_or_kept_is_applied(tmp_path: Path) -> None:
    repo, before = repository(tmp_path)
    git(repo, "remote", "add", "fork", "git@example.com:me/r.git")
    git(repo, "remote", "add", "scratch", "https://example.com/tmp.git")
    git(repo, "remote", "remove", "scratch")
    applied, refused = split(before, (repo / ".git" / "config").read_text())
    assert refused == {}
    assert applied == {"remote.fork.url": ("git@example.com:me/r.git",),
                       "remote.fork.fetch": ("+refs/heads/*:refs/remotes/fork/*",)}


def test_a_renamed_remote_keeps_its_old_url_and_gains_the_new_one(tmp_path: Path) -> None:
    repo, before = repository(tmp_path)
    git(repo, "remote", "rename", "origin", "upstream")
    applied, refused = split(before, (repo / ".git" / "config").read_text())
    assert set(refused) == {"remote.origin.url"}
    assert applied["remote.upstream.url"] == (URL,)
    assert applied["branch.main.remote"] == ("upstream",)
