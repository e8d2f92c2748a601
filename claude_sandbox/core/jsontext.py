"""JSON read on the launch path without the `json` package.

`json.decoder` imports `re`, and with it `enum`: 4-5 ms of an interpreter's CPU, which a
launch paid at the session's end, reading the egress record (ADR 0004).
`_json.make_scanner` is the C scanner json.loads itself runs; it reads only the
settings below from its decoder. An interpreter built without `_json` gets json's own
decoder.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Scan = Callable[[str, int], tuple[object, int]]


class _Strict:
    """What the C scanner reads of a decoder: standard JSON, nothing hooked."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> object:
        raise ValueError(f"{name} is not JSON")  # NaN and Infinity, which json.loads takes


def scanner() -> Scan:
    """One JSON value at an index: (the value, the index after it). Raises ValueError
    (or StopIteration, where no value starts at the index) on anything else."""
    try:
        from _json import make_scanner
    except ImportError:
        import json

        return json.JSONDecoder().raw_decode
    scan: Scan = make_scanner(_Strict())  # type: ignore[arg-type]  # typeshed names its own class
    return scan


def values(text: str, scan: Scan | None = None) -> list[object]:
    """Every JSON value in `text`, one after another, white space around them; ValueError
    when anything else is there."""
    scan = scan or scanner()
    found: list[object] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text):
            return found
        try:
            value, pos = scan(text, pos)
        except StopIteration:  # the C scanner's answer where no value starts
            raise ValueError(f"no JSON value at {pos}") from None
        found.append(value)
