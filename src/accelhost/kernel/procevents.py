"""The kernel's process events connector (NETLINK_CONNECTOR, CN_IDX_PROC): every fork and
exit on the host, queued on a socket as it happens (before a forked child runs).

The kernel sends them only to CAP_NET_ADMIN in the initial user and PID namespaces, and
ignores a listener elsewhere in silence: `ProcEvents.open` proves with one probe fork that
events arrive. Callers ask the host door first (`readers.procs.hears_process_events`), so
where none can come they do not wait for the probe.

Classic BPF socket filters drop in the kernel what a reader does not need, before it is
queued: a host that forks without pause sends thousands of events a second, and reading
each one in Python costs about 3 us. Two programs, one for each reader:
- `exit_filter(pids, execs)`: exits of whole processes among `pids` (`watch` reacts to
  them), and with `execs` every exec (`watch` learns of an engine born since its last round);
- `fork_filter(tree, floor, outsiders)`: what `run`'s `ForkTracker` needs to follow a process
  tree, see that class for why these are enough: forks by a parent in `tree`, or whose pid
  is at least `floor` (a process born since the filter was built) and not in `outsiders`;
  forks whose child pid is below `floor` (the pid counter wrapped, or a fork raced the
  filter's update); and exits of processes in `tree`. Threads are dropped.

Filter offsets are those of `struct nlmsghdr` + `struct cn_msg` + `struct proc_event`.
Classic BPF's word loads read big-endian; the events are in host order: an equality test
compares with the byte-swapped constant (`_net`), and an ordering test loads the word byte
by byte. Conditional jumps are one byte long, so each test is followed by its own return.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Collection, Iterable
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


# ---- classic BPF filters (see the module docstring) ----

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
MAX_INSNS = 4096  # the kernel's limit for one classic BPF program

_LD_W_ABS, _LD_B_ABS, _LDX_MEM, _ST = 0x20, 0x30, 0x61, 0x02
_JA, _JEQ_K, _JEQ_X, _JGE_K = 0x05, 0x15, 0x1D, 0x35
_LSH_K, _ADD_X, _TAX, _RET_K = 0x64, 0x0C, 0x07, 0x06
_WHAT_AT = _PAYLOAD_AT  # proc_event.what
# fork: parent_pid, parent_tgid, child_pid, child_tgid; exit: process_pid, process_tgid
_PARENT_TGID, _CHILD_PID, _CHILD_TGID = _DATA_AT + 4, _DATA_AT + 8, _DATA_AT + 12
_ACCEPT, _DROP = (_RET_K, 0, 0, 0xFFFFFFFF), (_RET_K, 0, 0, 0)

Insn = tuple[int, int, int, int]


def _net(value: int) -> int:
    """`value` as classic BPF's word loads see a host-order u32 (they read big-endian)."""
    return int.from_bytes(struct.pack("=I", value & 0xFFFFFFFF), "big")


def _load_host_order(at: int) -> list[Insn]:
    """A = the host-order u32 at `at` (on a little-endian host, assembled byte by byte)."""
    if sys.byteorder == "big":
        return [(_LD_W_ABS, 0, 0, at)]
    out: list[Insn] = [(_LD_B_ABS, 0, 0, at + 3)]
    for byte in (2, 1, 0):
        out += [(_LSH_K, 0, 0, 8), (_TAX, 0, 0, 0), (_LD_B_ABS, 0, 0, at + byte), (_ADD_X, 0, 0, 0)]
    return out


def _whole_process(pid_at: int, tgid_at: int) -> list[Insn]:
    """Drop the event unless pid == tgid there (a thread's fork or exit)."""
    return [
        (_LD_W_ABS, 0, 0, tgid_at),
        (_ST, 0, 0, 0),
        (_LDX_MEM, 0, 0, 0),
        (_LD_W_ABS, 0, 0, pid_at),
        (_JEQ_X, 1, 0, 0),
        _DROP,
    ]


def _return_if_in(at: int, pids: Iterable[int], ret: Insn = _ACCEPT) -> list[Insn]:
    out: list[Insn] = [(_LD_W_ABS, 0, 0, at)]
    for pid in sorted(set(pids)):
        out += [(_JEQ_K, 0, 1, _net(pid)), ret]
    return out


def _pack(prog: list[Insn]) -> bytes:
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def exit_filter(pids: Iterable[int] | None, execs: bool = False) -> bytes:
    """Exits of whole processes whose pid is in `pids` (every process exit when None);
    with `execs`, every exec too (an exec is always its thread group leader's)."""
    prog: list[Insn] = [(_LD_W_ABS, 0, 0, _WHAT_AT)]
    if execs:
        prog += [(_JEQ_K, 0, 1, _net(PROC_EVENT_EXEC)), _ACCEPT]
    prog += [(_JEQ_K, 1, 0, _net(PROC_EVENT_EXIT)), _DROP]
    prog += _whole_process(_DATA_AT, _DATA_AT + 4)
    if pids is None:
        return _pack([*prog, _ACCEPT])
    return _pack([*prog, *_return_if_in(_DATA_AT + 4, pids), _DROP])


def fork_filter(tree: Collection[int], floor: int, outsiders: Collection[int] = ()) -> bytes | None:
    """What `ForkTracker` reads of a host's events, or None when `tree` and `outsiders`
    are too many for one program (then nothing is filtered). `outsiders`: processes at
    or above `floor` known to be outside the tree (older than the floor after the pid
    counter wrapped round): their forks are dropped."""
    fork: list[Insn] = _whole_process(_CHILD_PID, _CHILD_TGID)
    fork += _return_if_in(_PARENT_TGID, tree)
    if outsiders:
        fork += _return_if_in(_PARENT_TGID, outsiders, _DROP)
    fork += [*_load_host_order(_PARENT_TGID), (_JGE_K, 0, 1, floor), _ACCEPT]
    # a child below the floor: the counter wrapped, or this fork raced the filter's update
    fork += [*_load_host_order(_CHILD_TGID), (_JGE_K, 0, 1, floor), _DROP, _ACCEPT]
    exit_: list[Insn] = _whole_process(_DATA_AT, _DATA_AT + 4)
    exit_ += [*_return_if_in(_DATA_AT + 4, tree), _DROP]
    head: list[Insn] = [
        (_LD_W_ABS, 0, 0, _WHAT_AT),
        (_JEQ_K, 0, 1, _net(PROC_EVENT_FORK)),
        (_JA, 0, 0, 3),  # to the fork block
        (_JEQ_K, 0, 1, _net(PROC_EVENT_EXIT)),
        (_JA, 0, 0, 1 + len(fork)),  # to the exit block
        _DROP,
    ]
    prog = head + fork + exit_
    return None if len(prog) > MAX_INSNS else _pack(prog)


def attach(sock: socket.socket, program: bytes) -> None:
    """SO_ATTACH_FILTER with a struct sock_fprog pointing at `program` (it replaces the
    filter attached before, atomically)."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def detach(sock: socket.socket) -> None:
    """SO_DETACH_FILTER: every event reaches the socket again."""
    sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
