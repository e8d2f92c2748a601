"""Locking the jail's routes: programmed through the holder, read back, compared.

The agent never runs before this returns: `Jail.run` locks the routes and the
DNS filter before it asks the holder to become the session (check 31;
docs/explanation/egress-jail.md).
"""

from __future__ import annotations

from claude_sandbox.core import paths
from claude_sandbox.core.errors import jail_error
from claude_sandbox.jail import readback, routes
from claude_sandbox.jail.spec import JailSpec
from claude_sandbox.jail.upstreamproxy import Upstream

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    # A request to the holder and its reply (holder.py's frames).
    Ask = Callable[[list[str]], list[str]]
# Every table and every policy rule; run once per family, since the family of
# a "default" or blackhole route is not in `ip`'s text.
READBACK = "route show table all\nrule show\n"


def _ip(ask: Ask, args: list[str], stdin_text: str = "") -> tuple[int, str, str]:
    reply = ask(["run", stdin_text, paths.tool("ip"), *args])
    if reply[0] != "ok":
        raise jail_error(reply[1])
    return int(reply[1]), reply[2], reply[3]

def lock_routes(ask: Ask, trace: Callable[[str], None], warn: Callable[[str], None],
                settings: JailSpec) -> routes.Plan:
    """Read the namespace, programme the plan's routes and read them back in the same
    `ip` run; refuse the launch where what the kernel holds differs (check 31)."""
    rc, out, err = _ip(ask, ["-j", "-4", "-batch", "-"], "addr show\nroute show table main\n")
    docs = readback.parse_json_stream(out)
    if rc != 0 or len(docs) != 2:
        raise jail_error(f"cannot read the namespace: {err.strip()}")
    facts = readback.parse_facts(docs[0], docs[1])
    # The upstream proxy's one address leaves like an allow-ip one; only the egress
    # proxy's marked sockets reach it (netfilter.py, upstreamproxy.py).
    chained = Upstream.decode(settings.upstream)
    plan = routes.build_plan(facts, paths.DNS_FORWARDER,
                             (*settings.allow_ip, *([chained.address] if chained else [])),
                             settings.host)
    trace("namespace read, plan built")
    v6 = ask(["ipv6off"])
    if v6[0] == "ok" and v6[1]:
        # Not fatal by itself: the read-back proves what IPv6 still holds.
        trace(f"IPv6 not fully switched off ({v6[1]})")
    # Programme and first read-back in one `ip` process: no window in
    # which a route could change unseen between the two.
    script = plan.batch() + READBACK
    _, out4, err = _ip(ask, ["-4", "-force", "-j", "-batch", "-"], script)
    _, out6, _ = _ip(ask, ["-6", "-j", "-batch", "-"], READBACK)
    failed = _failed_rows(warn, plan, err)
    seen = readback.parse_readback(out4, out6)
    problems = readback.compare(plan, failed, seen)
    if problems:
        raise jail_error("the routes read back differ from the plan; refusing to launch: "
                         + "; ".join(problems[:5]))
    trace("routes programmed and verified")
    return plan

def _failed_rows(warn: Callable[[str], None], plan: routes.Plan, err: str) -> set[int]:
    """Map the batch lines `err` reports failed to plan rows; refuse when a required one failed.

    Line 1 is the flush, lines 2.. are plan.routes, then the read-back commands.
    """
    failed: set[int] = set()
    last_row = len(plan.routes) + 1
    for line in sorted(readback.failed_lines(err)):
        if line == 1 or line > last_row:
            raise jail_error(f"route programming failed ({err.strip()})")
        row = plan.routes[line - 2]
        if row.required:
            raise jail_error(f"cannot program `ip {row.command}` ({err.strip()})")
        failed.add(line - 2)
        warn(f"egress jail: could not add `ip {row.command}` ({row.why}); skipped")
    return failed
