"""core/paths.py: the one place names and tools are found."""

from __future__ import annotations


def test_names_are_hashed_as_hashlib_would() -> None:
    """paths.sha256_hex takes the interpreter's own SHA-256 (no OpenSSL load): the same
    digests hashlib gives, so stores made before keep their names."""
    import hashlib

    from claude_sandbox.core import paths as core_paths

    for data in (b"", b"/workspaces/project", "/w/\udcff".encode("utf-8", "surrogateescape"),
                 b"x" * 100_000):
        assert core_paths.sha256_hex(data) == hashlib.sha256(data).hexdigest()
