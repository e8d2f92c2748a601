"""The one codec between our processes (core/wire.py): round trips, limits, and fuzzing.

Every crossing uses these functions, so the fuzzing here holds for all of them: the
jail holder, the egress proxy's control socket, the inner record, the /proc helper,
the command server and the janitor. Each reader's own checks of its fields are
fuzzed beside it (test_brokered.py, the inner record's tests).
"""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from claude_sandbox.core import wire

TEXT = st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))
FIELDS = st.lists(TEXT, max_size=20)


@settings(max_examples=300, deadline=None)
@given(FIELDS)
def test_fields_come_back_as_they_went(fields: list[str]) -> None:
    assert wire.unpack(wire.pack(fields), 1 << 20) == fields
    assert wire.messages(wire.frame(fields) * 2, 1 << 20) == [fields, fields]


def test_bytes_that_are_not_utf_8_come_back_unchanged() -> None:
    # argv, environment and paths are bytes on Linux: none is lost on the way.
    field = b"caf\xe9".decode("utf-8", "surrogateescape")
    assert wire.unpack(wire.pack([field]), 64) == [field]


def test_a_field_with_nul_is_refused_when_packed() -> None:
    with pytest.raises(wire.WireError, match="field 1 holds a NUL"):
        wire.pack(["ok", "a\0b"])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=0, max_value=400))
def test_any_bytes_are_fields_or_refused(data: bytes, limit: int) -> None:
    try:
        fields = wire.unpack(data, limit)
    except wire.WireError:
        assert len(data) > limit or not data.endswith(b"\0")
        return
    assert len(data) <= limit
    assert wire.pack(fields) == data


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_on_a_pipe_are_messages_or_left_out(data: bytes) -> None:
    try:
        found = wire.messages(data, 128)
    except wire.WireError:
        return  # a body that is not fields
    assert b"".join(wire.frame(m) for m in found) == data[:sum(4 + len(wire.pack(m))
                                                              for m in found)]


def test_a_message_over_its_limit_is_refused_before_its_body_is_read() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        # A length that claims 4 GiB, and no body: the reader must not wait for it.
        theirs.sendall((0xFFFFFFFF).to_bytes(4, "big"))
        with pytest.raises(wire.WireError, match="over its limit"):
            wire.receive(ours, 1 << 20)


def test_a_message_cut_short_is_refused_and_its_descriptors_closed() -> None:
    ours, theirs = socket.socketpair()
    read_end, write_end = os.pipe()
    with ours, theirs:
        data = wire.frame(["exec", "x"])
        theirs.sendmsg([data[:1]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                     write_end.to_bytes(4, "little"))])
        theirs.sendall(data[1:-1])
        theirs.shutdown(socket.SHUT_WR)
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(wire.WireError, match="inside a message"):
            wire.receive(ours, 1 << 20)
        assert set(os.listdir("/proc/self/fd")) <= before
    os.close(read_end)
    os.close(write_end)


def test_descriptors_and_the_senders_credentials_travel_with_a_message() -> None:
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    read_end, write_end = os.pipe()
    with ours, theirs:
        wire.send(theirs, ["proxy"], [write_end], credentials=True)
        message = wire.receive(ours, 64)
        assert message is not None and message.fields == ("proxy",)
        assert message.pid == os.getpid() and len(message.fds) == 1
        os.write(message.fds[0], b"x")
        assert os.read(read_end, 1) == b"x"
        assert not os.get_inheritable(message.fds[0])  # close-on-exec until placed
        wire.close(message.fds)
        theirs.close()
        assert wire.receive(ours, 64) is None  # the peer closed before a message began
    os.close(read_end)
    os.close(write_end)


def test_too_many_descriptors_are_refused_by_the_sender() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs, pytest.raises(wire.WireError, match="descriptors"):
        wire.send(theirs, ["x"], [0] * (wire.MAX_FDS + 1))


def test_the_command_servers_status_reads_back_and_anything_else_is_a_kill() -> None:
    from claude_sandbox.inside import broker

    assert broker._status(wire.pack(["status", "126"])) == 126
    assert broker._status(wire.pack(["status", "265"])) == 265
    # the old 4-byte form, a signal message, an empty pipe: the command was killed
    for data in ((126).to_bytes(4, "little"), wire.pack(["signal", "2"]), b""):
        assert broker._status(data) == 256 + 9


def test_a_message_the_codec_refuses_is_the_jails_one_line_not_a_hang() -> None:
    from claude_sandbox.core.errors import EXIT_JAIL, SandboxError
    from claude_sandbox.jail import channel, reaping

    ours, theirs = socket.socketpair()
    with ours, theirs:
        with pytest.raises(SandboxError, match=r"egress jail: .*NUL") as refused:
            channel.send(ours, ["exec", "a\0b"])
        assert refused.value.status == EXIT_JAIL
        theirs.close()
        with pytest.raises(reaping.HolderGone):
            channel.send(ours, ["run"])


def test_the_janitor_is_told_only_whole_messages() -> None:
    from claude_sandbox.launch.session import janitor

    read_end, write_end = os.pipe()
    told = janitor.Janitor.__new__(janitor.Janitor)
    told._told = write_end
    told.tell("cgroup", "/sys/fs/cgroup/a")
    told.tell("cgroup", "/" + "x" * 5000)  # longer than a pipe writes whole: left out
    told.tell("cgroup", "/sys/fs/cgroup/b")
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        found = wire.messages(pipe.read(), janitor.TOLD_LIMIT)
    assert found == [["cgroup", "/sys/fs/cgroup/a"], ["cgroup", "/sys/fs/cgroup/b"]]
