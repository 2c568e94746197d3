"""Every process the supervised tree ever had, from the kernel's process events connector.

A scan of /proc sees only the processes alive at that moment, so a grandchild that made a
System V segment and exited between two looks (`sh -c 'make_segment & wait'`) could not be
tied to the tree, and its segment was left behind. The kernel's connector
(NETLINK_CONNECTOR, CN_IDX_PROC) reports every fork and exit on the host as it happens,
queued on a socket before fork() even returns, so the set of pids forked from the tree is
exact without any polling: the supervisor wakes when the socket has data (at most
`BATCH_S` apart, so a busy host costs a few wakeups a second, not one per fork).

It needs root (CAP_NET_ADMIN) and the initial PID namespace (the kernel reports no events
inside a container's own PID namespace). `ForkTracker.open` proves it works with one
probe fork and returns None otherwise; the supervisor then falls back to what its scans
and reaping see, and says so.

A pid that the tree and a process outside it both had during the run (in either order,
or held by a process that was already there at the start) is marked ambiguous: a segment
whose creator pid is ambiguous is never removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from accelhost.host.live import live_host
from accelhost.parsers.procstat import parse_status_field

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
NLMSG_DONE = 3
PROC_CN_MCAST_LISTEN = 1
PROC_CN_MCAST_IGNORE = 2
PROC_EVENT_FORK = 0x00000001
PROC_EVENT_EXIT = 0x80000000
SO_RCVBUFFORCE = 33
RCVBUF_BYTES = 8 << 20  # a burst of some thousand forks fits while we are asleep
# After draining, wait this long before looking at the socket again (events just queue).
BATCH_S = 0.05
PROBE_WAIT_S = 0.5

_NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_CN_MSG = struct.Struct("=IIIIHH")  # idx, val, seq, ack, len, flags
_EVENT_HEAD = struct.Struct("=IIQ")  # what, cpu, timestamp_ns
_FOUR_INTS = struct.Struct("=4i")
_PAYLOAD_AT = _NLMSGHDR.size + _CN_MSG.size
_DATA_AT = _PAYLOAD_AT + _EVENT_HEAD.size


# The kernel's initial namespaces have fixed inode numbers (PROC_USER_INIT_INO and
# PROC_PID_INIT_INO in include/linux/proc_ns.h).
_INIT_USER_NS_INO = 0xEFFFFFFD
_INIT_PID_NS_INO = 0xEFFFFFFC
CAP_NET_ADMIN = 12


def _may_listen() -> bool:
    """The kernel sends events only to CAP_NET_ADMIN in the initial user and PID namespaces;
    a listener elsewhere is ignored in silence, so tell without waiting for a probe."""
    try:
        host = live_host()
        user_ns, pid_ns = host.stat("/proc/self/ns/user"), host.stat("/proc/self/ns/pid")
        if user_ns is None or user_ns.inode != _INIT_USER_NS_INO:
            return False
        if pid_ns is None or pid_ns.inode != _INIT_PID_NS_INO:
            return False
        status = host.read_file("/proc/self/status") or ""
        caps = parse_status_field(status, "CapEff") or "0"
        return bool(int(caps, 16) >> CAP_NET_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        return False


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
        where the kernel gives no events to this process (not root, not the initial
        namespaces, no connector)."""
        if not _may_listen():
            return None
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
            data = self.sock.recv(65536)
            for what, ints in _events(data):
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
            except BlockingIOError:
                return out
            except OSError as exc:
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


@dataclass
class ForkTracker:
    """The tgids forked from `root` (directly or through any chain of descendants)."""

    events: ProcEvents
    root: int
    members: set[int] = field(default_factory=set)  # every tgid ever in the tree
    live: set[int] = field(default_factory=set)  # members whose exit has not been seen
    # pids some process outside the tree had during the run (those alive at the start, and
    # every fork outside it since): bounded by the kernel's pid_max
    outside: set[int] = field(default_factory=set)
    # Member pids that a process outside the tree had too, before or after: a segment whose
    # creator has such a pid may be either's, so it stays.
    ambiguous: set[int] = field(default_factory=set)

    @classmethod
    def open(cls, root: int, alive: Iterable[int] = ()) -> ForkTracker | None:
        """A working tracker, or None where the kernel gives no events to this process.
        `alive`: the pids of the processes there before the tree (all outside it)."""
        events = ProcEvents.open(PROC_EVENT_FORK | PROC_EVENT_EXIT)
        if events is None:
            return None
        return cls(events, root, outside=set(alive) - {root})

    @property
    def sock(self) -> socket.socket:
        return self.events.sock

    @property
    def lost(self) -> bool:
        return self.events.lost

    @property
    def listens(self) -> list[int | None]:
        return self.events.listens

    def fileno(self) -> int:
        return self.events.fileno()

    def drain(self) -> None:
        """Read every queued event; never blocks."""
        for what, ints in self.events.read():
            self._apply(what, ints)

    def _apply(self, what: int, ints: tuple[int, ...]) -> None:
        if what == PROC_EVENT_FORK:
            _parent_pid, parent_tgid, child_pid, child_tgid = ints
            if child_pid != child_tgid:
                return  # a new thread of an existing process
            if parent_tgid == self.root or parent_tgid in self.live:
                if child_tgid in self.outside:
                    self.ambiguous.add(child_tgid)
                self.members.add(child_tgid)
                self.live.add(child_tgid)
            else:
                self.outside.add(child_tgid)
                if child_tgid in self.members:
                    self.ambiguous.add(child_tgid)
        elif what == PROC_EVENT_EXIT:
            pid, tgid = ints[0], ints[1]
            if pid == tgid:
                self.live.discard(tgid)

    def close(self) -> None:
        self.events.close()


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
