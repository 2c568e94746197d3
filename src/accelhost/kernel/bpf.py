"""Classic BPF socket filters for the kernel's process events connector (`procevents`).

Why in the kernel: a host that forks without pause sends thousands of events a second, and
reading each one in Python costs about 3 us; a filter attached to the socket drops what the
reader does not need before it is queued, so the reader does not even wake up.

Two programs, one for each reader:
- `exit_filter(pids, execs)`: exits of whole processes among `pids` (`watch` reacts to
  them), and with `execs` every exec (`watch` learns of an engine born since its last round);
- `fork_filter(tree, floor, outsiders)`: what `run`'s `ForkTracker` needs to follow a process
  tree, see that class for why these are enough: forks by a parent in `tree`, or whose pid
  is at least `floor` (a process born since the filter was built) and not in `outsiders`;
  forks whose child pid is below `floor` (the pid counter wrapped, or a fork raced the
  filter's update); and exits of processes in `tree`. Threads are dropped.

Offsets are those of `struct nlmsghdr` + `struct cn_msg` + `struct proc_event`. Classic
BPF's word loads read big-endian; the events are in host order: an equality test compares
with the byte-swapped constant (`_net`), and an ordering test loads the word byte by byte.
Conditional jumps are one byte long, so each test is followed by its own return.
"""

from __future__ import annotations

import ctypes
import socket
import struct
import sys
from collections.abc import Collection, Iterable

from accelhost.kernel.procevents import PROC_EVENT_EXEC, PROC_EVENT_EXIT, PROC_EVENT_FORK

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
MAX_INSNS = 4096  # the kernel's limit for one classic BPF program

_LD_W_ABS, _LD_B_ABS, _LDX_MEM, _ST = 0x20, 0x30, 0x61, 0x02
_JA, _JEQ_K, _JEQ_X, _JGE_K = 0x05, 0x15, 0x1D, 0x35
_LSH_K, _ADD_X, _TAX, _RET_K = 0x64, 0x0C, 0x07, 0x06
_WHAT_AT = 36  # nlmsghdr (16) + cn_msg (20): proc_event.what
_DATA_AT = 52  # ... + what, cpu, timestamp (16): the event's data
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
