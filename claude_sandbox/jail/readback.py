"""Reading the jail's routes back from `ip -json`, and comparing them with the plan
(routes.py says why; check 31)."""

from __future__ import annotations

from claude_sandbox.core import jsontext
from claude_sandbox.core.errors import SandboxError, jail_error
from claude_sandbox.jail import cidr
from claude_sandbox.jail.routes import (
    EXPECTED_RULES_V4,
    EXPECTED_RULES_V6,
    Address,
    NetFacts,
    Plan,
    Readback,
    Route,
    Rule,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# IPv6 is switched off in the jail; where that fails, only these may remain.
_V6_HARMLESS = (
    cidr.network("fe80::/10"),  # link-local: reaches only pasta's tap
    cidr.network("ff00::/8"),  # multicast, link scope in practice
    cidr.network("::1/128"),  # the namespace's own loopback
)


def _fail(what: str) -> SandboxError:
    return jail_error(f"unexpected route read-back ({what})")


def parse_json_stream(text: str) -> list[object]:
    """The JSON documents `ip -j -batch` prints one after another."""
    try:
        return jsontext.values(text)
    except (ValueError, RecursionError) as exc:
        raise _fail("output is not JSON") from exc


def _str(obj: dict[str, object], key: str, default: str | None) -> str | None:
    value = obj.get(key, default)
    if value is None or isinstance(value, str):
        return value
    raise _fail(f"{key} is not a string")


def _normalise_dst(dst: str, family: int) -> str:
    if dst == "default":
        return "0.0.0.0/0" if family == 4 else "::/0"
    try:
        net = cidr.network(dst)
    except ValueError as exc:
        raise _fail(f"bad destination {dst!r}") from exc
    if net[0] != family:
        raise _fail(f"IPv{net[0]} destination {dst!r} in the IPv{family} table")
    return cidr.text(net)


def _extra(attributes: Iterable[tuple[object, object]]) -> tuple[tuple[str, str], ...]:
    """The attributes not modelled, comparable: any unexpected one is a difference."""
    found = list(attributes)
    if not found:  # as in every read-back that matches: json stays unimported (jsontext.py)
        return ()
    import json

    return tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in found))


_ROUTE_KEYS = frozenset(
    {"table", "type", "dst", "gateway", "dev", "prefsrc", "scope", "protocol", "metric", "flags"}
)


def parse_route(obj: object, family: int = 4) -> Route:
    """One element of `ip -j -4|-6 route show table all`, normalised.

    The family comes from the command, never from the text: "default" or a
    blackhole says nothing about which family it belongs to.
    """
    if not isinstance(obj, dict):
        raise _fail("route is not an object")
    dst = _str(obj, "dst", None)
    if dst is None:
        raise _fail("route without destination")
    flags = obj.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise _fail("flags are not a list of strings")
    metric = obj.get("metric", 0)
    if not isinstance(metric, int) or isinstance(metric, bool):
        raise _fail("metric is not an integer")
    return Route(
        table=_str(obj, "table", "main") or "main",
        type=_str(obj, "type", "unicast") or "unicast",
        dst=_normalise_dst(dst, family),
        gateway=_str(obj, "gateway", None),
        dev=_str(obj, "dev", None),
        prefsrc=_str(obj, "prefsrc", None),
        scope=_str(obj, "scope", "global") or "global",
        protocol=_str(obj, "protocol", "boot") or "boot",
        metric=metric,
        flags=tuple(sorted(flags)),
        extra=_extra((k, v) for k, v in obj.items() if k not in _ROUTE_KEYS),
    )


def parse_rule(obj: object) -> Rule:
    if not isinstance(obj, dict):
        raise _fail("rule is not an object")
    priority = obj.get("priority")
    table = obj.get("table")
    if not isinstance(priority, int) or isinstance(priority, bool) or not isinstance(table, str):
        raise _fail("rule without priority or table")
    # "src": "all" is the only selector a fresh namespace's rules carry.
    return Rule(priority, table, _extra(
        (k, v) for k, v in obj.items()
        if k not in ("priority", "table") and not (k == "src" and v == "all")
    ))


