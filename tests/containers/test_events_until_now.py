"""A container removed a moment ago (`docker rm -f` just returned) is named at once.

The stand-in daemon answers `GET /events` as Docker does: the events up to `until` (to the
nanosecond, a fraction allowed), the answer closed at once when `until` has passed and only
then when it lies ahead. Before, the look asked up to a whole second behind a clock of
boot time + uptime, so a leftover of a container removed in the last second or two was
named by nobody, and named three seconds later by the same doctor."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

from accelhost.containers.docker_api import LIST_PATH
from accelhost.containers.reader import read_containers
from accelhost.host.live import LiveHost
from accelhost.host.record import RecordingHost
from accelhost.host.snapshot import SnapshotHost
from container_hosts import cid, event
from unix_server import unix_server

GONE_ID = cid(0x5A)


def _docker(events: list[dict[str, Any]], asked: list[str]):  # type: ignore[no-untyped-def]
    def reply(conn: Any, request: bytes) -> None:
        target = request.split(b" ", 2)[1].decode()
        asked.append(target)
        if target.startswith("/events?"):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
            until = float(query["until"][0])
            time.sleep(max(0.0, min(until - time.time(), 2.0)))  # a future until: held open
            body = "".join(json.dumps(e) + "\n" for e in events if e["timeNano"] / 1e9 <= until)
        elif target == LIST_PATH:
            body = "[]"
        else:
            conn.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        data = body.encode()
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))

    return reply


def test_a_container_removed_a_moment_ago_is_named_and_the_recording_replays_it() -> None:
    removed = time.time() - 0.2  # `docker rm -f` returned 0.2 s ago
    events = [
        event("start", GONE_ID, "vllm-rmf", removed - 60),
        event("die", GONE_ID, "vllm-rmf", removed - 0.1),
        event("destroy", GONE_ID, "vllm-rmf", removed),
    ]
    asked: list[str] = []
    with unix_server(_docker(events, asked)) as sock:
        recording = RecordingHost(LiveHost())
        view = read_containers(recording, {}, removed + 0.2, sockets=[sock])
    gone = view.containers.get(GONE_ID)
    assert gone is not None and gone.name == "vllm-rmf", (view.containers, asked)
    # the look asked up to the host's clock, and the recording keeps that clock ...
    snapshot = recording.to_snapshot()
    assert isinstance(snapshot["clock"], float) and snapshot["clock"] >= removed
    # ... so its replay asks the same question and names the same container
    replayed = read_containers(SnapshotHost(snapshot), {}, removed + 0.2, sockets=[sock])
    again = replayed.containers.get(GONE_ID)
    assert again is not None and again.name == "vllm-rmf", replayed.containers
