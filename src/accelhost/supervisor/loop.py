"""The supervisor: start one command, pass signals on, and leave nothing of it behind.

It sleeps in one `poll()` (`Waker`) over signals, pidfds and process events, so an idle
supervisor costs nothing: no timer fires unless something is tracked (`--fail-on-exit`,
`--bind`), and then only a /proc rescan that backs off to `scan_interval_s`. Signals
arrive through `signal.set_wakeup_fd`'s self-pipe and are handled in the loop (a handler,
unlike SIG_DFL, is never discarded by the kernel for PID 1). An event source is muted for
`BATCH_S` after each drain (its events queue meanwhile): a host that forks a lot costs a
few wakeups a second, not one a fork.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import signal
import time
from collections.abc import Callable, Iterable
from types import FrameType

from accelhost.errors import AccelhostError
from accelhost.host.base import Host
from accelhost.host.live import live_host
from accelhost.host.redact import redact_text
from accelhost.kernel.libc import open_pidfd
from accelhost.readers.procs import ProcessInfo
from accelhost.remove.signals import D_STATE, Pinned, StopLoop, send_each, signal_group, signal_name
from accelhost.supervisor.leftovers import Leftovers
from accelhost.supervisor.options import RunOutcome, SupervisorOptions
from accelhost.supervisor.spawn import Cgroup, SpawnError, become_subreaper, create_cgroup, spawn
from accelhost.supervisor.tree import TreeScanner, alive_only, scan_tree, still_same, with_cmdlines

# Signals passed on to the command's group that also start the teardown; SIGHUP and
# SIGUSR1/2 (often "reload") are passed on only.
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
FORWARDED = (*STOPPING, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# Dispositions the command gets back as default: ours, and SIGPIPE and SIGXFSZ (Python
# ignores them; a shell started by us must not inherit that).
_RESET_FOR_CHILD = (*FORWARDED, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ)

# /proc rescans while something is tracked start this fast and back off to scan_interval_s.
FIRST_SCAN_S = 0.2
BATCH_S = 0.05  # see the module docstring

# Exit statuses of the supervisor itself (a shell's conventions where there is one).
STATUS_CANNOT_EXECUTE = 126
STATUS_NOT_FOUND = 127
STATUS_ENGINE_DIED = 1


def _noop(signum: int, frame: FrameType | None) -> None:
    """The wakeup fd carries the signal to the loop."""


class Waker:
    def __init__(self) -> None:
        self.poller = select.poll()
        self._wake_r = self._wake_w = -1
        self._saved: dict[int, object] = {}
        self._saved_wakeup = -1
        # event sources read in batches: fd -> drain; muted ones: fd -> until
        self._sources: dict[int, Callable[[], None]] = {}
        self._muted: dict[int, float] = {}

    def install(self, signals: Iterable[int]) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.poller.register(self._wake_r, select.POLLIN)
        for sig in signals:
            self._saved[sig] = signal.signal(sig, _noop)
        self._saved_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def restore(self) -> None:
        signal.set_wakeup_fd(self._saved_wakeup)
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._saved.clear()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def add_events(self, fd: int, drain: Callable[[], None]) -> None:
        """A source read whenever it has data, at most once per `BATCH_S`."""
        self._sources[fd] = drain
        self.poller.register(fd, select.POLLIN)

    def wait(self, timeout_s: float | None) -> tuple[list[int], list[int]]:
        """Sleep until a signal, a watched fd, or the timeout: (signals, readable fds)."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            for fd, until in list(self._muted.items()):
                if now >= until:
                    self.poller.modify(fd, select.POLLIN)
                    del self._muted[fd]
            wake = [t for t in (end, *self._muted.values()) if t is not None]
            ms = None if not wake else max(0, int((min(wake) - now) * 1000) + 1)
            signals: list[int] = []
            fds: list[int] = []
            for fd, _ in self.poller.poll(ms):
                if fd == self._wake_r:
                    signals.extend(self._signals())
                elif fd in self._sources:
                    self._sources[fd]()
                    self.poller.modify(fd, 0)
                    self._muted[fd] = time.monotonic() + BATCH_S
                else:
                    fds.append(fd)
            if signals or fds or (end is not None and time.monotonic() >= end):
                return signals, fds

    def _signals(self) -> list[int]:
        out: list[int] = []
        with contextlib.suppress(BlockingIOError):  # the pipe is drained
            while data := os.read(self._wake_r, 512):
                out.extend(data)
        return out