def _list(doc: object, what: str) -> list[object]:
    if not isinstance(doc, list):
        raise _fail(f"{what} is not a list")
    return doc


def _family_docs(text: str, family: int) -> tuple[tuple[Route, ...], tuple[Rule, ...]]:
    docs = parse_json_stream(text)
    if len(docs) != 2:
        raise _fail(f"IPv{family}: wrong number of documents")
    return (
        tuple(parse_route(r, family) for r in _list(docs[0], "routes")),
        tuple(parse_rule(r) for r in _list(docs[1], "rules")),
    )


def parse_readback(v4: str, v6: str) -> Readback:
    """Parse `ip -j -4` and `ip -j -6` output of (route show table all, rule show)."""
    return Readback(*_family_docs(v4, 4), *_family_docs(v6, 6))


def compare(plan: Plan, failed: Iterable[int], readback: Readback) -> list[str]:
    """Every difference between the plan and the read-back; empty means locked.

    `failed` holds indexes (into plan.routes) of optional rows `ip` rejected;
    they must then be absent, not half-present.
    """
    skip = set(failed)
    want = [r.expect for i, r in enumerate(plan.routes) if i not in skip] + list(plan.local)
    problems: list[str] = []
    have_v4 = list(readback.routes_v4)
    for r in readback.routes_v6:
        net = cidr.network(r.dst)
        if r.gateway is not None or not any(cidr.subnet_of(net, h) for h in _V6_HARMLESS):
            problems.append(f"IPv6 route {r.dst} ({r.type}, table {r.table})")
    for r in sorted(set(have_v4) - set(want), key=repr):
        problems.append(f"unplanned route {r.type} {r.dst} table {r.table}: {r}")
    for r in sorted(set(want) - set(have_v4), key=repr):
        problems.append(f"missing route {r.type} {r.dst} table {r.table}")
    if len(have_v4) != len(set(have_v4)):
        problems.append("duplicate routes")
    for got, expected, family in (
        (readback.rules_v4, EXPECTED_RULES_V4, "IPv4"),
        (readback.rules_v6, EXPECTED_RULES_V6, "IPv6"),
    ):
        if tuple((r.priority, r.table) for r in got) != expected or any(r.extra for r in got):
            problems.append(f"{family} policy rules differ from a fresh namespace's: {got}")
    return problems


def failed_lines(stderr: str) -> set[int]:
    """Batch line numbers `ip -force -batch -` reported as failed (1-based)."""
    out: set[int] = set()
    for line in stderr.splitlines():
        if line.startswith("Command failed -:"):
            tail = line.removeprefix("Command failed -:").strip()
            if tail.isdigit():
                out.add(int(tail))
    return out


def parse_facts(addr_doc: object, route_doc: object) -> NetFacts:
    """NetFacts from `ip -j -4 addr show` and `ip -j -4 route show table main`."""
    addresses: list[Address] = []
    for link in _list(addr_doc, "addresses"):
        if not isinstance(link, dict):
            raise _fail("link is not an object")
        dev = link.get("ifname")
        flags = link.get("flags", [])
        if not isinstance(dev, str) or not isinstance(flags, list):
            raise _fail("link without name")
        for info in link.get("addr_info", []) or []:
            if not isinstance(info, dict) or info.get("family") != "inet":
                continue
            local, plen = info.get("local"), info.get("prefixlen")
            if not isinstance(local, str) or not isinstance(plen, int):
                raise _fail("address without prefix")
            addresses.append(Address(dev, local, plen, "LOOPBACK" in flags))
    gateway = iface = None
    copied: list[str] = []
    for r in (parse_route(o, 4) for o in _list(route_doc, "routes")):
        if r.dst == "0.0.0.0/0" and r.gateway and r.dev:
            gateway, iface = r.gateway, r.dev
        else:
            copied.append(r.dst)
    if gateway is None or iface is None:
        raise jail_error("pasta configured no IPv4 default route")
    own = [a for a in addresses if a.dev == iface]
    if not own:
        raise jail_error(f"pasta's interface {iface} has no IPv4 address")
    return NetFacts(iface, own[0].address, gateway, tuple(addresses), tuple(copied))
