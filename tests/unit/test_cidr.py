"""jail/cidr.py against ipaddress, which it stands in for on the launch path."""

from __future__ import annotations

import ipaddress
import random

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


def test_networks_read_and_written_as_ipaddress_does() -> None:
    rng = random.Random(7)
    for _ in range(20000):
        version = rng.choice([4, 6])
        value = _random_value(rng, version)
        host = ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)
        length = rng.randint(0, 32 if version == 4 else 128)
        for text in (f"{host}/{length}", str(host)):
            expected = ipaddress.ip_network(text, strict=False)
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


def test_never_takes_what_ipaddress_refuses() -> None:
    """Random text from the characters of addresses: cidr accepts a subset of what
    ipaddress accepts, and reads each the same."""
    rng = random.Random(9)
    alphabet = "0123456789abcdefABCDEF.:/%x "
    for _ in range(50000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
        try:
            ours = cidr.normal(text)
        except ValueError:
            continue
        assert ours == str(ipaddress.ip_network(text, strict=False)), text
