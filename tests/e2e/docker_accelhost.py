"""accelhost's commands against the suite's containers, and what their answers say of them.

The commands run on the host as a user runs them, with `DOCKER_HOST` naming the suite's
daemon (the only way accelhost can reach a daemon whose socket is not the default one).

What a container-aware answer must hold (a `container` object in every process's
evidence, `left_by` on leftovers, the `container_init` check, `--container`) is read here;
an answer without it fails with `NotWiredYet`, which names the missing piece.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

from docker_daemon import Container, Daemon
from engine import accelhost_argv
from hostcli import Answer, walk


class NotWiredYet(AssertionError):
    """An answer lacks a piece of container attribution (a failure that says which)."""


def accelhost_for(daemon: Daemon, *args: str, timeout: float = 300) -> Answer:
    """`accelhost ARGS` on the host, reaching `daemon` through DOCKER_HOST; `--json` read back."""
    env = {**os.environ, "DOCKER_HOST": daemon.host}
    done = subprocess.run(
        accelhost_argv(*args), capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    data = json.loads(done.stdout) if "--json" in args and done.stdout.strip() else None
    return Answer(done.returncode, data, done.stdout, done.stderr)


def doctor(daemon: Daemon, *args: str) -> Answer:
    """`doctor --json --shm-min-age 0` (files just left count at once) and `args`."""
    return accelhost_for(daemon, "doctor", "--json", "--shm-min-age", "0", *args)


def clean_plan(daemon: Daemon, *args: str) -> Answer:
    """What a plain `clean --yes` would do: the dry run, `--json`, files just left count."""
    return accelhost_for(daemon, "clean", "--json", "--shm-min-age", "0", *args)


def clean_files(daemon: Daemon, paths: set[str], journal: str, *scope: str) -> Answer:
    """`clean --yes --only shm` limited to `paths` (and `scope`, e.g. `--container NAME`)."""
    limits = [a for p in sorted(paths) for a in ("--path", p)]
    return accelhost_for(
        daemon, "clean", "--yes", "--json", "--only", "shm", "--shm-min-age", "0",
        "--journal", journal, *scope, *limits,
    )  # fmt: skip


def has_option(command: str, option: str) -> bool:
    """Whether `accelhost COMMAND --help` offers `option` (e.g. clean's `--container`)."""
    done = subprocess.run(
        accelhost_argv(command, "--help"), capture_output=True, text=True, check=False, timeout=60
    )
    return f"{option} " in done.stdout or f"{option}\n" in done.stdout


# -- reading the answers -----------------------------------------------------------------


def check_named(report: dict[str, Any], name: str) -> dict[str, Any]:
    """The check called `name`; NotWiredYet when doctor has none (a check still to add)."""
    found = [c for c in report["checks"] if c["name"] == name]
    if not found:
        raise NotWiredYet(
            f"doctor has no {name} check yet: {[c['name'] for c in report['checks']]}"
        )
    assert len(found) == 1, f"{len(found)} {name} checks"
    return found[0]


def evidence_of_path(report: Any, path: str) -> list[dict[str, Any]]:
    """Every evidence item that names `path` (a leaked /dev/shm file, its size, its age)."""
    return [d for d in walk(report) if d.get("path") == path]


def evidence_of_pid(report: Any, pid: int) -> list[dict[str, Any]]:
    return [d for d in walk(report) if d.get("pid") == pid]


def container_of(item: dict[str, Any], what: str) -> dict[str, Any]:
    """The `container` object of a process's evidence item; NotWiredYet while it has none."""
    if "container" not in item:
        raise NotWiredYet(f"{what}: its evidence has no 'container' object yet: {item}")
    found = item["container"]
    assert isinstance(found, dict), f"{what}: named with no container: {item}"
    return found


def left_by_of(item: dict[str, Any], what: str) -> tuple[list[dict[str, Any]], bool]:
    """The containers a leftover's evidence says left it (`left_by`), and whether it says
    it cannot tell which (`ambiguous`); NotWiredYet while leftovers carry no `left_by`."""
    if "left_by" not in item:
        raise NotWiredYet(f"{what}: its evidence has no 'left_by' yet: {item}")
    left = item["left_by"]
    assert isinstance(left, dict) and left.get("containers"), (
        f"{what}: left by no container: {item}"
    )
    return list(left["containers"]), bool(left.get("ambiguous"))


def names(found: dict[str, Any], container: Container) -> bool:
    """Whether a `container` object is this container: its id (full or short) or its name."""
    cid = str(found.get("id") or "")
    name = str(found.get("name") or "").lstrip("/")
    by_id = len(cid) >= 12 and container.id.startswith(cid)
    return by_id or name == container.name


def containers_named(report: Any) -> Iterator[dict[str, Any]]:
    """Every `container` object in an answer."""
    for item in walk(report):
        found = item.get("container")
        if isinstance(found, dict):
            yield found


def leftover_items(report: Any, path: str) -> list[dict[str, Any]]:
    """The evidence items of a leftover file (`kind: shm_file`) at `path`."""
    return [d for d in evidence_of_path(report, path) if d.get("kind", "shm_file") == "shm_file"]


def assert_named_with(
    report: Any, paths: set[str], container: Container, what: str, *, alone: bool = True
) -> None:
    """Each of `paths` is in the report, and its evidence says `container` left it: as the
    only candidate (`alone`), or among candidates the report says it cannot tell apart."""
    for path in sorted(paths):
        items = leftover_items(report, path)
        assert items, f"{what}: {path} is not in the answer"
        for item in items:
            said = [c.get("summary") for c in report.get("checks", [])]
            found, ambiguous = left_by_of(item, f"{what}: {path} (doctor said: {said})")
            assert any(names(c, container) for c in found), (
                f"{what}: {path} left by {found}, not {container.name} ({container.id[:12]})"
            )
            assert not alone or (len(found) == 1 and not ambiguous), f"{what}: {path}: {item}"
