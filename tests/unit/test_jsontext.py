"""jsontext: json's C scanner without json.decoder, read as json.loads reads."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from claude_sandbox.core import jsontext


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-(2**70), 2**70)
    if kind == 2:
        return rng.uniform(-1e300, 1e300)
    if kind in (3, 4):
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0, 0x2FFFF)]))
                       for _ in range(rng.randrange(12)))
    if kind in (5, 6):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {str(_random_value(rng, 3)): _random_value(rng, depth + 1)
            for _ in range(rng.randrange(5))}


def test_values_read_what_json_reads() -> None:
    rng = random.Random(20261206)
    for _ in range(500):
        docs = [_random_value(rng) for _ in range(rng.randrange(1, 4))]
        texts = [json.dumps(d, ensure_ascii=rng.random() < 0.5,
                            indent=rng.choice([None, 1])) for d in docs]
        text = rng.choice(["", "\n", " \t"]).join(texts) if len(texts) == 1 else \
            "\n".join(texts)
        assert jsontext.values(text) == [json.loads(t) for t in texts]


@pytest.mark.parametrize("text", [
    "[1,", '{"a" 1}', "NaN", "[Infinity]", "[-Infinity]", "x", '["\x01"]', "[1] garbage",
    '{"a": 1,}', "[01]", '"\\x"', "\x0c[]",
])
def test_anything_but_json_values_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        jsontext.values(text)


def test_white_space_alone_is_no_value() -> None:
    assert jsontext.values(" \n\t ") == []


def test_it_imports_neither_json_nor_re() -> None:
    """What it is for: a launch that reads JSON without json.decoder's imports."""
    code = ("import sys; from claude_sandbox.core import jsontext; "
            "assert jsontext.values('[1, {\"a\": \"b\"}] {}') == [[1, {'a': 'b'}], {}]; "
            "print(sorted(m for m in ('json', 'json.decoder', 're', 'enum') "
            "if m in sys.modules))")
    package_parent = Path(jsontext.__file__).parents[2]
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         check=True, cwd=package_parent).stdout
    assert out.strip() == "[]"


def test_without_the_c_scanner_json_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "_json", None)  # an interpreter built without it
    assert jsontext.values('[1] {"a": null}') == [[1], {"a": None}]
    with pytest.raises(ValueError):
        jsontext.values("[1,")
