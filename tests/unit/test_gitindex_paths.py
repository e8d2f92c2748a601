"""An index is applied only when git would have let every entry's path in.

git checks a path as an entry is added, never as it reads an index from disk, so a
crafted entry named .git/hooks/post-checkout would be written into the real .git at
the user's next `git checkout -- .`, and run.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.launch.overlay import gitapply, gitbase, gitindex
from claude_sandbox.launch.overlay.gitindex import IndexFormat
from tests.unit.test_gitindex import entry, git, index, make_repo

FILE, EXECUTABLE, LINK, GITLINK, DIRECTORY = 0o100644, 0o100755, 0o120000, 0o160000, 0o040000
GIT_REASON = "a .git component"


def with_mode(raw: bytes, mode: int) -> bytes:
    """An entry from test_gitindex.entry with another mode (the word after ctime..ino)."""
    return raw[:24] + struct.pack(">I", mode) + raw[28:]


def crafted(*names: tuple[bytes, int], version: int = 2) -> bytes:
    """An index of `names` (path, mode) in git's order, as git would read it."""
    parts, previous = [], b""
    for name, mode in sorted(names):
        parts.append(with_mode(entry(name, version, previous=previous), mode))
        previous = name
    return index(version, *parts)


HOSTILE = [
    (".git/hooks/post-checkout", EXECUTABLE, GIT_REASON),
    (".git/config", FILE, GIT_REASON),
    ("sub/.git/hooks/pre-commit", EXECUTABLE, GIT_REASON),
    (".GIT/hooks/post-checkout", EXECUTABLE, GIT_REASON),
    (".git./hooks/x", FILE, GIT_REASON),
    (".git . ./hooks/x", FILE, GIT_REASON),
    ("GIT~1/hooks/x", FILE, GIT_REASON),
    ("git~1/config", FILE, GIT_REASON),
    (".git::$INDEX_ALLOCATION/hooks/x", FILE, GIT_REASON),
    (".g\u200cit/hooks/x", FILE, GIT_REASON),
    ("\ufeff.git/config", FILE, GIT_REASON),
    (".gi\u206at\u202e/config", FILE, GIT_REASON),
    ("a\\.git\\hooks\\x", FILE, GIT_REASON),
    (".git", GITLINK, GIT_REASON),
    (".git/", DIRECTORY, GIT_REASON),
    ("../outside", FILE, "'..' component"),
    ("a/../../outside", FILE, "'..' component"),
    ("..\\outside", FILE, "'..' component"),
    ("a/./b", FILE, "'..' component"),
    ("a//b", FILE, "'..' component"),
    ("a/", FILE, "'..' component"),
    ("/etc/passwd", FILE, "absolute"),
    (".gitmodules", LINK, ".gitmodules that is a symbolic link"),
    ("sub/.GitModules. ", LINK, ".gitmodules that is a symbolic link"),
    ("gitmod~1", LINK, ".gitmodules that is a symbolic link"),
    ("GI7EBA~1", LINK, ".gitmodules that is a symbolic link"),
    ("gi7eb~12", LINK, ".gitmodules that is a symbolic link"),
    (".gitm\u200dodules", LINK, ".gitmodules that is a symbolic link"),
]
ORDINARY = [
    ("src/main.py", FILE), ("bin/run", EXECUTABLE), ("link", LINK), ("lib", GITLINK),
    (".gitignore", FILE), (".gitattributes", FILE), (".github/workflows/ci.yml", FILE),
    (".gitmodules", FILE), ("docs/.gitkeep", FILE), (".git-blame-ignore-revs", FILE),
    ("git~2/x", FILE), ("a.git/b", FILE), ("...", FILE), ("gitmod~5", LINK),
    ("caf\u00e9/\u65e5\u672c.txt", FILE), ("bad-\udcff-utf8", FILE), ("dir/", DIRECTORY),
]


@pytest.mark.parametrize(("path", "mode", "reason"), HOSTILE)
def test_paths_git_would_refuse(path: str, mode: int, reason: str) -> None:
    got = gitindex.path_refusal(path, mode)
    assert got is not None and reason in got


@pytest.mark.parametrize(("path", "mode"), ORDINARY)
def test_paths_git_lets_in(path: str, mode: int) -> None:
    assert gitindex.path_refusal(path, mode) is None


IGNORABLE = st.sampled_from([chr(c) for c in (*range(0x200C, 0x2010), *range(0x202A, 0x202F),
                                              *range(0x206A, 0x2070), 0xFEFF)])


@st.composite
def dotgit(draw: st.DrawFn) -> str:
    """.git as some file system git guards would read it: any case, HFS+'s ignored
    code points anywhere, NTFS's trailing dots and spaces and an alternate stream."""
    letters = [c.upper() if draw(st.booleans()) else c for c in draw(
        st.sampled_from([".git", "git~1"]))]
    name = "".join(letter + "".join(draw(st.lists(IGNORABLE, max_size=2))) for letter in letters)
    name = "".join(draw(st.lists(IGNORABLE, max_size=2))) + name
    name += "".join(draw(st.lists(st.sampled_from([".", " "]), max_size=4)))
    return name + draw(st.sampled_from(["", ":", "::$INDEX_ALLOCATION", ":stream"]))


PLAIN = st.text(alphabet="abcxyz019_-", min_size=1, max_size=6)


@settings(max_examples=500, deadline=None)
@given(st.lists(PLAIN, max_size=3), dotgit(), st.lists(PLAIN, max_size=3),
       st.sampled_from([FILE, EXECUTABLE, LINK, GITLINK]))
