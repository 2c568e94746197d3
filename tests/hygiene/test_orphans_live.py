"""The engine-aware orphan rule on real process trees (stand-ins titled with `exec -a`).

A healthy server started the way deployment scripts do it (`nohup vllm serve ... &`, then
the script exits) keeps the script's process group, whose leader is gone: it must never be
called an orphan, and `clean --yes` must leave it alone. Once its API server is killed,
its EngineCore and Worker are orphans and `clean --yes` removes them.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from hygiene_lab import Lab, pid_alive, run_cli, wait_gone

from accelhost.host.live import LiveHost
from accelhost.hygiene.clean.cleaner import CleanFilters
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher


def _ppid(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2 :].split()[1])


def _kill9(lab: Lab, pid: int) -> None:
    """SIGKILL one of our own processes through its pidfd (never a bare, reusable pid)."""
    signal.pidfd_send_signal(lab.pidfds[pid], signal.SIGKILL)
    assert wait_gone(pid)


def _wait_reparented(pid: int, old_parent: int) -> None:
    deadline = time.monotonic() + 30
    while _ppid(pid) == old_parent and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _ppid(pid) != old_parent


def _orphans(*extra: str) -> dict[int, dict[str, object]]:
    res = run_cli("doctor", "--json", "--check", "orphan_engines", *extra)
    assert res.returncode in (0, 1), res.stderr
    return {e["pid"]: e for e in json.loads(res.stdout)["checks"][0]["evidence"]}


def test_script_launched_healthy_server_is_never_an_orphan(lab: Lab) -> None:
    node = lab.device_node()
    fe, engine, worker = lab.server(node, launcher_exits=True)
    # the situation of the bug: the group leader (the script) is gone
    stat = Path(f"/proc/{fe}/stat").read_text()
    pgid = int(stat[stat.rfind(")") + 2 :].split()[2])
    assert pgid != fe and not Path(f"/proc/{pgid}").exists()
    ours = {fe, engine, worker}

    assert not ours & set(_orphans())
    journal = lab.tmp / "j.jsonl"
    scope = [a for p in sorted(ours) for a in ("--pid", str(p))]
    dry = run_cli("clean", "--json", "--only", "orphans", "--journal", str(journal))
    planned = {t["pid"] for a in json.loads(dry.stdout)["actions"] for t in a["targets"]}
    assert not ours & planned  # not even an unscoped plan touches it
    res = run_cli("clean", "--yes", "--grace", "1", "--journal", str(journal), *scope)
    # each named pid is said to be no orphan, and why; nothing done: exit 1
    assert res.returncode == 1, res.stdout + res.stderr
    assert "0 action(s)" in res.stdout
    assert f"pid {fe}: an engine frontend (vLLM): never judged an orphan" in res.stderr
    assert f"pid {engine}: not an orphan: its parent is its engine's frontend {fe}" in res.stderr
    assert all(pid_alive(p) for p in ours)
    assert not journal.exists()


def test_engine_under_its_own_launching_shell_is_an_orphan(lab: Lab) -> None:
    """The launcher shell lives and waits, but an engine child right under a shell has no
    frontend: vLLM never starts its EngineCore from a shell."""
    node = lab.device_node()
    fe, engine, worker = lab.server(node, launcher_exits=False)
    assert not {fe, engine, worker} & set(_orphans())  # under its frontend: healthy
    lone = lab.orphan_engine(node)
    assert lone in _orphans()


def test_api_server_killed_children_are_flagged_and_removed(lab: Lab) -> None:
    node = lab.device_node()
    fe, engine, worker = lab.server(node)
    healthy_fe, healthy_engine, healthy_worker = lab.server(node)  # a neighbour that lives
    _kill9(lab, fe)
    _wait_reparented(engine, fe)

    found = _orphans("--device-glob", lab.glob())
    assert {engine, worker} <= set(found)
    assert not {healthy_fe, healthy_engine, healthy_worker} & set(found)
    core = found[engine]
    parent = core["parent"]
    assert isinstance(parent, dict) and parent["pid"] == _ppid(engine)
    assert parent["cmdline"] == " ".join(
        a for a in Path(f"/proc/{parent['pid']}/cmdline").read_text().split("\0") if a
    )
    assert core["engine"] == "vLLM" and core["devices"] == [str(node)]
    assert found[worker]["parent"] == {"pid": engine, "cmdline": core["cmdline"]}

    journal = lab.tmp / "j.jsonl"
    res = run_cli(
        "clean", "--yes", "--grace", "5", "--journal", str(journal),
        "--pid", str(engine), "--pid", str(worker),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert wait_gone(engine) and wait_gone(worker)
    assert all(pid_alive(p) for p in (healthy_fe, healthy_engine, healthy_worker))
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert records[0]["event"] == "intent" and set(records[0]["pids"]) == {engine, worker}


def test_auto_clean_never_acts_on_a_tree_whose_frontend_lives(lab: Lab) -> None:
    """EngineCore killed, its API server still up: the Worker is re-parented (an orphan the
    doctor names) but its frontend lives in its group; watch --auto-clean leaves it."""
    node = lab.device_node()
    fe, engine, worker = lab.server(node)
    _kill9(lab, engine)
    _wait_reparented(worker, engine)
    found = _orphans()
    assert worker in found and found[worker]["group_frontend_pid"] == fe

    logs: list[dict[str, object]] = []
    watcher = Watcher(
        LiveHost,
        HygieneOptions(),
        WatchConfig(
            interval_s=0.5,
            auto_clean=True,
            clean_orphan_rounds=1,
            journal=str(lab.tmp / "auto.jsonl"),
            grace_s=1,
            scope=CleanFilters(pids=frozenset({worker, fe})),
        ),
        logs.append,
    )
    watcher.run(threading.Event(), rounds=3)
    assert pid_alive(worker) and pid_alive(fe)
    assert not any(e["event"] == "auto_clean" for e in logs)
    assert not (lab.tmp / "auto.jsonl").exists()
    # a person can still clean it deliberately
    res = run_cli(
        "clean", "--yes", "--grace", "2", "--journal", str(lab.tmp / "j.jsonl"),
        "--pid", str(worker),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert wait_gone(worker) and pid_alive(fe)


def test_brief_names_the_orphan_in_one_line(lab: Lab) -> None:
    orphan = lab.orphan_engine(lab.device_node())
    res = run_cli("doctor", "--brief", "--check", "orphan_engines")
    assert res.returncode == 1
    (line,) = res.stdout.splitlines()
    assert line.startswith("FAIL orphan_engines: ") and len(line) <= 80
    assert os.path.exists(f"/proc/{orphan}")
