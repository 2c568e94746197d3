"""No secret read from the host leaves it in accelhost's output.

An engine's command line and environment hold API keys and tokens (`vllm serve --api-key
sk-...`, `HF_TOKEN=...`, URLs with a password). doctor's `--brief` becomes a Kubernetes
node condition, `--json` and the watch's log go to aggregators, /metrics is scraped, and
journals are shipped: every one of them is scanned here for secrets planted in a real
process (and in a recorded container's PID 1), while matching still sees the raw text.
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path

from container_story import SAFE, container_story
from hygiene_lab import PY, Lab, run_cli
from prometheus_client import generate_latest

from accelhost.host.live import LiveHost
from accelhost.host.redact import REDACTED, redact_text, redact_values
from accelhost.hygiene.clean.cleaner import CleanFilters
from accelhost.hygiene.engines import build_catalog
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher, json_logger
from container_hosts import DOCKER_SOCK, SHAPES, put_in_container

SECRETS = ("sk-TESTSECRET", "hf_TESTSECRET", "pw_TESTSECRET")
SECRET_ARGS = "--api-key sk-TESTSECRET --url https://bob:pw_TESTSECRET@hub.example/m"


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def planted_engine(lab: Lab, node: Path) -> int:
    """An orphan `VLLM::EngineCore` (its setsid launcher exited) holding `node`, with an
    API key and a URL password in its argv and HF_TOKEN in its environment. The program
    comes on stdin (`python -`), so the secrets are within what a table row shows."""
    script = (
        f"exec 3<'{node}'; (exec -a VLLM::EngineCore \"$PY\" - {SECRET_ARGS} "
        "<<< 'import time; time.sleep(1000)' >/dev/null 2>&1) & echo $!; exit 0"
    )
    pid = lab.setsid_script(script, {**os.environ, "PY": PY, "HF_TOKEN": "hf_TESTSECRET"})
    argv = b"VLLM::EngineCore\0-\0--api-key\0sk-TESTSECRET\0"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the subshell's own command line until its exec
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        if cmdline.startswith(argv):
            break
        time.sleep(0.02)
    # the secrets really are on the host, where accelhost reads them
    assert cmdline.startswith(argv), cmdline
    assert b"HF_TOKEN=hf_TESTSECRET" in Path(f"/proc/{pid}/environ").read_bytes()
    return pid


def test_a_live_engines_secrets_appear_in_no_output(lab: Lab) -> None:
    node = lab.device_node()
    by_cli, by_watch = planted_engine(lab, node), planted_engine(lab, node)
    glob = ("--device-glob", lab.glob())
    text = run_cli("doctor", *glob)
    assert f"pid {by_cli} VLLM::EngineCore - --api-key {REDACTED}" in text.stdout, text.stdout
    brief = run_cli("doctor", *glob, "--brief")
    assert brief.stdout.startswith("FAIL orphan_engines"), brief.stdout
    doc = run_cli("doctor", *glob, "--json")
    checks = {c["name"]: c for c in json.loads(doc.stdout)["checks"]}
    shown = {e["pid"]: e["cmdline"] for e in checks["orphan_engines"]["evidence"]}
    assert shown[by_cli] == (
        f"VLLM::EngineCore - --api-key {REDACTED} --url https://bob:{REDACTED}@hub.example/m"
    )
    plan_text = run_cli("clean", *glob, "--pid", str(by_cli))
    plan = run_cli("clean", *glob, "--pid", str(by_cli), "--json")
    (stop,) = json.loads(plan.stdout)["actions"]
    assert [t["pid"] for t in stop["targets"]] == [by_cli]
    topo = run_cli("topo", "--json")
    journal = lab.tmp / "clean.jsonl"
    done = run_cli(
        "clean", *glob, "--pid", str(by_cli), "--yes", "--json", "--journal", str(journal)
    )
    assert done.returncode == 0, done.stderr
    assert f'"pids": [{by_cli}]' in journal.read_text()
    # the watch: its log (JSON lines, as `accelhost watch` writes them), its auto-clean's
    # journal, and /metrics; scoped to this test's orphan alone
    log, watch_journal = io.StringIO(), lab.tmp / "watch.jsonl"
    watcher = Watcher(
        LiveHost,
        HygieneOptions(device_globs=(lab.glob(),), shm_min_age_s=3600),
        WatchConfig(
            auto_clean=True,
            clean_orphan_rounds=1,
            journal=str(watch_journal),
            grace_s=5,
            scope=CleanFilters(pids=frozenset({by_watch})),
        ),
        json_logger(log),
    )
    watcher.run_once()
    assert f'"pids": [{by_watch}]' in log.getvalue()  # its auto_clean was logged
    outputs = {
        "doctor": text.stdout + text.stderr,
        "doctor --brief": brief.stdout,
        "doctor --json": doc.stdout,
        "clean": plan_text.stdout + plan_text.stderr,
        "clean --json": plan.stdout,
        "clean --yes --json": done.stdout + done.stderr,
        "clean's journal": journal.read_text(),
        "topo --json": topo.stdout,
        "watch's log": log.getvalue(),
        "watch's journal": watch_journal.read_text(),
        "/metrics": generate_latest(watcher.registry).decode(),
    }
    assert {name: _leaks(out) for name, out in outputs.items() if _leaks(out)} == {}


def test_a_secret_in_a_containers_pid1_appears_in_no_output(tmp_path: Path) -> None:
    """`docker run vllm/vllm-openai --api-key K`: the key is in PID 1's command line and in
    the runtime's Args, which every finding of that container carries."""
    fake = container_story()
    fake.files["/proc/2000/cmdline"] = "\0".join(
        ["accelhost", "run", "--", "vllm", "serve", "/m", *SECRET_ARGS.split()]
    )
    inspect_key = f"{DOCKER_SOCK} /containers/{SAFE}/json"
    inspect = json.loads(fake.http[inspect_key])
    inspect["Args"] += SECRET_ARGS.split()
    fake.http[inspect_key] = json.dumps(inspect)
    fake.proc(2003, f"VLLM::Worker_TP0 {SECRET_ARGS}", ppid=1, pgid=2003, sid=2003)
    put_in_container(fake, 2003, SHAPES["docker-systemd"].format(c=SAFE), nspid=(2003, 11))
    snap = tmp_path / "story.json"
    snap.write_text(json.dumps(fake.snapshot()))
    outputs = {
        " ".join(args): run_cli(*args)
        for args in (
            ("doctor", "--snapshot", str(snap)),
            ("doctor", "--snapshot", str(snap), "--json"),
            ("doctor", "--snapshot", str(snap), "--brief"),
            ("clean", "--snapshot", str(snap)),
            ("clean", "--snapshot", str(snap), "--json"),
        )
    }
    doc = json.loads(outputs[f"doctor --snapshot {snap} --json"].stdout)
    init = next(c for c in doc["checks"] if c["name"] == "container_init")
    pid1 = {e["container"]["name"]: e["pid1_command"] for e in init["evidence"]}
    assert pid1["vllm-safe"].startswith(f"accelhost run -- vllm serve /m --api-key {REDACTED}")
    plan = json.loads(outputs[f"clean --snapshot {snap} --json"].stdout)
    assert [a["container"]["containers"][0]["name"] for a in plan["actions"][:1]] == ["vllm-safe"]
    leaks = {k: _leaks(r.stdout + r.stderr) for k, r in outputs.items()}
    assert {k: v for k, v in leaks.items() if v} == {}


