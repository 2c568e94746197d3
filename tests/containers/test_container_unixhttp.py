"""The host door's GET on a unix socket: an answer when a server answers, None (within the
one-second limit) when the socket is absent, silent, answers garbage or too much; and the
answer is recorded in a snapshot and replayed from it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelhost.host.live import LiveHost
from accelhost.host.once import read_once
from accelhost.host.record import RecordingHost
from accelhost.host.snapshot import SnapshotHost
from accelhost.host.unixhttp import parse_http_answer, unix_http_get
from unix_server import unix_server

Reply = Callable[[socket.socket], None]


@pytest.fixture
def server() -> Iterator[Callable[[Reply], str]]:
    """Start a unix-socket server answering each connection with `reply`; stopped after."""
    with contextlib.ExitStack() as stack:

        def start(reply: Reply) -> str:
            return stack.enter_context(unix_server(lambda conn, _request: reply(conn)))

        yield start


def _answer(body: bytes, head: str = "HTTP/1.0 200 OK\r\nContent-Type: application/json") -> Reply:
    return lambda conn: conn.sendall(
        f"{head}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    )


def test_a_server_that_answers_gives_its_body(server: Callable[[Reply], str]) -> None:
    body = json.dumps([{"Id": "a" * 64}]).encode()
    path = server(_answer(body))
    assert unix_http_get(path, "/containers/json?all=1") == body.decode()
    assert LiveHost().http_get(path, "/containers/json?all=1") == body.decode()


def test_a_chunked_answer_is_decoded(server: Callable[[Reply], str]) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    path = server(lambda conn: conn.sendall(raw))
    assert unix_http_get(path, "/events") == "hello world"


def test_an_absent_socket_is_none_at_once(tmp_path: Path) -> None:
    start = time.monotonic()
    assert unix_http_get(str(tmp_path / "none.sock"), "/containers/json") is None
    assert time.monotonic() - start < 0.5


def test_a_server_that_never_answers_is_none_within_the_limit(
    server: Callable[[Reply], str],
) -> None:
    path = server(lambda conn: time.sleep(2.5))
    start = time.monotonic()
    assert unix_http_get(path, "/containers/json?all=1") is None
    assert time.monotonic() - start < 1.5


def test_a_server_that_trickles_forever_is_none_within_the_limit(
    server: Callable[[Reply], str],
) -> None:
    def trickle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
        for _ in range(30):
            conn.sendall(b"[")
            time.sleep(0.1)

    path = server(trickle)
    start = time.monotonic()
    assert unix_http_get(path, "/events") is None
    assert time.monotonic() - start < 1.5


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\xffgarbage with no header end",
        b"HTTP/1.0 500 Internal Server Error\r\n\r\n{}",
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\nshort",  # cut short
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx",
        b"HTTP/1.0 200 OK\r\nno colon header\r\n\r\n{}",
    ],
)
def test_garbage_is_none(server: Callable[[Reply], str], raw: bytes) -> None:
    path = server(lambda conn: conn.sendall(raw))
    assert unix_http_get(path, "/containers/json") is None
    assert parse_http_answer(raw) is None


def test_an_answer_larger_than_the_bound_is_none(server: Callable[[Reply], str]) -> None:
    path = server(_answer(b"x" * 5000))
    assert unix_http_get(path, "/x", max_bytes=1000) is None
    assert unix_http_get(path, "/x", max_bytes=10000) == "x" * 5000


def test_paths_that_could_inject_a_header_are_refused(server: Callable[[Reply], str]) -> None:
    path = server(_answer(b"{}"))
    assert unix_http_get(path, "/x\r\nHost: evil") is None
    assert unix_http_get(path, "relative") is None


def test_an_answer_is_recorded_replayed_and_asked_once(server: Callable[[Reply], str]) -> None:
    calls = []

    def counted(conn: socket.socket) -> None:
        calls.append(1)
        _answer(b'{"ok": true}')(conn)

    path = server(counted)
    recorder = RecordingHost(LiveHost())
    once = read_once(recorder)
    assert once.http_get(path, "/info") == '{"ok": true}'
    assert once.http_get(path, "/info") == '{"ok": true}'
    assert once.http_get(path + ".absent", "/info") is None
    assert len(calls) == 1
    data = recorder.to_snapshot()
    assert data["http"] == {f"{path} /info": '{"ok": true}'}
    replay = SnapshotHost(json.loads(json.dumps(data)))
    assert replay.http_get(path, "/info") == '{"ok": true}'
    assert replay.http_get(path, "/other") is None
    assert os.path.exists(path)  # replay never touched the live socket's absence either way
