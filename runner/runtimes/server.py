"""An `mlx_lm.server` the runner starts for one arm, measured as an `openai` runtime.

The server runs the arm's checkpoint on a free 127.0.0.1 port with the arm's knobs as its
flags (mlx-lm 0.32's names):

    max_batch_size      -> --decode-concurrency N and --prompt-concurrency N (mlx-lm
                           decodes max(decode, prompt) rows at once, so both are the ceiling)
    prefill_chunk       -> --prefill-step-size N (default mlx-lm's own, 2048)
    prefix_cache_bytes  -> 0 (the default, as for our engine): --prompt-cache-size 0, no
                           reuse, so no cell is served from an earlier cell's prompts;
                           N > 0: --prompt-cache-bytes N (the cache then lives across cells)
    draft_model         -> --draft-model DIR, num_draft_tokens -> --num-draft-tokens N
                           (with a draft model mlx_lm.server serves one request at a time)

It starts in its own process group, with its output in a temporary log file (not a pipe
the runner could forget to drain), HF_HUB_OFFLINE=1 (nothing downloads), --log-level
WARNING (no log line per request on its clock), and on Linux a parent-death signal, so
even a runner killed outright takes it along. The runner waits until /health answers,
and stop() (also registered with atexit) ends the whole group: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import atexit
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .fair import banned_eos_bias, package_version
from .knobs import draft_path
from .openai import OpenAI

STARTUP_SECONDS = 120.0  # loading a checkpoint; a server that takes longer has failed
STOP_SECONDS = 5.0
# Runs in the server's process: die with the runner (Linux prctl PR_SET_PDEATHSIG), and
# exit at once if the runner is already gone, then hand over to mlx_lm.server's main().
SHIM = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
except (AttributeError, OSError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
sys.argv = ["mlx_lm.server"] + sys.argv[2:]
from mlx_lm.server import main
main()
"""


_ACCESS_LINE = re.compile(r'^\S+ - - \[[^\]]*\] "')  # http.server's per-request log line


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_flags(knobs: dict) -> list[str]:
    n = str(knobs["max_batch_size"])
    flags = [
        "--decode-concurrency",
        n,
        "--prompt-concurrency",
        n,
        "--prefill-step-size",
        str(knobs["prefill_chunk"]),
    ]
    cache = int(knobs.get("prefix_cache_bytes", 0))
    flags += ["--prompt-cache-size", "0"] if cache == 0 else ["--prompt-cache-bytes", str(cache)]
    if knobs.get("draft_model"):
        flags += [
            "--draft-model",
            str(draft_path(knobs["draft_model"])),
            "--num-draft-tokens",
            str(knobs["num_draft_tokens"]),
        ]
    return flags


EXIT_GRACE_S = 2.0


class MlxLmServer(OpenAI):
    name = "mlx-lm-server"
    runtime_version = package_version("mlx-lm")  # the package the runner starts it from

    def length_fields(self, max_new_tokens: int) -> dict:
        # mlx_lm.server takes no ignore_eos or min_tokens: its end-of-sequence ids are banned.
        return banned_eos_bias(self._eos)

    def server_version(self) -> str | None:
        return self._fingerprint  # it has no /version; its answers carry system_fingerprint

    def __init__(self, knobs: dict, checkpoint: Path):
        self.proc: subprocess.Popen | None = None
        port = free_port()
        super().__init__({**knobs, "base_url": f"http://127.0.0.1:{port}/v1"}, checkpoint)
        self.knobs = dict(knobs)  # stored without the port, which changes every start
        self._log = tempfile.NamedTemporaryFile(prefix="bothrows-mlx-lm-server-", suffix=".log", delete=False)
        command = [
            sys.executable,
            "-c",
            SHIM,
            str(os.getpid()),
            "--model",
            str(checkpoint),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "WARNING",
            *server_flags(knobs),
        ]
        atexit.register(self.stop)
        try:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1"},
            )
            self._wait_until_ready(port)
        except OSError as e:
            self.stop()
            raise self.fault(f"could not be started ({e.strerror or e})") from None
        except BaseException:
            self.stop()
            raise

    def _wait_until_ready(self, port: int) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self.fault("did not start")
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
            try:
                conn.request("GET", "/health")
                status = conn.getresponse().status
            except (OSError, http.client.HTTPException):
                status = None
            finally:
                conn.close()
            if status == 200:
                return
            if status is not None:  # up, but its generation thread is gone: the model did not load
                last = self._last_log_line()
                raise self.fault(
                    f"answers /health with HTTP {status}: its model did not load"
                    + (f" (its last line: {last})" if last else "")
                )
            time.sleep(0.1)
        raise self.fault(f"did not answer /health within {STARTUP_SECONDS:g} s")

    def fault(self, what: str):
        if self.proc is not None:
            try:  # a dying server resets its connections a moment before it exits
                self.proc.wait(timeout=EXIT_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None and self.proc.poll() is not None:
            code = self.proc.returncode
            what += f" (the server the runner started exited with code {code}"
            # An error exit's last line says why; a signal (negative code) is the story itself.
            last = self._last_log_line() if code >= 0 else ""
            what += f"; its last line: {last})" if last else ")"
        return super().fault(what)

    def begin_cell(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise self.fault("is not running")
        super().begin_cell()

    def _last_log_line(self) -> str:
        if self._log is None:
            return ""
        try:
            with open(self._log.name, "rb") as f:
                f.seek(max(0, os.path.getsize(self._log.name) - 4096))
                lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines()]
        except OSError:
            return ""
        said = [ln for ln in lines if ln and not _ACCESS_LINE.match(ln)]  # not request logs
        return said[-1][:200] if said else ""

    def stop(self) -> None:
        super().stop()
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, STOP_SECONDS), (signal.SIGKILL, None)):
                try:
                    os.killpg(proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        log, self._log = getattr(self, "_log", None), None
        if log is not None:
            log.close()
            Path(log.name).unlink(missing_ok=True)
        atexit.unregister(self.stop)
