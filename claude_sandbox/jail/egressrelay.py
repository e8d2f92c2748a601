"""The egress proxy's relay: the bytes of one allowed connection, both ways, by splice(2).

Once a connection is judged (egresspolicy.py) and its upstream connected, this
moves what each side sends to the other until both have finished. Each direction
goes through a pipe with splice: the kernel moves the pages from one socket to the
other and no byte is copied through Python, which is what keeps a relayed transfer
near a direct one. A side that ends its sending (a half close) is passed on as a
half close; a side that resets ends its direction. The counts are for the record
(egressrecord.py); egressproxy.py calls this once a connection is allowed.
"""

from __future__ import annotations

import _socket
import _thread
import fcntl
import os
import select

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h: where a REDIRECTed connection was going
# The kernel counts every pipe's slots against its user's limit on the whole host
# (pipe-user-pages-soft, 16,384 pages by default; beyond it the user's new pipes,
# anywhere, get one page each). So a direction holds a pipe only while bytes are on
# their way: it makes one when its source has something and gives it back once all of
# it has reached the other side. 1,000 idle connections then hold no pipe at all.
# A direction that has moved _BULK_AFTER bytes keeps its pipe and grows it to 1 MiB,
# which splices a megabyte a call (about a tenth more throughput on two cores than
# 256 KiB); at most _BULK_MAX directions of the proxy hold one, a quarter of the limit.
_SMALL = 64 << 10  # the kernel's default pipe
_BULK = 1 << 20
_BULK_AFTER = 4 << 20
_BULK_MAX = 16
_F_SETPIPE_SZ = 1031
_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
_bulk_lock = _thread.allocate_lock()  # each relay runs in a worker thread of its own
_bulk_held = 0  # directions holding a 1 MiB pipe now


def original_destination(sock: _socket.socket) -> tuple[str, int]:
    """The address and port a connection redirected by iptables REDIRECT was made to."""
    raw = sock.getsockopt(_socket.SOL_IP, SO_ORIGINAL_DST, 16)
    return _socket.inet_ntoa(raw[4:8]), int.from_bytes(raw[2:4], "big")


class _Flow:
    """One direction: `src` into a pipe, the pipe into `dst`."""

    def __init__(self, src: _socket.socket, dst: _socket.socket) -> None:
        self.src, self.dst = src, dst
        self.pipe: tuple[int, int] | None = None  # (read end, write end) while in use
        self.size = _SMALL  # what one splice into the pipe may move
        self.tried = False  # for a 1 MiB pipe, once
        self.bulk = False  # holds one of the _BULK_MAX
        self.buffered = 0  # bytes in the pipe, not yet written to dst
        self.count = 0
        self.ended = False  # src sent its last byte (or reset)
        self.done = False  # and all of it reached dst, whose sending side is shut

    def want(self) -> tuple[int, int]:
        """(fd, poll events) this direction waits for."""
        if self.buffered:
            return self.dst.fileno(), select.POLLOUT
        return self.src.fileno(), select.POLLIN

    def step(self) -> None:
        """Move what is there until src has nothing more now or dst takes no more:
        back to poll only then (a poll per pipeful cost about a tenth of a bulk
        transfer's rate on two cores)."""
        try:
            self._move()
        finally:
            if not self.buffered and not self.bulk:
                self._give_back()

    def _move(self) -> None:
        while not self.done:
            if not self.buffered and not self.ended:
                try:
                    moved = os.splice(self.src.fileno(), self._pipe()[1], self.size,
                                      flags=_FLAGS)
                except BlockingIOError:
                    return  # src has nothing more now
                except _GONE:
                    moved = 0
                if moved == 0:
                    self.ended = True
                else:
                    self.buffered += moved
            while self.buffered:
                try:
                    moved = os.splice(self._pipe()[0], self.dst.fileno(), self.buffered,
                                      flags=_FLAGS)
                except BlockingIOError:
                    return  # dst is full: poll waits for room
                except _GONE:
                    self.buffered, self.ended = 0, True  # dst is gone: nothing more to give it
                    break
                self.buffered -= moved
                self.count += moved
            if not self.tried and self.count >= _BULK_AFTER:
                self._grow()
            if self.ended and not self.buffered:
                self.done = True
                try:
                    self.dst.shutdown(_socket.SHUT_WR)
                except OSError:
                    pass

    def _pipe(self) -> tuple[int, int]:
        if self.pipe is None:
            self.pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        return self.pipe

    def _grow(self) -> None:
        """A 1 MiB pipe kept for this direction, when one of the _BULK_MAX is free."""
        global _bulk_held
        self.tried = True
        with _bulk_lock:
            if _bulk_held >= _BULK_MAX:
                return  # the small pipe works, a little slower
            _bulk_held += 1
        self.bulk, self.size = True, _BULK  # a splice asking more than fits moves what fits
        try:
            fcntl.fcntl(self._pipe()[1], _F_SETPIPE_SZ, _BULK)
        except OSError:
            pass  # above pipe-max-size, or the user's pages are spent: the small pipe works

    def _give_back(self) -> None:
        if self.pipe is not None:
            os.close(self.pipe[0])
            os.close(self.pipe[1])
            self.pipe = None

    def close(self) -> None:
        global _bulk_held
        self._give_back()
        if self.bulk:
            with _bulk_lock:
                _bulk_held -= 1
            self.bulk = False


def relay(client: _socket.socket, upstream: _socket.socket, first: bytes = b"",
          idle: float | None = None) -> tuple[int, int]:
    """Relay until both directions are done; (bytes client to upstream, upstream to
    client). `first`: what the proxy already read from the client to judge it (a
    ClientHello, a request head), sent upstream before anything else. `idle`: seconds
    without a byte either way after which the relay gives up (None: never)."""
    for sock in (client, upstream):
        # What arrives is passed on at once: Nagle's wait would add a round trip to
        # every small write the two ends make in turn (a request, then its answer).
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
    if first:
        upstream.sendall(first)
    flows = (_Flow(client, upstream), _Flow(upstream, client))
    for sock in (client, upstream):
        sock.setblocking(False)
    poller = select.poll()
    try:
        while not all(flow.done for flow in flows):
            interest: dict[int, int] = {}
            for flow in flows:
                if not flow.done:
                    fd, events = flow.want()
                    interest[fd] = interest.get(fd, 0) | events
            for fd in (client.fileno(), upstream.fileno()):
                if fd in interest:
                    poller.register(fd, interest[fd] | select.POLLERR | select.POLLHUP)
                else:
                    try:
                        poller.unregister(fd)
                    except KeyError:
                        pass
            ready = dict(poller.poll(None if idle is None else int(idle * 1000)))
            if not ready:
                break
            for flow in flows:
                # Only a direction whose side is ready: stepping the other would make and
                # drop a pipe, and try a splice, for nothing, on every wake-up.
                if not flow.done:
                    fd, events = flow.want()
                    if ready.get(fd, 0) & (events | select.POLLERR | select.POLLHUP):
                        flow.step()
    finally:
        for flow in flows:
            flow.close()
    return flows[0].count + len(first), flows[1].count
