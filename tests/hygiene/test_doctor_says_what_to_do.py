"""What the doctor tells an operator to do is what happens when they do it: a fix repeats
the scope and the options in force, fresh leftovers are not "none", and sizes are true."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from hygiene_fakes import NOW, FakeHost

from accelhost.cli.main import main
from accelhost.hygiene import HygieneOptions, read_facts, run_checks
from accelhost.hygiene.render import render_report

LEAK = "example:docker-vllm-leak"


def _doctor_json(capsys, *args: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    main(["doctor", "--snapshot", LEAK, "--json", *args])
    return json.loads(capsys.readouterr().out)


def test_the_fix_repeats_the_scope_and_plans_exactly_the_files_listed(capsys) -> None:  # type: ignore[no-untyped-def]
    scope = ["--container", "vllm-bash", "--shm-min-age", "0"]
    doctor = _doctor_json(capsys, "--check", "posix_shm", *scope)
    (check,) = doctor["checks"]
    listed = sorted(e["path"] for e in check["evidence"] if "path" in e)
    assert len(listed) == 3
    fix = check["fix"]
    assert fix.startswith("on the recorded host: accelhost clean --yes --only shm ")
    assert fix.endswith("; a --snapshot replay cannot be cleaned")
    command = shlex.split(fix.removeprefix("on the recorded host: ").split(" (")[0])
    assert command[:3] == ["accelhost", "clean", "--yes"]
    assert command[command.index("--container") + 1] == "vllm-bash"
    assert command[command.index("--shm-min-age") + 1] == "0"
    # the command, as a dry run on the same recording, plans exactly what was listed
    main([*command[1:2], *command[3:], "--snapshot", LEAK, "--json"])
    plan = json.loads(capsys.readouterr().out)
    assert sorted(a["path"] for a in plan["actions"]) == listed


def test_every_option_that_changes_the_clean_is_repeated(tmp_path: Path) -> None:
    catalog = tmp_path / "my engines.json"
    opts = HygieneOptions(
        shm_min_age_s=5,
        shm_dirs=("/dev/shm", "/run/vllm shm"),
        catalog_words=("--engine-catalog", str(catalog), "--engine-child", "^my-worker"),
        cri_sockets=("/run/k3s/containerd/containerd.sock",),
        kubelet_root="/data/kubelet",
    )
    fake = FakeHost().segment(7, 4096, cpid=4242, ctime=NOW - 3600)
    report = run_checks(read_facts(fake.host(), opts), opts, ("shared_memory",))
    (check,) = report.checks
    assert check.status == "WARN"
    command = shlex.split(check.fix.removeprefix("on the recorded host: ").split(" (")[0])
    assert command == [
        "accelhost", "clean", "--yes", "--only", "segments", "--shm-min-age", "5", "--shm-dir", "/run/vllm shm", "--engine-catalog", str(catalog),
        "--engine-child", "^my-worker", "--cri-socket", "/run/k3s/containerd/containerd.sock",
        "--kubelet-root", "/data/kubelet",
    ]  # fmt: skip


def test_fresh_leftovers_are_counted_with_when_they_count() -> None:
    """Right after a crash: a segment whose creator is gone, idle 18 s, and a queue file
    held by nobody, unchanged 18 s, are candidates, not "none"."""
    fake = FakeHost().segment(7, 4096, cpid=4242, ctime=NOW - 18)
    fake.shm_file("psm_6a1f0c2e", 4 << 20, 8192, NOW - 18, inode=501)
    opts = HygieneOptions()
    checks = {c.name: c for c in run_checks(read_facts(fake.host(), opts), opts).checks}
    seg, files = checks["shared_memory"], checks["posix_shm"]
    assert seg.status == files.status == "OK"
    assert seg.summary == (
        "1 segment(s), none leaked; 1 candidate(s) not yet 60 s idle (counts in 42 s)"
    )
    assert files.summary == (
        "1 file(s) in /dev/shm, none leaked; 1 candidate(s) not yet 60 s old (counts in 42 s)"
    )
    # once old enough they are leaked, and nothing waits
    old = HygieneOptions(shm_min_age_s=10)
    checks = {c.name: c for c in run_checks(read_facts(fake.host(), old), old).checks}
    assert checks["shared_memory"].status == checks["posix_shm"].status == "WARN"
    assert "candidate" not in checks["shared_memory"].summary + checks["posix_shm"].summary


def test_a_semaphore_is_its_size_in_one_page() -> None:
    """A 32-byte semaphore takes one 4 KiB page: more used than its size, which is normal."""
    fake = FakeHost().shm_file("sem.mp-3kq9x1ab", 32, 8, NOW - 7200, inode=502)
    fake.shm_file("psm_6a1f0c2e", 240 << 20, 8192, NOW - 7200, inode=503)
    opts = HygieneOptions()
    text = render_report(run_checks(read_facts(fake.host(), opts), opts, ("posix_shm",)), 200)
    assert "/dev/shm/sem.mp-3kq9x1ab 32 B (one 4.0 KiB page), root" in text
    assert "/dev/shm/psm_6a1f0c2e 4.0 MiB used (of 240.0 MiB), root" in text
    assert "(of 32 B)" not in text


def test_auto_clean_says_once_what_stays_under_its_byte_threshold() -> None:
    """A leaked file under --clean-leaked-bytes stays: one log line says so, with the
    command that removes it, and the next round says nothing new."""
    from accelhost.hygiene.judge.findings import find
    from accelhost.hygiene.watch.kept import KeptNotes

    fake = FakeHost().shm_file("psm_6a1f0c2e", 4 << 20, 8192, NOW - 7200, inode=501)
    opts = HygieneOptions(shm_min_age_s=30)
    files = find(read_facts(fake.host(), opts), opts).leaked_files or []
    assert [j.file.path for j in files] == ["/dev/shm/psm_6a1f0c2e"]
    events: list[dict[str, object]] = []
    notes = KeptNotes(events.append, opts, clean_leaked_bytes=1 << 30)
    for _round in range(2):
        notes.say([], [], [], files, 4 << 20)
    assert events == [
        {
            "event": "auto_clean_kept",
            "kind": "shm_file",
            "path": "/dev/shm/psm_6a1f0c2e",
            "bytes": 4 << 20,
            "reason": "4194304 B leaked in all, under --clean-leaked-bytes 1073741824",
            "command": "accelhost clean --yes --path /dev/shm/psm_6a1f0c2e --shm-min-age 30",
        }
    ]
    notes.say([], [], [], [], 0)  # gone: a later return is said again
    notes.say([], [], [], files, 4 << 20)
    assert len(events) == 2
