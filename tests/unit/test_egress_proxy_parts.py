"""The egress proxy's pure parts: its policy on the control socket, the launch's allow-list,
address classes, the packet filter's read-back, and its own DNS queries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from claude_sandbox.core.errors import SandboxError
from claude_sandbox.jail import (
    dnsmsg,
    egressdns,
    egresspolicy,
    egressrecord,
    egressstart,
    egressupstream,
    netfilter,
)
from claude_sandbox.jail.egresspolicy import Policy


def test_a_policy_survives_the_control_socket() -> None:
    rules = egresspolicy.rules_for("codex", ("db.example.com:5432", "*.example.org"))
    policy = Policy("allow-list", "codex", rules, ("10.1.2.3",), ("192.0.2.2", "192.0.2.1"),
                    "/tmp/hosts")
    assert Policy.from_fields(policy.fields()) == policy
    assert Policy.from_fields(Policy("open", "pi", ()).fields()) == Policy("open", "pi", ())
    with pytest.raises(ValueError):
        Policy.from_fields(["closed", "pi", "0", "", "", "/etc/hosts"])
    with pytest.raises((ValueError, IndexError)):
        Policy.from_fields(policy.fields()[:-2])


@given(st.lists(st.text(max_size=20), max_size=12))
def test_no_field_list_is_a_policy_by_accident(fields: list[str]) -> None:
    try:
        Policy.from_fields(fields)
    except (ValueError, IndexError):
        pass


def test_the_allow_list_adds_to_the_defaults_until_a_preset_is_named() -> None:
    added = egresspolicy.rules_for("claude", ("example.com",))
    patterns = {rule.pattern for rule in added}
    assert {"api.anthropic.com", "pypi.org", "github.com", "example.com"} <= patterns
    narrowed = egresspolicy.rules_for("claude", ("@claude", "example.com"))
    assert {rule.pattern for rule in narrowed} == {
        *egresspolicy.PRESETS["claude"], "example.com"}
    assert egresspolicy.rules_for("shell-only-agent", ()) == egresspolicy.rules_for("x", ())
    policy = Policy("allow-list", "claude", narrowed)
    assert policy.names_allowed("example.com") and not policy.names_allowed("pypi.org")
    assert Policy("open", "claude", ()).names_allowed("anything.example")


@pytest.mark.parametrize("address, refused", [
    ("10.0.0.1", "private"), ("172.16.5.5", "private"), ("192.168.1.1", "private"),
    ("100.64.0.1", "carrier-grade"), ("169.254.169.254", "metadata"),
    ("168.63.129.16", "WireServer"), ("127.0.0.53", "loopback"), ("0.1.2.3", "this network"),
    ("224.0.0.251", "multicast"), ("239.255.255.250", "multicast"),
    ("255.255.255.255", "reserved"), ("198.18.0.1", "benchmarking"),
    ("192.0.0.9", "IETF"), ("192.88.99.1", "6to4"),
    ("192.0.2.2", "of the host"), ("203.0.113.200", "of the host"),  # a host range
    ("198.51.100.7", None), ("203.0.113.80", None), ("151.101.0.223", None),
    ("10.1.2.3", None),  # allow-ip
])
def test_address_classes_the_proxy_never_connects_to(address: str, refused: str | None) -> None:
    policy = Policy("open", "claude", (), ("10.1.2.3",), ("192.0.2.2", "203.0.113.128/25"))
    why = egressupstream.address_refusal(policy, address)
    assert (why is None) if refused is None else (why is not None and refused in why), why


def test_the_hosts_own_addresses_are_asked_of_its_routing_table() -> None:
    """The real table of this namespace, read over netlink as the proxy reads it."""
    import socket

    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
    host = egressupstream.HostRoutes(sock.detach())
    assert host.kind("127.0.0.1") == "local"
    assert host.kind("127.9.9.9") == "local"  # a range: the whole of 127/8 is local
    # This namespace's own address on its way out, asked as an address nobody lists.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # no packet: a UDP connect only routes
            own = probe.getsockname()[0]
        except OSError:
            own = ""
    if own and not own.startswith("127."):
        assert host.kind(own) == "local", own
    policy = Policy("open", "claude", ())
    why = egressupstream.address_refusal(policy, "151.101.0.223", host)
    assert why is None or "cannot be asked" not in why, why
    if own and not own.startswith("127."):  # by its class, or as the host's own now
        assert egressupstream.address_refusal(policy, own, host) is not None
    host.sock.close()  # a host that no longer answers: refused, never let through
    why = egressupstream.address_refusal(policy, "151.101.0.223", host)
    assert why is not None and "cannot be asked" in why, why


def _saved(filter_rules: tuple[str, ...] = netfilter.FILTER,
           nat_rules: tuple[str, ...] = netfilter.NAT) -> str:
    return "\n".join([
        "*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]",
        *filter_rules, "COMMIT", "*nat", ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]",
        ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]", *nat_rules, "COMMIT", ""])


def test_the_filter_read_back_must_match_exactly() -> None:
    netfilter.check(["ok", "0", _saved(), ""])
    for tampered in (
        _saved(filter_rules=netfilter.FILTER[:-1]),  # the last refusal gone
        _saved(nat_rules=netfilter.NAT[1:]),  # the mark no longer skips
        _saved(filter_rules=("-A OUTPUT -j ACCEPT", *netfilter.FILTER)),
        _saved() + "*mangle\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n",
        _saved().replace(":OUTPUT ACCEPT [0:0]", ":OUTPUT DROP [0:0]", 1),
    ):
        with pytest.raises(SandboxError, match="read back differs"):
            netfilter.check(["ok", "0", tampered, ""])
    with pytest.raises(SandboxError, match=r"line 3 failed.*nat table.*doctor"):
        netfilter.check(["ok", "2", "", "iptables-restore: line 3 failed"])
    with pytest.raises(SandboxError, match="install the iptables package"):
        netfilter.check(["err", "cannot run /usr/sbin/iptables-restore: No such file"])


def test_explain_shows_the_policy_and_where_each_name_came_from() -> None:
    from claude_sandbox.launch.planner import render

    lines = render.egress_lines("allow-list", egresspolicy.rules_for("pi", ("db.example:5432",)))
    assert lines[0].startswith("# egress proxy: egress-policy = allow-list")
    assert any(line.split() == ["api.openai.com", "80,", "443", "@pi"] for line in lines)
    assert any(line.split() == ["db.example", "5432", "allow-domain"] for line in lines)
    assert "every public name" in render.egress_lines("open", ())[0]


def test_the_proxys_own_query_is_one_question_and_nothing_else() -> None:
    query = egressdns.build_query(0x1234, "registry.npmjs.org", dnsmsg.A)
    parsed = dnsmsg.parse_query(query)
    assert (parsed.ident, parsed.name, parsed.qtype, parsed.recursion) == (
        0x1234, "registry.npmjs.org", dnsmsg.A, True)
    assert query[6:12] == bytes(6)  # no answers, no authority, no additional (no options)


def test_hosts_files_give_ipv4_names_in_order(tmp_path: object) -> None:
    import pathlib

    hosts = pathlib.Path(str(tmp_path)) / "hosts"
    hosts.write_text("127.0.0.1 localhost\n::1 ip6-localhost\n# c\n198.51.100.10 a.test B.test.\n"
                     "198.51.100.11 a.test\nnot-an-address x.test\n010.1.1.1 y.test\n")
    assert egressdns.parse_hosts(egressstart.hosts_text(str(hosts))) == {
        "localhost": ["127.0.0.1"], "a.test": ["198.51.100.10", "198.51.100.11"],
        "b.test": ["198.51.100.10"]}  # 010.1.1.1 is not read as 8.1.1.1: not at all
    names = egressdns.Names(egressdns.parse_hosts(egressstart.hosts_text(str(hosts))))
    assert names.name_of("198.51.100.11") == "a.test" and names.lookup("a.test")[0].endswith("10")


def test_a_hosts_file_that_is_no_regular_file_is_never_waited_on(tmp_path: object) -> None:
    """It is read before the proxy says it serves, so the launch would wait for it: a FIFO
    gives no names and no wait, a directory none either, and a link is followed."""
    import os
    import pathlib

    where = pathlib.Path(str(tmp_path))
    os.mkfifo(where / "fifo")
    (where / "real").write_text("198.51.100.10 a.test\n")
    (where / "link").symlink_to(where / "real")
    assert egressstart.hosts_text(str(where / "fifo")) == ""  # no writer: would block
    assert egressstart.hosts_text(str(where)) == ""
    assert egressstart.hosts_text(str(where / "missing")) == ""
    assert egressstart.hosts_text(str(where / "link")) == "198.51.100.10 a.test\n"


def test_the_record_summary_and_learned_lines() -> None:
    entries = [
        {"kind": "tls", "name": "evil.example", "port": 443, "verdict": "refused"},
        {"kind": "dns", "name": "x.evil.example", "port": 53, "verdict": "refused"},
        {"kind": "tcp", "name": "db.example", "port": 5432, "verdict": "allowed"},
        {"kind": "http", "name": None, "address": "198.51.100.7", "port": 80,
         "verdict": "refused"},
    ]
    line = egressrecord.summary(entries)
    assert line is not None and line.startswith("egress: 3 connections or queries refused")
    assert "evil.example:443, x.evil.example, 198.51.100.7:80" in line
    assert egressrecord.summary(entries[2:3]) is None
    learning = [
        {"kind": "tls", "name": "registry.npmjs.org", "port": 443, "verdict": "allowed"},
        {"kind": "tcp", "name": "db.example", "port": 5432, "verdict": "allowed"},
        # A name the agent only claimed for another address is never offered.
        {"kind": "tls", "name": "pypi.org", "port": 443, "address": "203.0.113.9",
         "claimed": True, "verdict": "allowed"},
        {"kind": "tcp", "name": None, "port": 5432, "address": "198.51.100.7",
         "verdict": "allowed"},
        {"kind": "http", "name": "bad\n  allow-domain = *.com", "port": 80,
         "verdict": "allowed"},
        {"kind": "dns", "name": "x.example", "port": 53, "verdict": "allowed"},
    ]
    assert egressrecord.learned(learning) == [
        "allow-domain = registry.npmjs.org", "allow-domain = db.example:5432",
        "allow-ip = 203.0.113.9", "allow-ip = 198.51.100.7"]


def test_what_the_session_end_prints_cannot_drive_the_terminal() -> None:
    hostile = "\rclaude-sandbox: egress: nothing refused\x1b[8m.com"
    line = egressrecord.summary([{"kind": "dns", "name": hostile, "port": 53,
                                  "verdict": "refused"}])
    assert line is not None and "\x1b" not in line and "\r" not in line
    assert "\\x1b[8m" in line and "\\r" in line
    cut = egressrecord.summary([{"kind": "cut", "why": "size"}])
    assert cut is not None and "size limit" in cut


def test_a_name_with_a_dot_inside_a_label_is_not_an_allowed_name() -> None:
    policy = Policy("allow-list", "claude", egresspolicy.parse_rule("*.githubusercontent.com"))
    assert policy.names_allowed("raw.githubusercontent.com")
    assert not policy.names_allowed("..githubusercontent.com")
    assert not policy.names_allowed("a b.githubusercontent.com")


def test_the_containers_own_names_and_aaaa_are_answered_here_never_upstream() -> None:
    """A name of the container's hosts file is answered from it, and AAAA (IPv6 is off
    inside) with no data: neither waits on an upstream that may be slow or failing."""
    names = egressdns.Names({"a.test": ["198.51.100.10", "198.51.100.11"]})

    def refuse_upstream(*_: object) -> None:
        raise AssertionError("asked upstream")

    names.forward = refuse_upstream  # type: ignore[method-assign]
    policy = Policy("allow-list", "claude", egresspolicy.parse_rule("a.test")
                    + egresspolicy.parse_rule("b.test"))
    written: list[dict[str, object]] = []
    a = egressdns.answer(names, policy, written.append,
                         egressdns.build_query(7, "a.test", dnsmsg.A), tcp=False)
    assert a is not None and a[:2] == (7).to_bytes(2, "big") and a[3] & 15 == 0
    assert [raw for _, raw in dnsmsg.answer_addresses(a)] == [
        bytes([198, 51, 100, 10]), bytes([198, 51, 100, 11])]
    for name in ("a.test", "b.test"):
        aaaa = egressdns.answer(names, policy, written.append,
                                egressdns.build_query(8, name, dnsmsg.AAAA), tcp=False)
        assert aaaa is not None and aaaa[3] & 15 == 0 and aaaa[6:8] == b"\0\0"
    assert len(written) == 3  # each recorded all the same
