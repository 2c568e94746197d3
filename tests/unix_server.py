"""A test daemon on a unix socket of its own: the stand-in for a container runtime's API
socket (Docker's, Podman's) in the tests of the host door and of the doctor."""

from __future__ import annotations

import contextlib
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

# (connection, the request's first bytes) -> None: send an answer, or none at all
Reply = Callable[[socket.socket, bytes], None]


@contextlib.contextmanager
def unix_server(reply: Reply) -> Iterator[str]:
    """Serve each connection with `reply` until the block ends; yields the socket's path.

    AF_UNIX paths are limited to about 107 bytes, so the socket sits in a short private
    directory under /tmp, removed with it."""
    folder = Path(tempfile.mkdtemp(prefix="ahs", dir="/tmp"))
    path = folder / "d.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.settimeout(3)
                    reply(conn, conn.recv(4096))
                except OSError:
                    pass

    thread = threading.Thread(target=loop, daemon=True)
    try:
        srv.bind(str(path))
        srv.listen(16)
        srv.settimeout(0.1)
        thread.start()
        yield str(path)
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=5)
        srv.close()
        shutil.rmtree(folder, ignore_errors=True)
