"""The packet filter's x_tables encoding (jail/iptables.py): its layout, and the read-back
comparison that refuses any byte the kernel holds otherwise. Whether the kernel reads
the encoding as the planned rules is proved against iptables' own reader in
tests/jail/test_jail.py."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core.errors import SandboxError
from claude_sandbox.jail import iptables, netfilter

NAT, FILTER = ((info, entries) for _, info, entries in netfilter.tables())


def _entries(blob: bytes) -> list[bytes]:
    found, at = [], 0
    while at < len(blob):
        following = struct.unpack_from("=H", blob, at + 90)[0]
        found.append(blob[at:at + following])
        at += following
    return found


def test_each_table_holds_its_rules_a_policy_per_chain_and_its_end() -> None:
    for (info, entries), chains, rules in ((NAT, 4, netfilter.NAT),
                                           (FILTER, 3, netfilter.FILTER)):
        count, size = struct.unpack_from("=II", info, 4 + 8 * iptables.HOOKS)
        assert size == len(entries)
        assert count == len(_entries(entries)) == len(rules) + chains + 1
        for entry in _entries(entries):
            assert len(entry) % 8 == 0  # every entry 8-aligned, as the kernel requires
            target_offset = struct.unpack_from("=H", entry, 88)[0]
            assert iptables.ENTRY <= target_offset < len(entry)


def test_the_hooks_name_the_output_chain_and_each_policy() -> None:
    info, entries = FILTER
    valid, *hooks = struct.unpack_from(f"=I{2 * iptables.HOOKS}I", info)
    first, policy = hooks[:iptables.HOOKS], hooks[iptables.HOOKS:]
    assert valid == 0b01110  # INPUT, FORWARD, OUTPUT
    assert first[0] == first[4] == policy[0] == policy[4] == 0xFFFFFFFF
    offsets = [0]
    for entry in _entries(entries):
        offsets.append(offsets[-1] + len(entry))
    # INPUT's and FORWARD's policies, then OUTPUT's eight rules and its policy.
    assert first[1] == policy[1] == offsets[0] and first[2] == policy[2] == offsets[1]
    assert first[3] == offsets[2] and policy[3] == offsets[2 + len(netfilter.FILTER)]


def test_the_replace_request_carries_the_old_counters_and_no_unknown_hook() -> None:
    info, entries = NAT
    request = iptables.replace("nat", info, entries, 5, 0x1234)
    name, valid, count, size = struct.unpack_from("=32sIII", request)
    assert name.rstrip(b"\0") == b"nat" and valid == 0b11011
    assert (count, size) == (len(netfilter.NAT) + 5, len(entries))
    hooks = struct.unpack_from(f"={2 * iptables.HOOKS}I", request, 44)
    assert 0xFFFFFFFF not in hooks
    assert struct.unpack_from("=IQ", request, 84) == (5, 0x1234)
    assert request[96:] == entries


def test_a_read_back_differs_by_nothing_but_counters_and_comefrom() -> None:
    info, entries = FILTER
    kernel = bytearray(entries)
    for entry_at in (0, len(_entries(entries)[0])):
        kernel[entry_at + 92:entry_at + 96] = b"\x0e\0\0\0"  # the hooks that reach it
        kernel[entry_at + 96:entry_at + 112] = bytes(range(16))  # packets and bytes
    assert iptables.differences(info, entries, info, bytes(kernel)) == ""


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_other_byte_changed_is_a_difference(data: st.DataObject) -> None:
    info, entries = FILTER
    at = data.draw(st.integers(0, len(entries) - 1))
    offset = at
    for entry in _entries(entries):
        if offset < len(entry):
            break
        offset -= len(entry)
    if 92 <= offset < 112:
        return  # comefrom and the counters: the kernel's own
    changed = bytearray(entries)
    changed[at] ^= data.draw(st.integers(1, 255))
    assert iptables.differences(info, entries, info, bytes(changed)) != ""


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=1200), st.binary(max_size=120))
def test_any_read_back_is_compared_without_error(entries: bytes, info: bytes) -> None:
    ours_info, ours = NAT
    assert iptables.differences(ours_info, ours, info, entries) != "" or (
        info == ours_info and len(entries) == len(ours))


def test_an_answer_of_other_tables_refuses_the_launch() -> None:
    nat_info, nat = NAT
    filter_info, kept = FILTER
    good = ["written", nat_info.hex(), nat.hex(), filter_info.hex(), kept.hex()]
    assert netfilter.answer(good) == -1
    short = iptables.table((1, 2, 3), iptables.filter_rules(netfilter.MARK)[:-1])
    for reply in (["written", nat_info.hex(), nat.hex(), short[0].hex(), short[1].hex()],
                  ["written", nat_info.hex(), nat.hex()],
                  ["written", "zz", nat.hex(), filter_info.hex(), kept.hex()]):
        with pytest.raises(SandboxError, match="packet filter"):
            netfilter.answer(reply)
