"""An mlx_lm.server for the runtime tests, started as a user would start it (loopback, a
free port, stopped afterwards even when a test fails), and the process-table check that
the runner's own servers are gone. `conftest.py` makes `user_server` the `server` fixture.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

TINY = Path(__file__).resolve().parents[1] / "runner" / "models" / "tiny"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_pids(checkpoint: Path = TINY) -> set[int]:
    """Live mlx_lm.server processes the runner started on the checkpoint (it passes
    --prompt-concurrency, which `user_server` does not), from the process table."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (
            state != "Z"
            and any(b"mlx_lm" in a for a in argv)
            and b"--prompt-concurrency" in argv
            and str(checkpoint).encode() in argv
        ):
            pids.add(int(entry.name))
    return pids


def wait_healthy(port: int, proc: subprocess.Popen, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "mlx_lm.server exited before answering"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        try:
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.1)
    raise AssertionError("mlx_lm.server did not answer /health")


@contextmanager
def user_server() -> Iterator[tuple[str, int]]:
    """An mlx_lm.server started outside the runner, as a user would: (base_url, pid)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlx_lm",
            "server",
            "--model",
            str(TINY),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "WARNING",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    try:
        wait_healthy(port, proc)
        yield f"http://127.0.0.1:{port}/v1", proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
