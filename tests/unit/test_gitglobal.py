"""The identity read from git's global files without git (launch/facts/gitglobal.py):
wherever the reader answers, its answer is git's own, on a corpus and on files mutated
at random; where it does not know a form it leaves the files to git."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from claude_sandbox.core import paths
from claude_sandbox.launch.facts import gitconfig, gitglobal

GIT = paths.find_tool("git")
pytestmark = pytest.mark.skipif(GIT is None, reason="git is not installed")

# Forms the reader knows: each is read without git.
KNOWN = [
    "[user]\n\tname = Dev Eloper\n\temail = dev@example.org\n",
    '[user]\n  name = "Dev  Eloper"   # the full name\n  email = dev@example.org ; work\n',
    "[User]\n\tNAME = First\n[user]\n\tname = Second\n",
    '[user "other"]\n\tname = Not This\n[user]\n\temail = e@example.org\n',
    '[alias]\n\tlg = "log --graph --oneline"\n[core]\n\teditor = code --wait\n'
    "[user]\n\tname = A\\tB\n",
    "[user]\n\tname =\n\temail\n",
    '[user]\n\tname = a\\"b\\\\c\n',
    "[user]\n\tname = a\\nb\n\temail = x@y\n",
    "[user]\n\tname = trailing   \n\temail = \"quoted \"  \n",
    '[user]\n\tname = a ""  b  ""  \n',
    "# only a comment\n; and another\n\n",
    "[user]\n\tname=tight\n\temail=t@example.org",
    "[credential]\n\thelper = store\n[safe]\n\tdirectory = /workspaces/project\n"
    "[user]\n\temail = dev@example.org\n\tname = Dev\n",
    "[user] # the identity\n\tname = Dev ; Eloper\n",
    "[user]\n\tname = Ünïcödé Ñame\n",
]
# Forms left to git: None from the reader.
LEFT = [
    "[include]\n\tpath = other\n[user]\n\tname = A\n",
    '[includeIf "gitdir:/x/"]\n\tpath = other\n',
    "[user] name = same line\n",
    "[user]\n\tname = a\\qb\n",
    '[user]\n\tname = "unclosed\n',
    "name = before any section\n",
    "[user]\r\n\tname = crlf\r\n",
    "[user]\n\tname = continued \\\n on\n",
    "[user.legacy]\n\tname = x\n",
    "\ufeff[user]\n\tname = bom\n",
    "[user]\n\tname = Jane\tDoe\n",  # a space in git before 2.45, a tab after
]
ALPHABET = '"\\#;=[] \t\nabcXYZ-.é'


def _home(tmp_path: Path, gitconfig_text: str, xdg_text: str | None = None) -> str:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / ".gitconfig").write_text(gitconfig_text, encoding="utf-8", newline="")
    if xdg_text is not None:
        (home / ".config" / "git").mkdir(parents=True, exist_ok=True)
        (home / ".config" / "git" / "config").write_text(xdg_text, encoding="utf-8",
                                                         newline="")
    return str(home)


def _git(home: str) -> dict[str, str]:
    assert GIT is not None
    return gitconfig._git_identity(GIT, home)


@pytest.mark.parametrize("text", KNOWN)
def test_a_known_form_is_read_without_git_and_as_git_reads_it(tmp_path: Path, text: str
                                                              ) -> None:
    home = _home(tmp_path, text)
    assert gitglobal.read(home) == _git(home)


@pytest.mark.parametrize("text", LEFT)
def test_a_form_the_reader_does_not_know_is_left_to_git(tmp_path: Path, text: str) -> None:
    assert gitglobal.read(_home(tmp_path, text)) is None


def test_the_home_file_is_read_where_there_is_one_else_the_xdg_file_as_in_git(
        tmp_path: Path) -> None:
    import os

    home = _home(tmp_path, "[user]\n\tname = Home\n",
                 "[user]\n\tname = Xdg\n\temail = xdg@example.org\n")
    assert gitglobal.read(home) == _git(home) == {"user.name": "Home"}
    (Path(home) / ".gitconfig").write_text("")
    assert gitglobal.read(home) == _git(home) == {}
    os.unlink(os.path.join(home, ".gitconfig"))
    assert gitglobal.read(home) == _git(home) == {"user.name": "Xdg",
                                                  "user.email": "xdg@example.org"}
    os.symlink("nowhere", os.path.join(home, ".gitconfig"))  # git passes over it too
    assert gitglobal.read(home) == _git(home) == {"user.name": "Xdg",
                                                  "user.email": "xdg@example.org"}


def test_no_file_is_no_identity_and_a_fifo_or_a_directory_is_left_to_git(
        tmp_path: Path) -> None:
    import os

    home = tmp_path / "empty"
    home.mkdir()
    assert gitglobal.read(str(home)) == {}
    os.mkfifo(home / ".gitconfig")
    assert gitglobal.read(str(home)) is None  # not opened blocking: the launch goes on
    os.unlink(home / ".gitconfig")
    (home / ".gitconfig").mkdir()
    assert gitglobal.read(str(home)) is None
    (home / ".gitconfig").rmdir()
    (home / ".gitconfig").write_bytes(b"[user]\n\tname = \xff\n")
    assert gitglobal.read(str(home)) is None


def test_the_identity_of_a_launch_comes_from_the_reader_where_it_knows_the_form(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _home(tmp_path, "[user]\n\tname = Dev\n\temail = dev@example.org\n")
    monkeypatch.setattr(gitconfig, "_git_identity", lambda *_: pytest.fail("git started"))
    assert gitconfig.identity("u", home) == gitconfig.Identity("Dev", "dev@example.org")


@pytest.mark.parametrize("seed", range(4))
def test_a_mutated_file_read_by_the_reader_reads_as_git_reads_it(tmp_path: Path,
                                                                 seed: int) -> None:
    chance = random.Random(seed)
    answered = 0
    for _ in range(60):
        text = list(chance.choice(KNOWN + LEFT))
        for _ in range(chance.randint(1, 4)):
            where = chance.randint(0, len(text))
            action = chance.random()
            if action < 0.4:
                text.insert(where, chance.choice(ALPHABET))
            elif action < 0.7 and where < len(text):
                del text[where]
            elif where < len(text):
                text[where] = chance.choice(ALPHABET)
        home = _home(tmp_path, "".join(text))
        found = gitglobal.read(home)
        if found is not None:
            answered += 1
            assert found == _git(home), repr("".join(text))
    assert answered > 10  # the comparison ran, not only the fall-backs
