"""Suite-wide set-up: the operator's file lets the tests turn the jail off from the environment.

Most launch tests run with CLAUDE_SANDBOX_EGRESS_JAIL=0 for speed; the jail has
its own suites. The environment may only narrow the operator's file unless the
file says otherwise (ADR 0005), so for the length of the run the installed
/etc/claude-sandbox.conf gains `env-may-widen = egress-jail`, and gets its own
text back at the end. Tests of the refusal itself bind their own file over it
in a private mount namespace.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.netfixtures import (  # noqa: F401  (fixtures, for every suite)
    echo_hosts,
    no_leftovers_from_an_earlier_run,
    test_internet,
)

CONFIG = "/etc/claude-sandbox.conf"
WIDEN = "env-may-widen = egress-jail  # added by the test suite for its run\n"


@pytest.fixture(scope="session", autouse=True)
def jail_off_allowed_from_the_environment() -> Iterator[None]:
    if os.getuid() != 0 or not os.path.exists(CONFIG):
        yield
        return
    with open(CONFIG, encoding="utf-8") as handle:
        original = handle.read()
    if WIDEN not in original:
        with open(CONFIG, "a", encoding="utf-8") as handle:
            handle.write(("" if original.endswith("\n") or not original else "\n") + WIDEN)
    try:
        yield
    finally:
        with open(CONFIG, "w", encoding="utf-8") as handle:
            handle.write(original.replace(WIDEN, ""))
