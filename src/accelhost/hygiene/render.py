"""The doctor's and the cleaner's output for people: tables and one-line evidence.

JSON output carries every field; these lines pick what a person reads first.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from itertools import zip_longest
from typing import Any

from accelhost.formats import MIB, human_bytes
from accelhost.hygiene.report import CheckResult, DoctorReport, one_line
from accelhost.parsers.devnodes import CONTROL_NODES
from accelhost.render import Paint, render_table


def _mib(v: Any) -> str:
    """Device memory as the device tools count it (MiB), from the JSON's bytes."""
    return "?" if v is None else f"{v // MIB} MiB"


def _nodes(devices: Sequence[str]) -> list[str]:
    """Per-device nodes when there are any; driver control nodes only otherwise."""
    own = [d for d in devices if d not in CONTROL_NODES]
    return own or list(devices)


def _file_bytes(used: int, size: int) -> str:
    """What a /dev/shm file takes, truthfully for both kinds: a sparse queue uses less than
    its apparent size ("4.0 MiB used (of 240.0 MiB)"), and a 32-byte semaphore takes a
    whole tmpfs page, more than its size: "32 B (one 4.0 KiB page)", never "4.0 KiB used
    (of 32 B)".
    """
    if used <= size:
        return f"{human_bytes(used)} used (of {human_bytes(size)})"
    pages = "one 4.0 KiB page" if used == 4096 else f"{human_bytes(used)} in whole pages"
    return f"{human_bytes(size)} ({pages})"


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def _in_container(e: dict[str, Any]) -> str:
    c = e.get("container")
    return f", in container {c['label']}" if isinstance(c, dict) and c.get("label") else ""


def _left_by(e: dict[str, Any]) -> str:
    left = e.get("left_by")
    return f"; left by: {left['why']}" if isinstance(left, dict) and left.get("why") else ""


def evidence_lines(check: CheckResult) -> list[str]:
    """Short human lines for one check's evidence (the JSON has everything); the processes
    that could not be read lead the list."""
    unread = [e for e in check.evidence if e.get("kind") == "unreadable_processes"]
    items = [e for e in check.evidence if e.get("kind") != "unreadable_processes"]
    lines = [
        f"pid(s) {' '.join(map(str, e['pids'][:8]))}{' ...' if len(e['pids']) > 8 else ''}: "
        + e["reason"]
        for e in unread
    ]
    if check.name == "device_holders":
        by_node: dict[str, list[str]] = {}
        for e in items:
            mem, state = e.get("device_memory_bytes"), e.get("state")
            text = (
                f"pid {e['pid']}"
                + (f" [{state}]" if state and state not in "SRI" else "")
                + f" {one_line(str(e.get('cmdline', '?')), 40)}"
                + (f" {_mib(mem)}" if mem is not None else "")
                + _in_container(e)
            )
            for node in _nodes(e.get("devices") or ["?"]):
                by_node.setdefault(node, []).append(text)
        return [f"{node}: {'; '.join(v)}" for node, v in sorted(by_node.items())] + lines
    for e in items:
        kind, age = e.get("kind"), e.get("age_s")
        if kind == "process":
            text = f"pid {e['pid']} {one_line(str(e.get('cmdline', '')), 50)}"
            text += f", up {_age(age)}" if age is not None else ""
            text += f", holds {' '.join(_nodes(e['devices']))}" if e.get("devices") else ""
            mem = e.get("device_memory_bytes")
            text += (f" ({_mib(mem)})" if mem is not None else "") + _in_container(e)
            said = str(e.get("reason") or "")
            text += f": {said or e.get('detail')}" if said or e.get("detail") else ""
            parent = e.get("parent")
            if parent and f" {parent['pid']} " not in f" {said} " and parent["pid"] != 1:
                text += f"; parent {parent['pid']} {one_line(str(parent['cmdline']), 30)}"
            lines.append(text)
        elif kind == "shm_file":
            lines.append(
                f"{e['path']} {_file_bytes(e['used_bytes'], e['size_bytes'])}, {e['owner']}"
                + (f", {_age(age)} old" if age is not None else "")
                + (f", {e['naming']} naming" if e.get("naming") else "")
                + f": {e['reason']}"
                + _left_by(e)
            )
        elif kind == "segment":
            lines.append(
                f"shmid {e['shmid']} key {e['key']} {human_bytes(e['bytes'])} "
                f"creator {e['creator_pid']}{' hugetlb' if e['hugetlb'] else ''}: {e['reason']}"
                + _left_by(e)
            )
        elif kind == "container":
            c = e.get("container") or {}
            ipc = str(e.get("ipc_mode") or ("host" if e.get("shares_host_ipc") else "?"))
            if ipc.startswith("container:"):
                ipc = ipc[:22]  # container:<12 of the id>
            lines.append(
                f"{c.get('label', '?')}: PID 1 {one_line(str(e.get('pid1_command') or '?'), 40)}"
                f", ipc {ipc}: {e.get('detail', '')}"
            )
        elif kind == "device" and "message" in e:
            lines.append(f"{e['device']}: {e['message']}")
            for h in e.get("holders", []):
                mem = _mib(h["device_memory_bytes"])
                lines.append(f"  held by pid {h['pid']} {one_line(h['cmdline'], 40)} {mem}")
            lines.append(f"  unattributed {_mib(e['unattributed_bytes'])}")
        elif kind == "device":
            lines.append(
                f"{e['device']}: {_mib(e['unattributed_bytes'])} of {_mib(e['used_bytes'])} "
                f"used by no listed process (baseline {_mib(e['baseline_bytes'])})"
            )
        elif kind == "hugepages":
            where = "host" if e["node"] is None else f"node{e['node']}"
            lines.append(
                f"{e['size']} {where}: {e['used_pct']}% used ({e['free']}/{e['total']} free)"
            )
        else:
            lines.append(str(e.get("detail") or e))
    return lines


