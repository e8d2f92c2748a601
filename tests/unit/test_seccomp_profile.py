"""deploy/seccomp/make_profile.py: the engine's default plus the sandbox's calls, nothing
else widened; bad input refused with a reason. The real Docker default runs in
tests/image/test_docker_seccomp.py."""

from __future__ import annotations

import importlib.util
import io
import json
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "seccomp" / "make_profile.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_profile", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mp = _load()


def _engine_like() -> dict[str, Any]:
    """A profile of the shape engines ship: deny by default, rules with conditions."""
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
        "syscalls": [
            {"names": ["read", "write", "setns"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 2114060288, "op": "SCMP_CMP_MASKED_EQ"}],
             "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
            {"names": ["unshare", "mount", "umount2", "mount_setattr", "clone"],
             "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38,
             "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
        ],
    }


def test_only_the_missing_calls_are_added_and_the_rest_is_kept() -> None:
    default = _engine_like()
    before = json.dumps(default, sort_keys=True)
    made = mp.extend(default)
    assert json.dumps(default, sort_keys=True) == before  # the input is not changed
    assert made["syscalls"][:-1] == default["syscalls"]
    assert {k: v for k, v in made.items() if k != "syscalls"} == \
        {k: v for k, v in default.items() if k != "syscalls"}
    added = made["syscalls"][-1]
    # setns is allowed to all already; clone3 keeps the engine's ENOSYS (C libraries fall
    # back to clone), and no other call is touched.
    assert added["names"] == ["unshare", "clone", "mount", "umount2", "pivot_root",
                              "mount_setattr"]
    assert added["action"] == "SCMP_ACT_ALLOW"
    assert not added.get("args") and not added.get("includes") and not added.get("excludes")
    assert added["comment"].startswith("claude-sandbox:")


def test_nothing_is_added_where_the_default_allows_it_all() -> None:
    default = _engine_like()
    default["syscalls"].append({"names": list(mp.SANDBOX_CALLS), "action": "SCMP_ACT_ALLOW"})
    assert mp.extend(default) == default


@pytest.mark.parametrize("document, why", [
    ([], "not a JSON object"),
    ({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}, "defaultAction is 'SCMP_ACT_ALLOW'"),
    ({"defaultAction": "SCMP_ACT_ERRNO"}, "`syscalls` is not a list"),
    ({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"action": "SCMP_ACT_ALLOW"}]},
     "`syscalls` is not a list"),
    ({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": [{}]}]},
     "`syscalls` is not a list"),
])
def test_what_is_not_an_engine_default_is_refused(document: object, why: str) -> None:
    with pytest.raises(mp.ProfileError, match=why):
        mp.extend(document)


def test_a_profile_it_made_is_not_extended_twice() -> None:
    with pytest.raises(mp.ProfileError, match="already has the claude-sandbox rule"):
        mp.extend(mp.extend(_engine_like()))


def test_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "default.json"
    source.write_text(json.dumps(_engine_like()))
    assert mp.main([str(source)]) == 0
    assert json.loads(capsys.readouterr().out) == mp.extend(_engine_like())
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(_engine_like())))
    assert mp.main(["-"]) == 0
    assert json.loads(capsys.readouterr().out) == mp.extend(_engine_like())
    assert mp.main([str(tmp_path / "absent.json")]) == 66
    assert "cannot read" in capsys.readouterr().err
    source.write_text("{ not json")
    assert mp.main([str(source)]) == 65
    assert str(source) in capsys.readouterr().err
    assert mp.main([]) == 64
    assert mp.main(["--help"]) == 0
    assert "seccomp" in capsys.readouterr().err


def _random_json(rng: random.Random, depth: int = 0) -> object:
    kinds = ["null", "int", "str", "list", "dict"] if depth < 4 else ["null", "int", "str"]
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "int":
        return rng.randint(-3, 3)
    if kind == "str":
        return rng.choice(["SCMP_ACT_ERRNO", "SCMP_ACT_ALLOW", "names", "unshare", "",
                           "claude-sandbox: x"])
    if kind == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["defaultAction", "syscalls", "names", "action", "args", "includes", "comment"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_fuzzed_documents_give_a_profile_or_a_reason() -> None:
    rng = random.Random(26)
    for _ in range(20000):
        document = _random_json(rng)
        try:
            made = mp.extend(document)
        except mp.ProfileError:
            continue
        assert made["syscalls"][: len(document["syscalls"])] == document["syscalls"]  # type: ignore[index]