def test_run_names_a_dead_engine_without_its_secrets() -> None:
    """`accelhost run --fail-on-exit`: its log line names the engine that died, matched by
    the raw command line, shown redacted. Everything it starts ends by itself."""
    engine = f"(exec -a VLLM::EngineCore {PY} - {SECRET_ARGS} <<< 'import time; time.sleep(1)')"
    # anchored: the shell that starts it holds the same words until its exec
    watched = "^VLLM::EngineCore - --api-key sk-TEST"
    res = run_cli("run", "--fail-on-exit", watched, "--", "bash", "-c", f"{engine} & sleep 60")
    assert res.returncode == 1, res.stderr
    assert f"VLLM::EngineCore - --api-key {REDACTED}" in res.stderr, res.stderr
    assert "exited while the command was running" in res.stderr
    assert _leaks(res.stdout + res.stderr) == []


def test_redaction_rules_for_output() -> None:
    cmd = "VLLM::EngineCore --api-key sk-1 --hf-token=hf_2 HF_TOKEN=hf_3 https://u:p4@h/x"
    assert redact_text(cmd) == (
        f"VLLM::EngineCore --api-key {REDACTED} --hf-token={REDACTED} HF_TOKEN={REDACTED} "
        f"https://u:{REDACTED}@h/x"
    )
    assert redact_text(redact_text(cmd)) == redact_text(cmd)  # redacting twice is harmless
    for kept in (
        "vllm serve m --port 8000 --no-key-check",
        "shmid 32768 key 0x5a000000 2.0 GiB",
        "https://hub.example/m git+ssh://git@github.com/x",
        "/dev/shm/psm_3f9a1c2e",
    ):
        assert redact_text(kept) == kept
    doc = {"pid": 7, "cmdline": "x --token t1", "parent": {"cmdline": "OPENAI_API_KEY=sk-2"}}
    assert redact_values({**doc, "list": [doc["cmdline"]]}) == {
        "pid": 7,
        "cmdline": f"x --token {REDACTED}",
        "parent": {"cmdline": f"OPENAI_API_KEY={REDACTED}"},
        "list": [f"x --token {REDACTED}"],
    }


def test_matching_still_reads_the_raw_command_line() -> None:
    """An engine pattern written against a secret-looking option still matches: only what
    is shown is redacted."""
    from hygiene_fakes import FakeHost

    from accelhost.hygiene import read_facts, run_checks

    fake = FakeHost()
    fake.proc(50, "my-engine --api-key sk-TESTSECRET", ppid=1, pgid=50, sid=50)
    opts = HygieneOptions(catalog=build_catalog(children=(r"--api-key sk-TEST",)))
    orphans = run_checks(read_facts(fake.host(), opts), opts).get("orphan_engines")
    assert orphans is not None and orphans.status == "FAIL"
    assert orphans.evidence[0]["cmdline"] == f"my-engine --api-key {REDACTED}"