class Supervisor:
    """One run. Not reusable: `run()` once."""

    def __init__(self, options: SupervisorOptions, host: Host) -> None:
        self.opts = options
        self.host = host
        self.me = os.getpid()
        self.cmd_pid: int | None = None
        self.cmd_status: int | None = None  # os.waitstatus_to_exitcode: -N for signal N
        self.stop_signal: int | None = None
        self.died: ProcessInfo | None = None
        self.tracked: dict[int, ProcessInfo] = {}  # pidfd -> process
        self.tracked_nofd: dict[int, ProcessInfo] = {}  # pid -> process
        self.bound = False
        self.patterns = [re.compile(p) for p in options.fail_on_exit]
        self.cgroup: Cgroup | None = None
        self.left = Leftovers(host)
        self.waker = Waker()
        self.scanner = TreeScanner(host, self.me)

    def _reap(self) -> None:
        """Collect every exited child: the command, and every orphan re-parented to us."""
        with contextlib.suppress(ChildProcessError):  # no child left
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:  # none has exited (yet)
                    return
                self.left.note([pid])
                if pid == self.cmd_pid:
                    self.cmd_status = os.waitstatus_to_exitcode(status)

    def _forward(self, sig: int) -> None:
        """Pass `sig` on to the command's group (its leader is our unreaped child, so the
        group id is still its own)."""
        if self.cmd_pid is not None and self.cmd_status is None:
            signal_group(self.cmd_pid, sig)

    def _scan(self, cheap: bool = False) -> dict[int, ProcessInfo]:
        """The tree now; `cheap` (while watching) skips pids already known to be outside."""
        extra = self.cgroup.pids() if self.cgroup is not None else []
        tree = self.scanner.scan(extra) if cheap else scan_tree(self.host, self.me, extra)
        self.left.note(tree)
        return tree

    def run(self) -> RunOutcome:
        self.waker.install([*FORWARDED, signal.SIGCHLD])
        try:
            return self._run()
        except BaseException:
            self._forward(signal.SIGKILL)  # a bug of ours must not leave the engine unsupervised
            raise
        finally:
            self._untrack()
            self.left.close()
            self.waker.restore()

    def _run(self) -> RunOutcome:
        if self.host.read_link("/proc/self") != str(self.me):
            # /proc of another PID namespace (`unshare -fp` without --mount-proc): its pids
            # are not ours to scan, pin or signal; the whole host would look like the tree.
            raise AccelhostError("run needs /proc of its own PID namespace (mount one)")
        if not become_subreaper():
            self.opts.warn(
                "cannot become a child subreaper; orphans of the command will not be found"
            )
        self.left = Leftovers.start(
            self.host, self.me, self.opts, scan=lambda: alive_only(self._scan())
        )
        for fd, drain in self.left.sources():
            self.waker.add_events(fd, drain)
        if self.opts.cgroup:
            self.cgroup = create_cgroup(self.opts.cgroup, f"accelhost-run-{self.me}")
        try:
            self.cmd_pid = spawn(
                self.opts.argv, self.cgroup, _RESET_FOR_CHILD, self.opts.private_ipc
            )
        except SpawnError as exc:
            if self.cgroup is not None and not self.cgroup.remove():
                self.opts.warn(f"could not remove cgroup {self.cgroup.path}")
            if exc.step in ("cgroup", "private-ipc"):  # run could not do it: exit 1, not 126
                raise AccelhostError(str(exc)) from None
            self.opts.warn(str(exc))
            missing = exc.step == "exec" and exc.errno == errno.ENOENT
            code = STATUS_NOT_FOUND if missing else STATUS_CANNOT_EXECUTE
            return RunOutcome(status=code, reason="not-started")
        self.left.note([self.cmd_pid])
        reason = self._watch()
        outcome = RunOutcome(status=0, reason=reason, cmd_pid=self.cmd_pid)
        if self.left.files is not None:  # which /dev/shm files the tree holds, before signals
            self.left.observe(alive_only(self._scan()))
        self._teardown(outcome)
        self.left.finish(outcome, self.opts.log)
        if self.cgroup is not None and not self.cgroup.remove():
            self.opts.warn(f"could not remove cgroup {self.cgroup.path}")
        outcome.status = self._status(reason)
        return outcome

    def _status(self, reason: str) -> int:
        code = self.cmd_status
        if reason == "engine-died":
            return STATUS_ENGINE_DIED
        if code is None:  # the command outlived even SIGKILL (D state)
            return 128 + signal.SIGKILL
        if code < 0:
            return 128 - code
        if reason == "signal" and code == 0 and self.stop_signal is not None:
            # Stopped from outside: not a success, whatever the command chose to exit with.
            return 128 + self.stop_signal
        return code

    def _watch(self) -> str:
        """Sleep until the command exits, a stopping signal comes, or a tracked process
        dies; returns the reason ("exited", "signal", "engine-died")."""
        tracking = bool(self.patterns) or (self.opts.bind is not None)
        interval = FIRST_SCAN_S
        now = time.monotonic()
        next_scan: float | None = now + interval if tracking else None
        delay_s = None if self.opts.bind is None else self.opts.bind.delay_s
        bind_at = None if delay_s is None else now + delay_s
        while True:
            deadlines = [d for d in (next_scan, bind_at) if d is not None]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            signals, fds = self.waker.wait(timeout)
            self._reap()
            for sig in signals:
                if sig == signal.SIGCHLD:
                    continue
                self._forward(sig)
                # Only a command still there got it: after its exit its group gets SIGTERM
                # in the teardown (the stop is then no stop of it: its own status stays).
                if sig in STOPPING and self.cmd_status is None:
                    self.stop_signal = sig
                    self.opts.log(f"received {signal_name(sig)}; stopping the command")
                    return "signal"
            for fd in fds:
                info = self.tracked.pop(fd, None)
                self.waker.poller.unregister(fd)
                os.close(fd)
                self.died = self.died or info
            if (died := self.died) is not None:
                self.opts.warn(
                    f"{redact_text(died.command)} (pid {died.pid}) exited while the command was "
                    "running (--fail-on-exit); stopping everything"
                )
                return "engine-died"
            if (code := self.cmd_status) is not None:
                how = f"killed by {signal_name(-code)}" if code < 0 else f"status {code}"
                self.opts.log(f"command exited ({how})")
                return "exited"
            now = time.monotonic()
            if next_scan is not None and now >= next_scan:
                self._track(self._scan(cheap=True))
                if self.died is not None:
                    continue  # reported at the top of the next round, with no wait
                interval = min(interval * 2, self.opts.scan_interval_s)
                next_scan = now + interval
            if bind_at is not None and now >= bind_at and not self.bound:
                self._bind(reason=f"after {delay_s:g} s")
                bind_at = None
            if not self.patterns and self.bound:
                next_scan = None

    def _track(self, tree: dict[int, ProcessInfo]) -> None:
        """Start watching newly seen members that match --fail-on-exit; bind when due."""
        bind = self.opts.bind
        if bind is not None and not self.bound:
            from accelhost.supervisor.integrations import holders_of_device

            if holders := holders_of_device(self.host, tree, bind.device):
                self._bind(reason=f"pid {holders[0]} opened device {bind.device}")
        if not self.patterns:
            return
        known = {i.pid for i in self.tracked.values()} | set(self.tracked_nofd)
        candidates = {
            pid: info
            for pid, info in tree.items()
            if pid not in known and pid != self.cmd_pid and info.state != "Z"
        }
        for pid, info in with_cmdlines(self.host, candidates).items():
            if not any(p.search(info.command) for p in self.patterns):
                continue
            fd = open_pidfd(pid)
            if fd is None:
                self.tracked_nofd[pid] = info
            elif still_same(self.host, info):
                self.tracked[fd] = info
                self.waker.poller.register(fd, select.POLLIN)
            else:
                os.close(fd)  # it died between the scan and the pidfd: already a death
                self.died = info
                return
        for pid, info in list(self.tracked_nofd.items()):
            if not still_same(self.host, info) or tree.get(pid, info).state == "Z":
                self.died = info
                return

    def _bind(self, reason: str) -> None:
        from accelhost.supervisor.integrations import bind_tree

        req = self.opts.bind
        assert req is not None
        self.bound = True
        if req.plan is None:
            self.opts.log("--bind: no plan was made; nothing bound")
            return
        tree = self._scan()
        bind_tree(self.host, req.plan, req.device, tree, self.cmd_pid, reason, self.opts.log)

    def _untrack(self) -> None:
        for fd in list(self.tracked):
            self.waker.poller.unregister(fd)
            os.close(fd)
        self.tracked.clear()

    def _teardown(self, outcome: RunOutcome) -> None:
        """The whole tree stopped (`StopLoop`), forks made meanwhile too. When the stop
        signal was forwarded, the command's group had its SIGTERM: a second one would cut
        its shutdown short."""
        self._untrack()
        forwarded = outcome.reason == "signal"
        loop = StopLoop(
            self.host,
            self._live,
            send=self._send,
            spare=lambda info: forwarded and info.pgid == self.cmd_pid,
            log=self.opts.log,
            poller=self.waker.poller,
            wait=self._wait_forwarding,
        )
        left = loop.run(self.opts.grace_s, self.opts.kill_wait_s)
        outcome.terminated, outcome.killed = loop.terminated, loop.killed
        for pid, info in left.items():
            outcome.survivors.append(pid)
            how = D_STATE if info.state == "D" else f"state {info.state}"
            self.opts.warn(f"pid {pid} ({info.comm}) survived SIGKILL, {how}")

    def _send(self, sig: int, pins: list[Pinned]) -> list[int]:
        if sig == signal.SIGKILL and self.cgroup is not None:
            self.cgroup.kill_all()  # one SIGKILL to every member, forks made meanwhile too
        return send_each(sig, pins)

    def _live(self) -> dict[int, ProcessInfo]:
        self._reap()
        return alive_only(self._scan())

    def _wait_forwarding(self, timeout_s: float) -> list[int]:
        """Sleep in the one poll; reap and pass stop signals on meanwhile."""
        signals, fds = self.waker.wait(timeout_s)
        self._reap()
        for sig in signals:
            if sig != signal.SIGCHLD:
                self._forward(sig)
        return fds


def supervise(options: SupervisorOptions, host: Host | None = None) -> RunOutcome:
    """Run `options.argv` under supervision until it and everything it started are gone."""
    if not options.argv:
        raise ValueError("no command to run")
    return Supervisor(options, live_host() if host is None else host).run()