EVIDENCE_WIDTH = 76
FIX_WIDTH = 44


def render_report(
    report: DoctorReport, columns: int | None = None, paint: Paint | None = None
) -> str:
    """One block of rows per check: summary then evidence lines, fix wrapped alongside,
    all within `columns` when given (evidence and fix wrap; JSON output keeps it all):
    evidence gets most of the room, neither less than 20 characters."""
    width, fix_width = EVIDENCE_WIDTH, FIX_WIDTH
    if columns is not None:
        name = max([len("CHECK"), *(len(c.name) for c in report.checks)])
        status = max([len("STATUS"), *(len(c.status) for c in report.checks)])
        room = columns - name - status - 3 * 2  # three gaps of two spaces
        width = max(20, min(EVIDENCE_WIDTH, room * 63 // 100))
        fix_width = max(20, min(FIX_WIDTH, room - width))
    rows: list[list[str]] = []
    for c in report.checks:
        left = textwrap.wrap(c.summary, width) or [""]
        for line in evidence_lines(c):
            left += textwrap.wrap(
                line, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
            )
        right = textwrap.wrap(c.fix, fix_width, break_on_hyphens=False)
        for n, (ev, fix) in enumerate(zip_longest(left, right, fillvalue="")):
            rows.append([c.name, c.status, ev, fix] if n == 0 else ["", "", ev, fix])
    return render_table(["CHECK", "STATUS", "EVIDENCE", "FIX"], rows, paint)


def describe_figures(fig: dict[str, Any]) -> str:
    pools = fig["hugepages_free"]
    huge = (
        "unknown"
        if pools is None
        else ", ".join(f"{s} {v['free']}/{v['total']}" for s, v in pools.items()) or "none"
    )
    free = fig["device_memory_free_bytes"]
    dev = "unknown" if free is None else ", ".join(f"{d} {_mib(v)}" for d, v in free.items())
    if fig["segments"] is None:
        segs = "unknown"
    else:
        leaked = "?" if fig["leaked_segments"] is None else fig["leaked_segments"]
        segs = f"{fig['segments']} ({human_bytes(fig['segment_bytes'])}, {leaked} leaked)"
    if fig["leaked_shm_files"] is None:
        files = "unknown"
    else:
        files = f"{fig['leaked_shm_files']} ({human_bytes(fig['leaked_shm_bytes'])})"
    if fig.get("unjudged_shm_files"):  # never removed: what could not be verified stays
        files += f", {fig['unjudged_shm_files']} not judged, kept ({fig['unjudged_why']})"
    orphans = "unknown" if fig["orphans"] is None else fig["orphans"]
    return (
        f"HugePages free {huge}; segments {segs}; leaked /dev/shm files {files}; "
        f"orphans {orphans}; device memory free {dev or 'no device source'}"
    )
