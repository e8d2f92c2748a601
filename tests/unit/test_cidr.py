"""jail/cidr.py against ipaddress, which it stands in for on the launch path."""

from __future__ import annotations

import ipaddress
import random
import sys

import pytest

from claude_sandbox.jail import cidr


def _random_value(rng: random.Random, version: int) -> int:
    if version == 4:
        return rng.choice([rng.getrandbits(32), 0, 0xFFFFFFFF, 0x7F000001])
    kind = rng.random()
    if kind < 0.3:
        return rng.getrandbits(128)
    if kind < 0.8:  # runs of zero groups, where the text is compressed
        groups = [rng.choice([0, 0, 0, rng.getrandbits(16)]) for _ in range(8)]
        return int.from_bytes(b"".join(g.to_bytes(2, "big") for g in groups), "big")
    # IPv4-mapped and -compatible forms: inet_ntop writes a dotted tail; ipaddress not
    return rng.choice([0, 1, 0xFFFF << 32 | rng.getrandbits(32), rng.getrandbits(32)])


def _dotted_there(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """Whether this interpreter's ipaddress writes `net` with a dotted IPv4 tail (3.13+)."""
    return sys.version_info >= (3, 13) and bool(getattr(net.network_address, "ipv4_mapped", None))


def test_networks_read_and_written_as_ipaddress_does() -> None:
    rng = random.Random(7)
    for _ in range(20000):
        version = rng.choice([4, 6])
        value = _random_value(rng, version)
        host = ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)
        length = rng.randint(0, 32 if version == 4 else 128)
        for text in (f"{host}/{length}", str(host)):
            expected = ipaddress.ip_network(text, strict=False)
            if _dotted_there(expected):
                continue  # written with a dotted tail there (cidr.py says so)
            assert cidr.normal(text) == str(expected), text
            net = cidr.network(text)
            assert cidr.broadcast(net) == str(expected.broadcast_address), text


def test_subnet_of_as_ipaddress() -> None:
    rng = random.Random(8)
    for _ in range(20000):
        version = rng.choice([4, 6])
        bits = 32 if version == 4 else 128
        base = _random_value(rng, version)
        outer_len, inner_len = rng.randint(0, bits), rng.randint(0, bits)
        # Often inside: the inner network shares the outer one's leading bits.
        inner_value = base ^ (rng.getrandbits(bits) >> rng.randint(0, bits))
        texts = []
        for value, length in ((inner_value, inner_len), (base, outer_len)):
            address = (ipaddress.IPv4Address(value) if version == 4
                       else ipaddress.IPv6Address(value))
            texts.append(f"{address}/{length}")
        inner, outer = (ipaddress.ip_network(t, strict=False) for t in texts)
        assert cidr.subnet_of(cidr.network(texts[0]), cidr.network(texts[1])) == \
            inner.subnet_of(outer), texts  # type: ignore[arg-type]
    assert not cidr.subnet_of(cidr.network("::/0"), cidr.network("0.0.0.0/0"))


@pytest.mark.parametrize("text", [
    "", "/", "1.2.3", "1.2.3.4.5", "1.2.3.256", "01.2.3.4", "1.2.3.4/33", "1.2.3.4/-1",
    "1.2.3.4/", "1.2.3.4/ 8", "1.2.3.4/8/8", "1.2.3.4/255.0.0.0", "1.2.3.4/٣", " 1.2.3.4",
    "::/129", "::1::", "fe80::1%eth0", "1.2.3.4\0", "g::", "12345::", "1.2.3.4/0008",
])
def test_refuses_what_is_not_a_plain_network(text: str) -> None:
    with pytest.raises(ValueError):
        cidr.network(text)


def _near_miss(rng: random.Random) -> str:
    """A valid network's text with one character changed, added or dropped, or random
    text from the characters of addresses."""
    alphabet = "0123456789abcdefABCDEF.:/%x "
    if rng.random() < 0.2:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
    version = rng.choice([4, 6])
    value = _random_value(rng, version)
    host = ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)
    text = f"{host}/{rng.randint(0, 32 if version == 4 else 128)}"
    at = rng.randrange(len(text) + 1)
    edit = rng.choice(["change", "add", "drop", "none"])
    if edit == "change" and at < len(text):
        return text[:at] + rng.choice(alphabet) + text[at + 1:]
    if edit == "add":
        return text[:at] + rng.choice(alphabet) + text[at:]
    if edit == "drop" and at < len(text):
        return text[:at] + text[at + 1:]
    return text


def test_never_takes_what_ipaddress_refuses() -> None:
    """Near misses of valid networks, both versions: cidr accepts a subset of what
    ipaddress accepts, and reads each the same."""
    rng = random.Random(9)
    accepted = 0
    for _ in range(50000):
        text = _near_miss(rng)
        try:
            ours = cidr.normal(text)
        except ValueError:
            continue
        accepted += 1
        theirs = ipaddress.ip_network(text, strict=False)
        if _dotted_there(theirs):
            continue
        assert ours == str(theirs), text
    assert accepted > 10000, accepted  # the subset is exercised, not only refusals