def test_no_alias_of_git_slips_through(before: list[str], alias: str, after: list[str],
                                       mode: int) -> None:
    path = "/".join([*before, alias, *after])
    got = gitindex.path_refusal(path, mode)
    assert got is not None and GIT_REASON in got


@settings(max_examples=300, deadline=None)
@given(st.lists(PLAIN, min_size=1, max_size=5), st.sampled_from([FILE, EXECUTABLE, LINK]))
def test_plain_paths_pass(parts: list[str], mode: int) -> None:
    assert gitindex.path_refusal("/".join(parts), mode) is None


@pytest.mark.parametrize("version", [2, 3, 4])
def test_a_crafted_index_names_every_hostile_entry(version: int, tmp_path: Path) -> None:
    data = crafted((b"README", FILE), (b".git/hooks/post-checkout", EXECUTABLE),
                   (b".git/config", FILE), (b".gitmodules", LINK), version=version)
    # git itself reads it, hostile entries and all: nothing checks them on the way in.
    git(tmp_path, "init", "-q", "repo")
    (tmp_path / "repo" / ".git" / "index").write_bytes(data)
    listed = git(tmp_path / "repo", "ls-files", "-s").decode()
    assert "100755 " in listed and "\t.git/hooks/post-checkout\n" in listed
    got = dict(gitindex.refused(data))
    assert set(got) == {".git/hooks/post-checkout", ".git/config", ".gitmodules"}
    assert GIT_REASON in got[".git/config"] and "symbolic link" in got[".gitmodules"]


def test_an_index_read_as_sha256_is_checked_too(tmp_path: Path) -> None:
    name = b".git/hooks/post-checkout"
    body = bytes(24) + struct.pack(">I", EXECUTABLE) + bytes(12) + bytes(32)
    raw = body + struct.pack(">H", len(name)) + name
    raw += bytes(8 - len(raw) % 8)
    data = b"DIRC" + struct.pack(">II", 2, 1) + raw
    data += hashlib.sha256(data).digest()
    git(tmp_path, "init", "-q", "--object-format=sha256", "repo")
    (tmp_path / "repo" / ".git" / "index").write_bytes(data)
    assert git(tmp_path / "repo", "ls-files").decode() == ".git/hooks/post-checkout\n"
    assert [path for path, _ in gitindex.refused(data)] == [".git/hooks/post-checkout"]


def test_an_index_that_reads_neither_way_raises() -> None:
    with pytest.raises(IndexFormat, match="signature"):
        gitindex.refused(b"DIRX" + bytes(60))


def test_shown_makes_invisible_and_control_characters_visible() -> None:
    assert gitindex.shown(".g\u200cit/\x1b[2J\udcff") == ".g\\u200cit/\\x1b[2J\\udcff"


@pytest.fixture
def repository(tmp_path: Path) -> tuple[Path, Path, gitbase.Snapshot]:
    """A real git directory, its state at launch, and an empty upper directory."""
    repo = make_repo(tmp_path)
    upper = tmp_path / "upper"
    upper.mkdir()
    return repo / ".git", upper, gitbase.snapshot(str(repo / ".git"))


def test_a_hostile_index_is_kept_in_the_store_and_named(
        repository: tuple[Path, Path, gitbase.Snapshot], tmp_path: Path) -> None:
    real, upper, base = repository
    before = (real / "index").read_bytes()
    (upper / "index").write_bytes(crafted((b"README", FILE), (b".g\xe2\x80\x8cit/hooks/x",
                                                                EXECUTABLE)))
    result = gitapply.apply(str(upper), str(real), base, str(tmp_path))
    assert (real / "index").read_bytes() == before
    assert result.kept and (upper / "index").exists()
    [line] = result.lines
    assert line.startswith(f"{real}/index: the session's index was not applied (git would "
                           "not let in 1 of its entries: '.g\\u200cit/hooks/x': a .git ")


def test_an_ordinary_index_still_applies(
        repository: tuple[Path, Path, gitbase.Snapshot], tmp_path: Path) -> None:
    real, upper, base = repository
    (tmp_path / "other").mkdir()
    other = make_repo(tmp_path / "other")
    git(other, "rm", "-q", "--cached", "plain.txt")
    (upper / "index").write_bytes((other / ".git" / "index").read_bytes())
    result = gitapply.apply(str(upper), str(real), base, str(tmp_path))
    assert not result.kept and not any("not applied" in line for line in result.lines)
    # The same entries; the extensions (the cache-tree, ...) are git's to make again.
    applied, source = (real / "index").read_bytes(), (other / ".git" / "index").read_bytes()
    assert applied == gitindex.without_extensions(source, 20) and b"TREE" in source
    assert git(real.parent, "ls-files", "-s") == git(other, "ls-files", "-s")
    assert "plain.txt" not in git(real.parent, "ls-files").decode().split("\n")


def test_a_linked_worktrees_index_is_held_to_the_same_rule(
        repository: tuple[Path, Path, gitbase.Snapshot], tmp_path: Path) -> None:
    real, upper, base = repository
    good = (real / "index").read_bytes()
    for name, data in (("bad", crafted((b".git/config", FILE))), ("good", good)):
        (upper / "worktrees" / name).mkdir(parents=True)
        (upper / "worktrees" / name / "index").write_bytes(data)
    result = gitapply.apply(str(upper), str(real), base, str(tmp_path))
    assert result.kept
    assert [line.split(": ", 1)[0] for line in result.lines] == [f"{real}/worktrees/bad/index"]
    assert "'.git/config': a .git component" in result.lines[0]
    assert not (real / "worktrees" / "bad" / "index").exists()
    assert (real / "worktrees" / "good" / "index").read_bytes() == gitindex.without_extensions(
        good, 20)
