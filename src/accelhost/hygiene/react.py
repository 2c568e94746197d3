"""`watch` reacts at once: the exit of an engine process or of a holder of an engine's
shared-memory file starts a round within a second, instead of at the next `--interval`.

The kernel's process events (`accelhost.supervisor.procevents.ProcEvents`, the listener
`run` uses too) are subscribed to exits only, and a classic BPF socket filter drops in the
kernel every exit but those of the pids this round cares about: a fork-heavy neighbour
costs the watch no wakeup. The filter is rebuilt when that set changes (after each round).

Where the kernel gives no events (not root, not the host's PID namespace) or the socket
overflowed (events lost), the watch says so once in its log and in
`accelhost_watch_fallback{source="process_events"}`; rounds then come at `--interval`, and
after a loss the next round reads the whole host (an exit it missed is seen there).
"""

from __future__ import annotations

import contextlib
import ctypes
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from accelhost.supervisor.procevents import PROC_EVENT_EXIT, ProcEvents

# How long to let an exit settle (its children re-parented, its siblings killed) before
# the round that judges what it left.
SETTLE_S = 0.2
# Wake this often to see a stop request (select cannot wait on a threading.Event).
POLL_S = 0.5
# More pids than this: the filter passes every exit and user space picks (a BPF program
# has at most 4096 instructions).
MAX_FILTER_PIDS = 1000

SO_ATTACH_FILTER = 26
_BPF_LD_W_ABS = 0x20
_BPF_LDX_MEM = 0x61
_BPF_ST = 0x02
_BPF_JEQ_K = 0x15
_BPF_JEQ_X = 0x1D
_BPF_RET_K = 0x06
_WHAT_AT = 36  # nlmsghdr (16) + cn_msg (20): proc_event.what
_PID_AT = 52  # ... + what, cpu, timestamp (16): exit.process_pid, then process_tgid


def _net(value: int) -> int:
    """`value` as classic BPF's absolute loads see a host-order u32 (they read big-endian)."""
    return int.from_bytes(struct.pack("=I", value & 0xFFFFFFFF), "big")


def exit_filter(pids: Iterable[int] | None) -> bytes:
    """A classic BPF program (struct sock_filter array) that passes exits of whole
    processes (pid == tgid) whose pid is in `pids` (every process exit when None).
    Jumps are short (classic BPF's offsets are one byte): each test is followed by its
    own return."""
    accept, drop = (_BPF_RET_K, 0, 0, 0xFFFFFFFF), (_BPF_RET_K, 0, 0, 0)
    prog: list[tuple[int, int, int, int]] = [
        (_BPF_LD_W_ABS, 0, 0, _WHAT_AT),
        (_BPF_JEQ_K, 1, 0, _net(PROC_EVENT_EXIT)),
        drop,
        (_BPF_LD_W_ABS, 0, 0, _PID_AT + 4),  # tgid
        (_BPF_ST, 0, 0, 0),
        (_BPF_LDX_MEM, 0, 0, 0),
        (_BPF_LD_W_ABS, 0, 0, _PID_AT),  # pid
        (_BPF_JEQ_X, 1, 0, 0),
        drop,  # a thread's exit
    ]
    if pids is None:
        prog.append(accept)
    else:
        for pid in sorted(set(pids)):
            prog += [(_BPF_JEQ_K, 0, 1, _net(pid)), accept]
        prog.append(drop)
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _attach(sock: socket.socket, program: bytes) -> None:
    """SO_ATTACH_FILTER with a struct sock_fprog pointing at `program`."""
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


@dataclass
class Reactor:
    """Wakes the watch when a watched process exits; None-safe fallbacks when it cannot."""

    log: Callable[[dict[str, Any]], None]
    degraded: Callable[[str, str], None]
    events: ProcEvents | None = None
    watched: frozenset[int] = frozenset()
    lost_said: bool = False
    exits_seen: int = 0
    _filtered: frozenset[int] | None = field(default=None, repr=False)

    @classmethod
    def open(
        cls, log: Callable[[dict[str, Any]], None], degraded: Callable[[str, str], None]
    ) -> Reactor:
        events = ProcEvents.open(PROC_EVENT_EXIT)
        reactor = cls(log, degraded, events)
        if events is None:
            why = (
                "no process events (needs root with CAP_NET_ADMIN in the host's PID "
                "namespace): an engine's death is judged at the next --interval"
            )
            log({"event": "fallback", "source": "process_events", "reason": why})
            degraded("process_events", why)
        else:
            reactor.watch(())
        return reactor

    def watch(self, pids: Iterable[int]) -> None:
        """Exits of these pids wake the watch (the filter is rebuilt when they change)."""
        self.watched = frozenset(pids)
        if self.events is None or self.watched == self._filtered:
            return
        program = exit_filter(self.watched if len(self.watched) <= MAX_FILTER_PIDS else None)
        with contextlib.suppress(OSError):  # no filter: user space picks the exits it wants
            _attach(self.events.sock, program)
        self._filtered = self.watched

    def wait(self, stop: threading.Event, until: float) -> list[int]:
        """Wait until `until` (monotonic), a stop, or the exit of a watched pid; the pids
        that exited (empty on a timeout or a stop). After a loss of events, [-1]."""
        while not stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return []
            if self.events is None:
                stop.wait(min(left, POLL_S))
                continue
            ready = select.select([self.events], [], [], min(left, POLL_S))[0]
            if not ready:
                continue
            exited = self._exits()
            if self.events.lost:
                self.events.lost = False
                if not self.lost_said:
                    self.lost_said = True
                    why = "process events lost (socket overflow): the next round reads all"
                    self.log({"event": "fallback", "source": "process_events", "reason": why})
                    self.degraded("process_events", why)
                return [-1]
            if exited:
                time.sleep(SETTLE_S)
                return sorted(set(exited) | set(self._exits()))
        return []

    def _exits(self) -> list[int]:
        assert self.events is not None
        out = []
        for what, ints in self.events.read():
            if what == PROC_EVENT_EXIT and ints[0] == ints[1] and ints[1] in self.watched:
                out.append(ints[1])
        self.exits_seen += len(out)
        return out

    def close(self) -> None:
        if self.events is not None:
            with contextlib.suppress(OSError):
                self.events.close()
            self.events = None
