"""The kernel's process events connector (NETLINK_CONNECTOR, CN_IDX_PROC): every fork and
exit on the host, queued on a socket as it happens (before a forked child runs).

The kernel sends them only to CAP_NET_ADMIN in the initial user and PID namespaces, and
ignores a listener elsewhere in silence: `ProcEvents.open` proves with one probe fork that
events arrive. Callers ask the host door first (`readers.procs.hears_process_events`), so
where none can come they do not wait for the probe. `bpf` filters them in the kernel.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import time
from dataclasses import dataclass, field

PROC_EVENT_FORK = 0x00000001
PROC_EVENT_EXEC = 0x00000002
PROC_EVENT_EXIT = 0x80000000
NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
NLMSG_DONE = 3
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2
SO_RCVBUFFORCE = 33
RCVBUF_BYTES = 8 << 20  # a burst of some thousand forks fits while we are asleep
PROBE_WAIT_S = 0.5

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
_EVENT_HEAD = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
_FOUR_INTS = struct.Struct("=4i")
_PAYLOAD_AT = _NLMSGHDR.size + _CN_MSG.size
_DATA_AT = _PAYLOAD_AT + _EVENT_HEAD.size


def _control(op: int, event_filter: int | None) -> bytes:
    """A LISTEN/IGNORE request; kernels since 6.6 take a filter of event kinds, older ones
    only the bare operation (and ignore a request of any other length)."""
    body = struct.pack("=I", op) if event_filter is None else struct.pack("=II", op, event_filter)
    cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(body), 0) + body
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(cn), NLMSG_DONE, 0, 0, os.getpid()) + cn


@dataclass
class ProcEvents:
    """A socket subscribed to the kernel's process events, proven to deliver them: the one
    listener of the connector, for `run` (`ForkTracker`) and `watch` (exits it reacts to)."""

    sock: socket.socket
    listens: list[int | None] = field(default_factory=list)
    lost: bool = False  # the socket overflowed: some events were dropped

    @classmethod
    def open(cls, event_filter: int) -> ProcEvents | None:
        """Events of the kinds in `event_filter` (all kinds on kernels before 6.6), or None
        where none arrive (not root, not the initial namespaces, no connector)."""
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
        except OSError:
            return None
        events = cls(sock)
        try:
            sock.bind((0, CN_IDX_PROC))
            for size_opt in (SO_RCVBUFFORCE, socket.SO_RCVBUF):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, size_opt, RCVBUF_BYTES)
                    break
            for kinds in (event_filter, None):
                sock.send(_control(PROC_CN_MCAST_LISTEN, kinds))
                events.listens.append(kinds)
                if events._probe():
                    sock.setblocking(False)
                    return events
        except OSError:
            pass
        events.close()
        return None

    def _probe(self) -> bool:
        """Fork a child that exits at once; True when its fork or exit event arrives."""
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child only exits
            os._exit(0)
        os.waitpid(pid, 0)
        deadline = time.monotonic() + PROBE_WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                return False
            for what, ints in _events(self.sock.recv(65536)):
                if (what == PROC_EVENT_FORK and ints[3] == pid) or (
                    what == PROC_EVENT_EXIT and ints[1] == pid
                ):
                    return True

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[tuple[int, tuple[int, ...]]]:
        """Every queued event as (kind, first four ints of its data); never blocks. An
        overflow (ENOBUFS) sets `lost`: the caller must look at the host in full."""
        out: list[tuple[int, tuple[int, ...]]] = []
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError as exc:  # EAGAIN (BlockingIOError): nothing more queued
                if exc.errno == errno.ENOBUFS:
                    self.lost = True
                    continue
                return out
            out.extend(_events(data))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            for kinds in self.listens:
                self.sock.send(_control(PROC_CN_MCAST_IGNORE, kinds))
        self.listens.clear()
        self.sock.close()


def _events(data: bytes) -> list[tuple[int, tuple[int, ...]]]:
    """(what, first four ints of the event data) for each message of one datagram."""
    out: list[tuple[int, tuple[int, ...]]] = []
    at = 0
    while at + _DATA_AT + _FOUR_INTS.size <= len(data):
        length = _NLMSGHDR.unpack_from(data, at)[0]
        idx, val = _CN_MSG.unpack_from(data, at + _NLMSGHDR.size)[:2]
        if idx == CN_IDX_PROC and val == CN_VAL_PROC:
            what = _EVENT_HEAD.unpack_from(data, at + _PAYLOAD_AT)[0]
            out.append((what, _FOUR_INTS.unpack_from(data, at + _DATA_AT)))
        if length <= 0:
            break
        at += (length + 3) & ~3
    return out
