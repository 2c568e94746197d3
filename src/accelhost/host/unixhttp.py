"""A small HTTP GET over a unix socket: how the host door asks a container runtime.

Docker's and Podman's APIs answer on a unix socket (/var/run/docker.sock,
/run/podman/podman.sock). A doctor must never hang on them: a wedged daemon, a socket left
by a dead one, or something else listening there would otherwise stop every check. So one
request has a hard deadline for connect and read together (`TIMEOUT_S`), the answer is
bounded in size (`MAX_ANSWER_BYTES`), and anything but a complete `200` answer is `None`.
HTTP/1.0 asks the server to close the connection at the end (no keep-alive); a chunked
answer (HTTP/1.1 servers may still send one) is decoded.
"""

from __future__ import annotations

import socket
import time

TIMEOUT_S = 1.0
# The largest answer kept: `containers/json?all=1` of a few thousand containers, or an
# hour of events, fits in a few MiB; anything larger is not a runtime talking.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
_MAX_HEADER_BYTES = 64 * 1024


def unix_http_get(
    socket_path: str, path: str, timeout_s: float = TIMEOUT_S, max_bytes: int = MAX_ANSWER_BYTES
) -> str | None:
    """The body of `GET path` on the unix socket, or None (absent, slow, refused, not 200,
    garbled, too large). Never raises, never takes longer than about `timeout_s`."""
    if not path.startswith("/") or any(c in path for c in "\r\n "):
        return None
    deadline = time.monotonic() + timeout_s
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(socket_path)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            request = f"GET {path} HTTP/1.0\r\nHost: localhost\r\nAccept: application/json\r\n\r\n"
            sock.sendall(request.encode("ascii"))
            raw = _read_all(sock, deadline, max_bytes + _MAX_HEADER_BYTES)
    except (OSError, ValueError):  # socket.timeout is an OSError
        return None
    body = None if raw is None else parse_http_answer(raw)
    if body is None or len(body) > max_bytes:
        return None
    return body.decode("utf-8", "replace")


def _read_all(sock: socket.socket, deadline: float, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)


def parse_http_answer(raw: bytes) -> bytes | None:
    """The body of a complete `200` HTTP answer (pure); None for anything else."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep or len(head) > _MAX_HEADER_BYTES:
        return None
    lines = head.split(b"\r\n")
    status = lines[0].split(None, 2)
    if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or status[1] != b"200":
        return None
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            return None
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        return _dechunk(body)
    length = headers.get(b"content-length")
    if length is not None:
        if not length.isdigit() or int(length) > len(body):
            return None  # cut short: never judge on half an answer
        return body[: int(length)]
    return body


def _dechunk(body: bytes) -> bytes | None:
    out: list[bytes] = []
    pos = 0
    while (end := body.find(b"\r\n", pos)) >= 0:
        try:
            size = int(body[pos:end].split(b";", 1)[0].strip(), 16)
        except ValueError:
            return None
        start = end + 2
        if size == 0:
            return b"".join(out)
        if size < 0 or start + size > len(body):
            return None
        out.append(body[start : start + size])
        pos = start + size + 2
    return None
