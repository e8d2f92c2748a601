"""The .git/config reader, policy and writer, with git itself as the oracle for the syntax."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from claude_sandbox.launch.overlay import gitpolicy as gp
from claude_sandbox.launch.overlay import repoconfig as rc
from claude_sandbox.launch.overlay.repoconfig import Change, ConfigSyntax, Entry

Reading = list[tuple[str, str | None]]


def _env(home: Path) -> dict[str, str]:
    return {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(home),
            "PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.com",
            "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@example.com"}


def git(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], env=_env(home), stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("repoconfig")


def git_reads(scratch: Path, text: str) -> Reading | None:
    """What git lists from `text` as a config file; None where git says bad config."""
    path = scratch / "config"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))  # as the launcher reads it
    done = git(scratch, "config", "--file", str(path), "--list", "--null")
    if done.returncode != 0:
        assert b"bad config" in done.stderr, done.stderr
        return None
    found: Reading = []
    for item in done.stdout.split(b"\0")[:-1]:
        name, newline, value = item.partition(b"\n")
        found.append((name.decode("utf-8", "surrogateescape"),
                      value.decode("utf-8", "surrogateescape") if newline else None))
    return found


def ours(text: str) -> Reading | None:
    try:
        return [(entry.name, entry.value) for entry in rc.parse(text)]
    except ConfigSyntax:
        return None


# Hand-written files, each with what git lists from it.
READINGS: list[tuple[str, Reading]] = [
    ("[core]\n\tbare = false\n", [("core.bare", "false")]),
    ("[a]\nk=v\nk2 =v\nk3= v\n  k4 \t=  v  \n",
     [("a.k", "v"), ("a.k2", "v"), ("a.k3", "v"), ("a.k4", "v")]),
    ("[a]\n\tflag\n\tFlag2 \t\n", [("a.flag", None), ("a.flag2", None)]),
    ('[a]\nk =\nk2 = ""\nk3 = "" \n', [("a.k", ""), ("a.k2", ""), ("a.k3", "")]),
    ("# c\n; c\n[a] # c [b]\nk = v # c\nk2 = v;c\nk3 = \"v # not ; a comment\" ; c\n",
     [("a.k", "v"), ("a.k2", "v"), ("a.k3", "v # not ; a comment")]),
    ("[a]\nk = a  b\t\tc \t\n", [("a.k", "a  b  c")]),
    ('[a]\nk = " lead" mid "trail "\nj = a ""\nq = "\ta"\n',
     [("a.k", " lead mid trail "), ("a.j", "a "), ("a.q", "\ta")]),
    ('[a]\nk = a\\tb\\nc\\bd\\"e\\\\f\n', [("a.k", 'a\tb\nc\bd"e\\f')]),
    ("[a]\nk = one \\\n  two\\\nthree\nj = x\n", [("a.k", "one   twothree"), ("a.j", "x")]),
    ('[a]\nk = "a\\\nb" \\\n\n', [("a.k", "ab ")]),  # blanks before a backslash stay
    ('[remote "origin"]\nurl = x\n[Remote "OrIgin"]\nURL = y\n',
     [("remote.origin.url", "x"), ("remote.OrIgin.url", "y")]),
    ('[a "q\\"b\\\\c\\x]"]\nk=1\n', [('a.q"b\\cx].k', "1")]),
    ("[Remote.Origin]\nurl = x\n[a.b.C]\nk = 1\n", [("remote.origin.url", "x"), ("a.b.c.k", "1")]),
    ('[a.B "C"]\nk=1\n[a\t  "d e"]\nk=2\n', [("a.b.C.k", "1"), ("a.d e.k", "2")]),
    ("[my-sec.x-1]\nk-2 = v\n", [("my-sec.x-1.k-2", "v")]),
    ("[a] k = 1\n[b][c] k = 2\n[d]j\n", [("a.k", "1"), ("c.k", "2"), ("d.j", None)]),
    ("[a]\r\nk = v \r\nj = \"x\ry\"\r\n", [("a.k", "v"), ("a.j", "x\ry")]),
    ("[a]\nk = a\rb\n", [("a.k", "a b")]),
    ("\ufeff[a]\nk=1\n", [("a.k", "1")]),
    ("[a]\nk = v", [("a.k", "v")]),
    ("[a]\nk", [("a.k", None)]),
    ("[a]\nk = v\\", [("a.k", "v")]),
    ("[a]\nk = é ☃ \ufeff\n[a \"é\"]\nk=1\n", [("a.k", "é ☃ \ufeff"), ("a.é.k", "1")]),
    ('[a ""]\nk=1\n[ "x"]\nk=2\n[b.]\nk=3\n', [("a..k", "1"), (".x.k", "2"), ("b..k", "3")]),
    ("[a]\nk=1\nk=2\n[b]\n[a]\nk=3\n", [("a.k", "1"), ("a.k", "2"), ("a.k", "3")]),
    ("[a]\nk = a=b [c]\n", [("a.k", "a=b [c]")]),
    ("[a]\nk = x\v\f\n", [("a.k", "x\v\f")]),
    ('[a "\udcff"]\nk = \udcfe\udcc3 x\n', [("a.\udcff.k", "\udcfe\udcc3 x")]),  # not UTF-8
    ("", []),
    ("\n  \n\t# only comments\n", []),
]


@pytest.mark.parametrize(("text", "reading"), READINGS)
def test_parse_reads_what_git_reads(scratch: Path, text: str, reading: Reading) -> None:
    assert git_reads(scratch, text) == reading
    assert ours(text) == reading


def test_entries_carry_their_parts_and_line_spans() -> None:
    entries = rc.parse('# c\n[Remote "Up"]\n\tURL = a \\\n b\n[x] k\n')
    assert entries == (Entry("remote", "Up", "url", "a  b", 2, 3),
                       Entry("x", None, "k", None, 4, 4))
    assert entries[0].name == "remote.Up.url"
    assert rc.parse("[a.b.c]\nk=1")[0] == Entry("a", "b.c", "k", "1", 1, 1)


BAD = ["[a\n", "[a", "[]\nk=1\n", "[a b]\n", '[a "b"c]\n', '[a "b" ]\n', '[a "b\n"]\n',
       '[a\n"b"]\nk=1\n', '[a "b\\\n"]\n', "[a_b]\n", "[a]\n1k = v\n", "[a]\n-k=v\n",
       "[a]\nk_x = v\n", "[a]\nk # c\n", "[a]\nk ; c\n", '[a]\nk = "abc\n', '[a]\nk = "abc',
       "[a]\nk = \\x\n", "[a]\nk = \\r\n", '[a]\nk = "a\\', "[a]\nk v\n", "[a]\n=v\n",
       "[a]\nk\r = v\n", "[é]\n", "[a]\né = 1\n", "\ufeff\ufeff[a]\n", "[a]\n\\\n"]


@pytest.mark.parametrize("text", BAD)
def test_syntax_errors_where_git_says_bad_config(scratch: Path, text: str) -> None:
    assert git_reads(scratch, text) is None
    with pytest.raises(ConfigSyntax, match=r"^line \d+: "):
        rc.parse(text)


@pytest.mark.parametrize("text", ["[a]\nk=1\n\n\n1=2\n", '[a]\nk = "x\nj=1\n', "[a]\n[b c]\n"])
def test_the_line_number_is_the_one_git_names(scratch: Path, text: str) -> None:
    path = scratch / "config"
    path.write_text(text)
    stderr = git(scratch, "config", "--file", str(path), "--list").stderr.decode()
    with pytest.raises(ConfigSyntax) as error:
        rc.parse(text)
    assert f"bad config line {str(error.value).split(':')[0].split()[1]} " in stderr


def test_stricter_than_git_a_variable_before_any_section_and_a_nul(scratch: Path) -> None:
    assert git_reads(scratch, "k = v\n[a]\nj = 1\n") == [("k", "v"), ("a.j", "1")]
    with pytest.raises(ConfigSyntax, match=r"^line 1: a variable before any section"):
        rc.parse("k = v\n[a]\nj = 1\n")
    with pytest.raises(ConfigSyntax, match=r"^line 2: NUL"):
        rc.parse("[a]\nk = v\0w\n")


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(exclude_categories=()) | st.sampled_from("[]\"\\=#;\n\r\t ak.")))
def test_parse_raises_only_config_syntax_on_any_text(text: str) -> None:
    try:
        rc.parse(text)
    except ConfigSyntax:
        pass


BITS = st.sampled_from(["a", "b c", " ", "\t", '"', "\\\\", '\\"', "\\n", "\\t", "\\b", "\\x",
                        "\\\n", "\\", "#", ";", "=", "é", "\r", "]", "[", "\r\n"])
KEYS = st.sampled_from(["k", "Key", "k-1", "a2", "1k", "-k", "k_", "", "é"])
HEADERS = st.sampled_from(["[a]", "[A.b]", '[a "b"]', '[a "B.c"]', '[a \t"x\\"y\\\\z\\q"]',
                           '[a "b" ]', "[]", "[a b]", '[ "s"]', "[a.]", "[a", '[a "b', "[a-1]",
                           '[a\n"b"]', "[a]k=v", "[a] # c", "[a][b]", "[a]\\"])
LINES = st.one_of(
    HEADERS,
    st.builds(lambda key, sep, bits: key + sep + "".join(bits), KEYS,
              st.sampled_from([" = ", "=", " ", "", "\t=\t", " # ", " =", "= "]),
              st.lists(BITS, max_size=6)),
    st.sampled_from(["# c", '; c "', "", "  ", "\t", "\r"]),
)
SOUPS = st.builds(lambda bom, lines, crlf, end: ("\ufeff" if bom else "")
                  + ("\r\n" if crlf else "\n").join(lines) + end,
                  st.booleans(), st.lists(LINES, max_size=8), st.booleans(),
                  st.sampled_from(["", "\n", "\\", "\\\n"]))


@settings(max_examples=400, deadline=None)
@given(st.one_of(SOUPS, st.builds(lambda lines: "[s]\n" + "\n".join(lines),
                                  st.lists(LINES, max_size=8))))
def test_parse_agrees_with_git_on_generated_text(scratch: Path, text: str) -> None:
    theirs = git_reads(scratch, text)
    try:
        mine = [(entry.name, entry.value) for entry in rc.parse(text)]
    except ConfigSyntax as error:
        if "before any section" in str(error):  # git reads these as dotless names
            assert theirs is None or any("." not in name for name, _ in theirs)
        else:
            assert theirs is None, (text, theirs, error)
        return
    assert mine == theirs


# Configs built from parts: the test renders them in git's various spellings.
# The launcher decodes with surrogateescape: bytes that are not UTF-8 come as U+DC80-U+DCFF.
CHARS = st.characters(codec="utf-8", exclude_characters="\0") | st.sampled_from(["\udc80",
                                                                                  "\udcff"])
VALUES = st.one_of(
    st.none(),
    st.text(CHARS, max_size=10),
    st.sampled_from([" lead", "trail ", "a#b", "a;b", 'q"q', "back\\slash", "new\nline",
                     "tab\tx", "\r", "cr\rx", "", "  ", "\\", "é☃", "\b", "[x]", "a  b",
                     "ext::sh", "\\\n", "#", "x\r\n", "\t"]),
)
SUBSECTIONS = st.one_of(st.none(), st.sampled_from(["origin", "main", "a.b", "x-1"]),
                        st.text(CHARS.filter(lambda c: c != "\n"), max_size=6))
STEMS = st.tuples(st.sampled_from(["core", "remote", "branch", "user", "x-1"]), SUBSECTIONS)
KEYNAMES = st.sampled_from(["url", "k", "key-2", "name", "fetch"])


def render_value(value: str, data: st.DataObject) -> str:
    tokens = [{"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}.get(c, c) for c in value]
    if data.draw(st.booleans()) or value.strip(" ") != value or any(c in value for c in '#;"\r'):
        tokens = ['"', *tokens, '"']
    if len(tokens) > 1 and data.draw(st.booleans()):  # a continuation line, never at the end
        at = data.draw(st.integers(1, len(tokens) - 1))
        tokens.insert(at, "\\\n")
    return "".join(tokens) + data.draw(st.sampled_from(["", " # c", "\t; c"]))


def render_header(section: str, subsection: str | None, data: st.DataObject) -> str:
    shown = data.draw(st.sampled_from([section, section.upper()]))
    if subsection is None:
        return f"[{shown}]"
    plain = subsection and all(c.isascii() and (c.isalnum() or c in "-.") for c in subsection)
    if plain and subsection == subsection.lower() and data.draw(st.booleans()):
        return f"[{shown}.{subsection}]"
    escaped = subsection.replace("\\", "\\\\").replace('"', '\\"')
    blank = data.draw(st.sampled_from([" ", "  ", "\t"]))
    return f'[{shown}{blank}"{escaped}"]'


def render(sections: list[tuple[tuple[str, str | None], list[tuple[str, str | None]]]],
           data: st.DataObject) -> str:
    lines = ["# a user's config"]
    for (section, subsection), entries in sections:
        lines.append(render_header(section, subsection, data))
        for key, value in entries:
            key = data.draw(st.sampled_from([key, key.upper()]))
            indent = data.draw(st.sampled_from(["\t", "", "  "]))
            lines.append(f"{indent}{key}" if value is None else
                         f"{indent}{key}{data.draw(st.sampled_from([' = ', '=']))}"
                         f"{render_value(value, data)}")
    return "\n".join(lines) + data.draw(st.sampled_from(["", "\n"]))


def name_of(section: str, subsection: str | None, key: str) -> str:
    return Entry(section, subsection, key, None, 0, 0).name


def grouped(reading: Reading) -> dict[str, list[str | None]]:
    found: dict[str, list[str | None]] = {}
    for name, value in reading:
        found.setdefault(name, []).append(value)
    return found


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(STEMS, st.lists(st.tuples(KEYNAMES, VALUES), max_size=4)),
                max_size=5), st.data())
def test_rewrite_yields_exactly_the_expected_variables(
        scratch: Path, sections: list[tuple[tuple[str, str | None],
                                            list[tuple[str, str | None]]]],
        data: st.DataObject) -> None:
    text = render(sections, data)
    before = git_reads(scratch, text)
    assert before is not None and ours(text) == before
    assert before == [(name_of(s, sub, k), v) for (s, sub), es in sections for k, v in es]
    known = list(dict.fromkeys((s, sub, k) for (s, sub), es in sections for k, _ in es))
    fresh = st.tuples(STEMS, KEYNAMES).map(lambda t: (t[0][0], t[0][1], t[1]))
    picked = data.draw(st.lists(st.sampled_from(known) | fresh if known else fresh,
                                max_size=4, unique=True))
    apply = [Change(name_of(*v), *v, (), tuple(data.draw(st.lists(VALUES, max_size=3))))
             for v in picked]
    result = rc.rewrite(text, apply)
    after = git_reads(scratch, result)
    assert after is not None and ours(result) == after
    expected = grouped(before)
    for change in apply:
        expected[change.name] = list(change.new)
    assert grouped(after) == {name: values for name, values in expected.items() if values}
    # Lines of the variables left alone are there, byte for byte, in their order.
    lines = iter(result.split("\n"))
    untouched = {(c.section, c.subsection, c.key) for c in apply}
    for entry in rc.parse(text):
        if (entry.section, entry.subsection, entry.key) not in untouched:
            for line in text.split("\n")[entry.first : entry.last + 1]:
                assert any(line == got for got in lines)


@settings(max_examples=300, deadline=None)
@given(st.builds(lambda lines, end: "[s]\n" + "\n".join(lines) + end, st.lists(LINES, max_size=8),
                 st.sampled_from(["", "\n", "\\", "\\\n"])), st.data())
def test_rewrite_keeps_odd_layouts_readable(scratch: Path, text: str, data: st.DataObject) -> None:
    before = ours(text)
    assume(before is not None)
    assert before is not None
    known = list(dict.fromkeys((e.section, e.subsection, e.key) for e in rc.parse(text)))
    fresh = st.tuples(st.sampled_from(["s", "a", "b", "c", "n"]), st.sampled_from([None, "b", "x"]),
                      st.sampled_from(["k", "key", "a2"]))
    picked = data.draw(st.lists(st.sampled_from(known) | fresh if known else fresh,
                                max_size=3, unique=True))
    apply = [Change(name_of(*v), *v, (), tuple(data.draw(st.lists(VALUES, max_size=2))))
             for v in picked]
    result = rc.rewrite(text, apply)
    after = git_reads(scratch, result)
    assert after is not None and ours(result) == after
    expected = grouped(before)
    for change in apply:
        expected[change.name] = list(change.new)
    assert grouped(after) == {name: values for name, values in expected.items() if values}


def test_new_values_go_to_the_last_section_of_their_kind_or_a_new_one() -> None:
    text = '[remote "a"]\n\turl = x\n[core]\n\tbare = false\n[remote "a"]\n\tfetch = y\n# end'
    apply = [Change("remote.a.url", "remote", "a", "url", ("x",), ("z",)),
             Change("user.name", "user", None, "name", (), ("A \"B\" ; C", None)),
             Change("core.bare", "core", None, "bare", ("false",), ())]
    assert rc.rewrite(text, apply) == (
        '[remote "a"]\n[core]\n[remote "a"]\n\tfetch = y\n\turl = z\n# end\n'
        '[user]\n\tname = "A \\"B\\" ; C"\n\tname\n')


def test_a_header_sharing_a_line_stays_and_a_final_backslash_is_closed(scratch: Path) -> None:
    assert rc.rewrite("[a] k = 1\n[b][c]\n", [Change("a.k", "a", None, "k", ("1",), ("2",))]
                      ) == "[a] \n\tk = 2\n[b][c]\n"
    text = "[a]\nk = v\\"
    result = rc.rewrite(text, [Change("a.j", "a", None, "j", (), ("w",))])
    assert git_reads(scratch, result) == [("a.k", "v"), ("a.j", "w")]
    result = rc.rewrite("[a]\nk = v\\\n", [Change("b.j", "b", None, "j", (), ("w",))])
    assert git_reads(scratch, result) == [("a.k", "v"), ("b.j", "w")]
    result = rc.rewrite("[a]\nk = v\\\n", [Change("a.j", "a", None, "j", (), ("w",))])
    assert git_reads(scratch, result) == [("a.k", "v"), ("a.j", "w")]
    assert rc.rewrite("[a]\nk = v\\", []) == "[a]\nk = v\\"
    assert rc.rewrite("", [Change("user.email", "user", None, "email", (), ("a@b",))]
                      ) == "[user]\n\temail = a@b\n"


@pytest.mark.parametrize("change", [
    Change("a.k", "a", None, "k", (), ("v\0w",)),
    Change("a.1k", "a", None, "1k", (), ("v",)),
    Change("a b.k", "a b", None, "k", (), ("v",)),
    Change("a.x\ny.k", "a", "x\ny", "k", (), ("v",)),
])
def test_rewrite_refuses_what_git_could_not_read_back(change: Change) -> None:
    with pytest.raises(ConfigSyntax, match=r"^cannot write"):
        rc.rewrite("[a]\n", [change])


ALLOWED = [
    ("remote", "origin", "url", "https://example.com/r.git"),
    ("remote", "origin", "pushurl", "git@github.com:o/r.git"),
    ("remote", "origin", "fetch", "+refs/heads/*:refs/remotes/origin/*"),
    ("remote", "origin", "push", "refs/heads/main"),
    ("remote", "origin", "tagopt", "--no-tags"),
    ("remote", "origin", "prune", "true"),
    ("remote", "origin", "prunetags", None),
    ("remote", "origin", "mirror", "false"),
    ("remote", "origin", "skipdefaultupdate", "true"),
    ("remote", "origin", "skipfetchall", "yes"),
    ("branch", "main", "remote", "origin"),
    ("branch", "main", "pushremote", "fork"),
    ("branch", "main", "merge", "refs/heads/main"),
    ("branch", "main", "rebase", "merges"),
    ("branch", "feature/x", "description", "what it is for"),
    ("user", None, "name", "A U Thor"),
    ("user", None, "email", "a@example.com"),
    ("submodule", "lib", "url", "https://example.com/lib.git"),
    ("submodule", "lib", "active", "true"),
    ("submodule", "lib", "branch", "main"),
    ("submodule", "lib", "shallow", "true"),
    ("submodule", "lib", "fetchrecursesubmodules", "on-demand"),
    ("submodule", "lib", "ignore", "dirty"),
    ("core", None, "repositoryformatversion", "0"),
    ("core", None, "filemode", "true"),
    ("core", None, "bare", "false"),
    ("core", None, "logallrefupdates", "always"),
    ("core", None, "ignorecase", "TRUE"),
    ("core", None, "precomposeunicode", None),
    ("core", None, "symlinks", "off"),
    ("core", None, "worktree", "../tree"),
    ("extensions", None, "worktreeconfig", "true"),
]


@pytest.mark.parametrize(("section", "subsection", "key", "value"), ALLOWED)
def test_the_allow_list(section: str, subsection: str | None, key: str, value: str | None) -> None:
    assert gp.refusal(Entry(section, subsection, key, value, 0, 0)) is None


REFUSED = [
    ("core", None, "fsmonitor", "touch /tmp/x", "core.fsmonitor runs a program"),
    ("core", None, "hookspath", "/tmp/hooks", "core.hookspath chooses the hooks git runs"),
    ("core", None, "sshcommand", "ssh -oProxyCommand=x", "runs a program"),
    ("core", None, "pager", "sh", "runs a program"),
    ("core", None, "editor", "sh", "runs a program"),
    ("core", None, "askpass", "sh", "runs a program"),
    ("core", None, "attributesfile", "/x", "not on the allow-list"),
    ("include", None, "path", "/dev/tty", "include.* reads another config file"),
    ("includeif", "gitdir:/x/", "path", "/y", "reads another config file"),
    ("filter", "lfs", "clean", "sh", "filter.* runs programs"),
    ("filter", "lfs", "required", "true", "filter.* runs programs"),
    ("diff", "pdf", "textconv", "sh", "diff.*.textconv runs a program"),
    ("diff", "x", "command", "sh", "runs a program"),
    ("diff", None, "external", "sh", "runs a program"),
    ("merge", "ours", "driver", "sh", "merge.*.driver runs a program"),
    ("credential", None, "helper", "!sh", "credential.* runs helpers"),
    ("credential", "https://example.com", "username", "me", "credential.*"),
    ("alias", None, "st", "!sh -c x", "alias.* runs commands"),
    ("url", "https://evil.example/", "insteadof", "https://github.com/", "rewrites the URLs"),
    ("url", "x", "pushinsteadof", "y", "rewrites the URLs"),
    ("uploadpack", None, "packobjectshook", "sh", "uploadpack.* runs programs"),
    ("receivepack", None, "denycurrentbranch", "ignore", "receivepack.*"),
    ("gpg", None, "program", "sh", "gpg.* runs"),
    ("gpg", "ssh", "program", "sh", "gpg.* runs"),
    ("sequence", None, "editor", "sh", "sequence.editor runs a program"),
    ("pager", None, "log", "sh", "pager.* runs a program"),
    ("http", None, "proxy", "http://evil", "http.* sets proxies"),
    ("http", "https://x", "extraheader", "A: b", "http.*"),
    ("protocol", "ext", "allow", "always", "protocol.* allows transports"),
    ("remote", "origin", "uploadpack", "sh", "remote.*.uploadpack runs a program"),
    ("remote", "origin", "receivepack", "sh", "runs a program"),
    ("remote", "origin", "vcs", "x", "remote.*.vcs runs a program"),
    ("remote", "origin", "proxy", "http://evil", "remote.*.proxy is not on the allow-list"),
    ("remote", None, "pushdefault", "origin", "remote.pushdefault is not on the allow-list"),
    ("submodule", "lib", "update", "!sh -c x", "submodule.*.update runs a command"),
    ("submodule", "lib", "update", "rebase", "runs a command"),
    ("user", None, "signingkey", "x", "not on the allow-list"),
    ("user", "x", "name", "A", "user.*.name is not on the allow-list"),
    ("branch", None, "autosetupmerge", "true", "not on the allow-list"),
    ("safe", None, "directory", "*", "not on the allow-list"),
    ("remote", "o", "url", "ext::sh -c touch% /tmp/x", "ext:: and fd::"),
    ("remote", "o", "url", "EXT::sh", "ext:: and fd::"),
    ("remote", "o", "pushurl", " ext::sh", "ext:: and fd::"),
    ("remote", "o", "url", "fd::17", "ext:: and fd::"),
    ("submodule", "lib", "url", "ext::sh -c x", "ext:: and fd::"),
    ("remote", "o", "url", "-oProxyCommand=sh", "starts with '-'"),
    ("submodule", "lib", "url", "--upload-pack=sh", "starts with '-'"),
    ("remote", "o", "url", None, "needs a value"),
    ("remote", "o", "url", "https://a\n.example", "control characters"),
    ("core", None, "bare", "yes please", "plain value"),
    ("core", None, "repositoryformatversion", "!sh", "plain value"),
    ("core", None, "worktree", "/elsewhere", "relative path"),
    ("core", None, "worktree", "~/x", "relative path"),
    ("core", None, "worktree", None, "relative path"),
    ("extensions", None, "objectformat", "sha256", "when a repository is made"),
    ("extensions", None, "objectformat", "md5", "when a repository is made"),
    ("extensions", None, "objectformat", None, "when a repository is made"),
    ("extensions", None, "worktreeconfig", "2", "plain value"),
    ("extensions", None, "partialclone", "origin", "not on the allow-list"),
]


@pytest.mark.parametrize(("section", "subsection", "key", "value", "reason"), REFUSED)
def test_refused_with_a_reason(section: str, subsection: str | None, key: str,
                               value: str | None, reason: str) -> None:
    got = gp.refusal(Entry(section, subsection, key, value, 0, 0))
    assert got is not None and reason in got


def test_a_reason_never_shows_the_agents_subsection() -> None:
    got = gp.refusal(Entry("remote", "\x1b]0;owned\x07", "proxy", "x", 0, 0))
    assert got == "remote.*.proxy is not on the allow-list"


class Repo:
    """A real repository, changed by real git as an agent would."""

    def __init__(self, home: Path) -> None:
        self.home, self.path = home, home / "repo"
        self.run("init", "-q", "-b", "main", str(self.path))

    def run(self, *args: str) -> None:
        done = git(self.home, *args) if args[0] == "init" else git(self.home, "-C",
                                                                   str(self.path), *args)
        assert done.returncode == 0, done.stderr

    @property
    def config(self) -> Path:
        return self.path / ".git" / "config"

    def text(self) -> str:
        return self.config.read_text()


def applied(before: str, after: str) -> tuple[tuple[Change, ...], tuple[tuple[Change, str], ...],
                                               str]:
    found = rc.changes(rc.parse(before), rc.parse(after))
    applicable, refused = gp.split(found, before)
    return applicable, refused, rc.rewrite(before, applicable)


def test_git_remote_add_is_carried_over(tmp_path: Path, scratch: Path) -> None:
    repo = Repo(tmp_path)
    before = repo.text()
    repo.run("remote", "add", "origin", "https://example.com/r.git")
    applicable, refused, result = applied(before, repo.text())
    assert [c.name for c in applicable] == ["remote.origin.url", "remote.origin.fetch"]
    assert applicable[0] == Change("remote.origin.url", "remote", "origin", "url", (),
                                   ("https://example.com/r.git",))
    assert refused == ()
    assert result.startswith(before)
    assert git_reads(scratch, result) == git_reads(scratch, repo.text())


def test_an_upstream_and_an_identity_are_carried_over(tmp_path: Path, scratch: Path) -> None:
    repo = Repo(tmp_path)
    repo.run("remote", "add", "origin", "https://example.com/r.git")
    repo.run("commit", "-q", "--allow-empty", "-m", "one")
    repo.run("update-ref", "refs/remotes/origin/main", "HEAD")
    before = repo.text()
    repo.run("branch", "--set-upstream-to=origin/main")
    repo.run("config", "user.email", "agent@example.com")
    applicable, refused, result = applied(before, repo.text())
    assert [(c.name, c.new) for c in applicable] == [
        ("branch.main.remote", ("origin",)), ("branch.main.merge", ("refs/heads/main",)),
        ("user.email", ("agent@example.com",))]
    assert refused == ()
    assert grouped(git_reads(scratch, result) or []) == grouped(git_reads(scratch, repo.text())
                                                                or [])


def test_planted_fsmonitor_include_and_alias_stay_behind(tmp_path: Path, scratch: Path) -> None:
    repo = Repo(tmp_path)
    before = repo.text()
    repo.run("remote", "add", "origin", "https://example.com/r.git")
    repo.run("config", "core.fsmonitor", "touch /tmp/owned")
    repo.run("config", "alias.st", "!sh -c 'touch /tmp/owned'")
    repo.run("config", "remote.origin.uploadpack", "touch /tmp/owned")
    after = repo.text() + "[include]\n\tpath = /dev/tty\n"
    applicable, refused, result = applied(before, after)
    assert [c.name for c in applicable] == ["remote.origin.url", "remote.origin.fetch"]
    assert {c.name: why for c, why in refused} == {
        "core.fsmonitor": "core.fsmonitor runs a program",
        "alias.st": "alias.* runs commands, shell commands with !",
        "remote.origin.uploadpack": "remote.*.uploadpack runs a program",
        "include.path": "include.* reads another config file"}
    names = {name for name, _ in git_reads(scratch, result) or []}
    assert "remote.origin.url" in names
    assert not names & {"core.fsmonitor", "alias.st", "remote.origin.uploadpack", "include.path"}


def test_a_removed_remote_goes_but_its_url_and_the_users_own_settings_stay(
        tmp_path: Path, scratch: Path) -> None:
    repo = Repo(tmp_path)
    repo.run("remote", "add", "origin", "https://example.com/r.git")
    repo.run("config", "core.hooksPath", "/home/me/hooks")  # the user's own
    repo.run("config", "alias.lg", "log --oneline")
    before = repo.text()
    repo.run("remote", "remove", "origin")
    repo.run("config", "--unset", "core.hooksPath")
    applicable, refused, result = applied(before, repo.text())
    assert [(c.name, c.new) for c in applicable] == [("remote.origin.fetch", ())]
    # Without its url, git would read `origin` as the local path ./origin.
    assert {c.name: why.split(":")[0] for c, why in refused} == {
        "remote.origin.url": "it removes a remote's url the repository had at launch",
        "core.hookspath": "core.hookspath chooses the hooks git runs"}
    names = grouped(git_reads(scratch, result) or [])
    assert names["core.hookspath"] == ["/home/me/hooks"] and names["alias.lg"] == ["log --oneline"]
    assert names["remote.origin.url"] == ["https://example.com/r.git"]
    assert "remote.origin.fetch" not in names


def test_changes_orders_new_then_old_and_skips_equal_variables() -> None:
    old = rc.parse("[a]\nx = 1\ny = 2\nz = 3\n")
    new = rc.parse("[a]\nw = 0\ny = 2\nx = 1\nx = 1\n")
    assert rc.changes(old, new) == (
        Change("a.w", "a", None, "w", (), ("0",)),
        Change("a.x", "a", None, "x", ("1",), ("1", "1")),
        Change("a.z", "a", None, "z", ("3",), ()),
    )
    assert rc.changes(new, new) == ()
    mixed = rc.changes(rc.parse("[submodule \"o\"]\nurl = ext::sh\n"), rc.parse("[x]\n"))
    assert gp.split(mixed) == (mixed, ())  # removing a refused value of an allowed name is fine
    one = rc.changes((), rc.parse("[remote \"o\"]\nurl = https://a.example/r\nurl = ext::sh\n"))
    assert gp.split(one)[1][0][1].endswith("ext:: and fd:: URLs run a command or use open "
                                           "descriptors")
