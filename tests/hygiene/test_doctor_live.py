"""doctor on this machine, with real orphaned and healthy engine processes."""

from __future__ import annotations

import json

from hygiene_lab import Lab, pid_alive, run_cli


def test_doctor_finds_the_orphan_not_the_healthy_engine(lab: Lab) -> None:
    node = lab.device_node()
    orphan = lab.orphan_engine(node)
    healthy, launcher = lab.healthy_engine(node)

    res = run_cli("doctor", "--json", "--device-glob", lab.glob())

    assert res.returncode == 1, res.stderr
    report = json.loads(res.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) == {
        "orphan_engines",
        "device_holders",
        "unattributed_memory",
        "shared_memory",
        "posix_shm",
        "hugepages",
        "preflight",
        "host_tuning",
        "container_init",
    }
    assert checks["orphan_engines"]["status"] == "FAIL"
    orphans = {e["pid"]: e for e in checks["orphan_engines"]["evidence"]}
    assert orphan in orphans
    assert healthy not in orphans and launcher not in orphans
    assert orphans[orphan]["devices"] == [str(node)]
    assert orphans[orphan]["cmdline"].startswith("VLLM::EngineCore")
    assert isinstance(orphans[orphan]["pid"], int)
    holders = {e["pid"]: e for e in checks["device_holders"]["evidence"]}
    assert {orphan, healthy} <= set(holders)
    assert holders[healthy]["devices"] == [str(node)]
    assert pid_alive(orphan) and pid_alive(healthy)  # the doctor only reads


def test_doctor_table_names_the_orphan(lab: Lab) -> None:
    node = lab.device_node()
    orphan = lab.orphan_engine(node)
    res = run_cli("doctor", "--device-glob", lab.glob(), "--check", "orphan_engines")
    assert res.returncode == 1
    assert "orphan_engines" in res.stdout and "FAIL" in res.stdout
    assert f"pid {orphan}" in res.stdout
    assert "Traceback" not in res.stderr


def test_engine_pattern_is_read_from_cmdline_not_comm(lab: Lab) -> None:
    # comm is cut at 15 characters; a pattern longer than that must still match.
    node = lab.device_node()
    title = "my-engine-with-a-long-title"
    orphan = lab.orphan_engine(node, title=title)
    res = run_cli(
        "doctor", "--json", "--check", "orphan_engines", "--engine-child", "with-a-long-title"
    )
    pids = [e["pid"] for e in json.loads(res.stdout)["checks"][0]["evidence"]]
    assert orphan in pids
