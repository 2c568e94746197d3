"""clean on this machine: dry run changes nothing, --yes kills only the orphan and removes
only the leaked segment, and the journal says what was done before it was done."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hygiene_lab import Lab, nobody_python, pid_alive, run_cli, shmids_now, wait_gone


def test_clean_kills_the_orphan_and_spares_the_healthy_engine(lab: Lab) -> None:
    node = lab.device_node()
    orphan = lab.orphan_engine(node)
    healthy, launcher = lab.healthy_engine(node)
    journal = lab.tmp / "journal.jsonl"
    # --pid keeps this test away from anything else running on a shared machine.
    scope = ["--pid", str(orphan), "--pid", str(healthy), "--only", "orphans"]

    dry = run_cli("clean", "--json", "--device-glob", lab.glob(), "--journal", str(journal), *scope)
    # the healthy engine was named and cannot be acted on: said, and exit 1
    assert dry.returncode == 1, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dry_run"] is True
    planned = [t["pid"] for a in plan["actions"] for t in a["targets"]]
    assert planned == [orphan]
    [kept] = plan["not_acted_on"]
    assert kept["target"] == healthy and kept["reason"].startswith("not an orphan: ")
    assert f"pid {healthy}: not an orphan" in dry.stderr
    assert pid_alive(orphan) and pid_alive(healthy)
    assert not journal.exists()

    res = run_cli(
        "clean",
        "--yes",
        "--grace",
        "5",
        "--journal",
        str(journal),
        "--device-glob",
        lab.glob(),
        *scope,
    )
    assert res.returncode == 1, res.stdout + res.stderr  # the orphan is done, the rest said
    assert wait_gone(orphan)
    assert pid_alive(healthy) and pid_alive(launcher)
    assert "before:" in res.stdout and "after:" in res.stdout

    records = [json.loads(line) for line in journal.read_text().splitlines()]
    intents = [r for r in records if r["event"] == "intent"]
    assert intents[0]["action"] == "signal" and intents[0]["signal"] == "SIGTERM"
    assert intents[0]["pids"] == [orphan]
    assert intents[0]["pgid"] is not None  # the whole orphaned group was signalled
    outcomes = [r for r in records if r["event"] == "outcome"]
    assert outcomes == [{**outcomes[0], "action": "stop", "pid": orphan, "result": "gone"}]
    assert records.index(intents[0]) < records.index(outcomes[0])


def test_only_the_leaked_segment_is_removed(lab: Lab) -> None:
    leaked, _ = lab.segment("create-exit", 4096)  # creator gone, unattached
    attached, _ = lab.segment("create-exit", 4096)  # creator gone ...
    _, attacher = lab.segment("attach", attached)  # ... but a live process has it attached
    owned, creator = lab.segment("create-sleep", 4096)  # creator alive, unattached
    assert attacher is not None and creator is not None
    journal = lab.tmp / "journal.jsonl"
    scope = [a for s in (leaked, attached, owned) for a in ("--shmid", str(s))]
    common = ["--shm-min-age", "0", "--only", "segments", "--journal", str(journal), *scope]

    doctor = run_cli("doctor", "--json", "--check", "shared_memory", "--shm-min-age", "0")
    found = [e["shmid"] for e in json.loads(doctor.stdout)["checks"][0]["evidence"]]
    assert leaked in found and attached not in found and owned not in found

    dry = run_cli("clean", "--json", *common)
    assert dry.returncode == 1, dry.stderr  # two named segments are not leaked: said
    assert [a["shmid"] for a in json.loads(dry.stdout)["actions"]] == [leaked]
    kept = {u["target"]: u["reason"] for u in json.loads(dry.stdout)["not_acted_on"]}
    assert kept == {
        attached: "not leaked: attached by 1 process(es)",
        owned: f"not leaked: creator {creator} is alive",
    }
    assert {leaked, attached, owned} <= shmids_now()
    assert not journal.exists()

    res = run_cli("clean", "--yes", *common)
    assert res.returncode == 1, res.stdout + res.stderr
    now = shmids_now()
    assert leaked not in now
    assert attached in now and owned in now
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [(r["event"], r["action"], r["shmid"]) for r in records] == [
        ("intent", "remove_segment", leaked),
        ("outcome", "remove_segment", leaked),
    ]
    assert records[0]["bytes"] == 4096 and records[1]["result"] == "removed"


def test_segment_of_a_stopped_orphan_goes_with_it(lab: Lab) -> None:
    """The story's case: a crashed engine keeps a segment attached; once the engine is
    stopped the segment is unattached, its creator dead, and it is removed too."""
    node = lab.device_node()
    orphan, shmid = lab.orphan_engine_with_segment(node)
    bystander, helper = lab.segment("create-sleep", 8192)  # alive creator: must stay
    assert helper is not None
    journal = lab.tmp / "j.jsonl"
    scope = ["--pid", str(orphan), "--shmid", str(shmid), "--shmid", str(bystander)]

    dry = run_cli("clean", "--json", "--journal", str(journal), *scope)
    actions = json.loads(dry.stdout)["actions"]
    assert [a["kind"] for a in actions] == ["stop", "remove_segment"]
    assert actions[1]["shmid"] == shmid and actions[1]["after_stop"] is True

    res = run_cli("clean", "--yes", "--grace", "5", "--journal", str(journal), *scope)
    # the bystander was named and is not leaked (its creator lives): exit 1, said
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"shmid {bystander}: not leaked: creator {helper} is alive" in res.stderr
    assert wait_gone(orphan)
    now = shmids_now()
    assert shmid not in now
    assert bystander in now and pid_alive(helper)


def test_clean_refuses_yes_on_a_snapshot(tmp_path: Path) -> None:
    res = run_cli("clean", "--yes", "--snapshot", "example:a2-192cpu-8npu-sees-npu0")
    assert res.returncode == 2  # options that do not go together: a usage error
    assert res.stderr.startswith("accelhost clean: ") and "Traceback" not in res.stderr


def test_unwritable_journal_is_one_line(tmp_path: Path, lab: Lab) -> None:
    leaked, _ = lab.segment("create-exit", 4096)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    res = run_cli(
        "clean",
        "--yes",
        "--shm-min-age",
        "0",
        "--shmid",
        str(leaked),
        "--journal",
        str(blocker / "sub" / "j.jsonl"),
    )
    assert res.returncode == 2  # a --journal where no directory is: the user's to fix
    assert res.stderr.strip() == (
        f"accelhost clean: --journal {blocker / 'sub' / 'j.jsonl'}: there is no directory "
        f"{blocker / 'sub'}"
    )
    assert leaked in shmids_now()  # nothing is done without a journal


def test_a_journal_that_cannot_be_written_stops_before_the_action(lab: Lab) -> None:
    """/dev/full opens but every write fails: the intent is not on record, so the segment
    must not be removed, and the user gets one line, not a traceback."""
    leaked, _ = lab.segment("create-exit", 4096)
    res = run_cli(
        "clean", "--yes", "--shm-min-age", "0", "--shmid", str(leaked), "--journal", "/dev/full"
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.startswith("accelhost: cannot write the journal /dev/full")
    assert "Traceback" not in res.stderr
    assert leaked in shmids_now()


def test_clean_as_another_user_says_not_permitted(lab: Lab) -> None:
    """An unprivileged user's `clean --yes` on root's orphan: EPERM is an outcome (exit 1,
    one line per pid), not a traceback, and the orphan is untouched. It runs a copy of the
    package, so it passes wherever the checkout lives (even where nobody cannot enter)."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")
    node = lab.device_node()
    orphan = lab.orphan_engine(node)
    jdir = Path(tempfile.mkdtemp(prefix="accelhost-nobody-"))
    try:
        prefix, env = nobody_python(jdir)
        where = subprocess.run(
            [*prefix, "-c", "import accelhost; print(accelhost.__file__)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
            cwd=jdir,
        )
        assert where.stdout.startswith(str(jdir)), where.stdout + where.stderr
        os.chmod(jdir, 0o777)  # the journal goes here
        res = subprocess.run(
            [
                *prefix,
                "-m",
                "accelhost.cli.main",
                "clean",
                "--yes",
                "--grace",
                "0.2",
                "--only",
                "orphans",
                "--pid",
                str(orphan),
                "--journal",
                str(jdir / "j.jsonl"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
            cwd=jdir,
        )
    finally:
        shutil.rmtree(jdir, ignore_errors=True)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"not done: pid {orphan}: not permitted" in res.stdout
    assert pid_alive(orphan)
