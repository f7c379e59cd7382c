"""Any OpenAI-compatible server at `base_url`, driven through streaming /v1/completions.

Prompts go as text: the workload's token ids decoded with the checkpoint's tokenizer (the
server tokenises them again, so its prompt count can differ by a token or so; the stored
counts are the server's usage figures, asked for with stream_options.include_usage).
Each request runs on its own thread (one HTTP connection each, as the closed-loop client
it stands for) and stamps every streamed chunk with perf_counter_ns as it arrives: a
chunk carrying text is a token; the chunk carrying finish_reason is the request's end.
When the text chunks do not match the server's completion count one to one (a token
that decodes to nothing sends no chunk), per-token times are None rather than guessed,
except for the stop token at the end, which sends no text by design and is timed by
the finishing chunk. Sampling seeds are sent only when temperature > 0 (mlx_lm.server
serves a seeded request on its own, unbatched). A server that cannot be reached is a
RuntimeFault naming the base_url (it costs the cell), and so is an HTTP 4xx answer (the
request is wrong, so every one would be); a request that fails while the server is there
(an HTTP 5xx, no answer or a stalled stream for read_timeout_s, a broken or malformed
stream) is a RequestFault: stored as an errored request, and the cell goes on.
"""

from __future__ import annotations

import http.client
import itertools
import json
import queue
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from tokenizers import Tokenizer

from .base import Finished, RequestFault, Runtime, RuntimeFault
from .fair import banned_eos_bias, eos_token_ids, exact_length_fields, probe_server_version

POLL_SECONDS = 1.0  # how long poll() waits for a finish before handing control back (at most)


class OpenAI(Runtime):
    name = "openai"

    def __init__(self, knobs: dict, checkpoint: Path):
        super().__init__(knobs, checkpoint)
        self.base_url = knobs["base_url"]
        self.read_timeout = float(knobs["read_timeout_s"])
        parts = urlsplit(self.base_url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._path = (parts.path.rstrip("/") or "") + "/completions"
        self._tokenizer = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
        self._texts: dict[tuple[int, ...], str] = {}
        self._ids = itertools.count()
        self._done: queue.Queue = queue.Queue()
        self._epoch = 0  # results of an abandoned cell are dropped
        self._in_flight: set[int] = set()
        self._fingerprint: str | None = None  # the system_fingerprint its answers carry
        self._reported: list[str | None] = []  # GET /version's answer, once asked
        self._eos = eos_token_ids(checkpoint)

    def length_fields(self, max_new_tokens: int) -> dict:
        """Fields asking for exactly max_new_tokens (fair.py): ignore_eos and min_tokens, and
        the checkpoint's end-of-sequence ids banned by logit_bias for a server that takes
        neither (mlx_lm.server); none with exact_length = false."""
        if not self.knobs.get("exact_length", True):
            return {}
        return {**exact_length_fields(max_new_tokens), **banned_eos_bias(self._eos)}

    def server_version(self) -> str | None:
        if not self._reported:  # the server root's /version (vLLM's), asked once
            root = self._path[: -len("/completions")]
            root = root[: -len("/v1")] if root.endswith("/v1") else root
            self._reported.append(probe_server_version(self._host, self._port, self._https, root))
        return self._reported[0] or self._fingerprint

    def where(self) -> str:
        return f"{self.name} at {self.base_url}"

    def fault(self, what: str) -> RuntimeFault:
        return RuntimeFault(f"{self.where()}: {what}")

    # -- the cell protocol -------------------------------------------------------
    def begin_cell(self) -> None:
        self._abandon()

    def _abandon(self) -> None:
        self._epoch += 1
        self._in_flight.clear()

    def submit(self, prompt, max_new_tokens, temperature, seed) -> int:
        key = tuple(prompt)
        text = self._texts.get(key)
        if text is None:
            text = self._texts[key] = self._tokenizer.decode(list(prompt), skip_special_tokens=False)
        body = {
            "prompt": text,
            "max_tokens": int(max_new_tokens),
            "temperature": float(temperature),
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.length_fields(max_new_tokens),
        }
        if self.knobs.get("served_model"):
            body["model"] = self.knobs["served_model"]
        if temperature > 0:
            body["seed"] = int(seed)
        handle = next(self._ids)
        self._in_flight.add(handle)
        arrival = time.perf_counter_ns()
        threading.Thread(
            target=self._run,
            args=(self._epoch, handle, json.dumps(body).encode(), arrival),
            daemon=True,
            name=f"bothrows-http-{handle}",
        ).start()
        return handle

    def busy(self) -> bool:
        return bool(self._in_flight)

    def poll(self, wait_s: float | None = None) -> list[Finished]:
        out: list[Finished] = []
        wait = POLL_SECONDS if wait_s is None else min(POLL_SECONDS, max(0.0, wait_s))
        try:  # the streams run on their threads: this only waits, so not past an arrival
            item = self._done.get(timeout=wait)
        except queue.Empty:
            return out
        while True:
            epoch, handle, result = item
            if epoch == self._epoch and handle in self._in_flight:
                self._in_flight.discard(handle)
                if isinstance(result, RuntimeFault):
                    self._abandon()  # the rest of this cell's requests no longer count
                    raise result
                out.append(result)
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return out

    def stop(self) -> None:
        self._abandon()

    # -- one request, on its own thread ------------------------------------------------
    def _run(self, epoch: int, handle: int, body: bytes, arrival: int) -> None:
        try:
            result = self._stream(handle, body, arrival)
        except RequestFault as e:  # the server is there: this request errored, the cell goes on
            result = Finished(handle, 0, 0, None, arrival, None, time.perf_counter_ns(), None, None, str(e))
        except RuntimeFault as e:
            result = e
        except Exception as e:  # noqa: BLE001 - a thread must hand every failure back
            result = self.fault(f"the request failed ({type(e).__name__}: {e})")
        self._done.put((epoch, handle, result))

    def request_fault(self, what: str) -> RequestFault:
        return RequestFault(f"{self.where()}: {what}")

    def _stream(self, handle: int, body: bytes, arrival: int) -> Finished:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = kind(self._host, self._port, timeout=self.read_timeout)
        try:
            try:
                conn.request(
                    "POST",
                    self._path,
                    body,
                    {"Content-Type": "application/json", "Accept": "text/event-stream"},
                )
                resp = conn.getresponse()
            except ConnectionRefusedError:
                raise self.fault("not reachable (connection refused)") from None
            except (socket.timeout, TimeoutError):
                raise self.request_fault(f"did not answer within {self.read_timeout:g} s") from None
            except (OSError, http.client.HTTPException) as e:
                raise self.fault(f"not reachable ({_why(e)})") from None
            if resp.status != 200:  # 4xx: the runner's request is wrong (a path, a field): no cell
                fault = self.request_fault if resp.status >= 500 else self.fault
                raise fault(f"answered HTTP {resp.status} {resp.reason}: {_snippet(resp)}")
            return self._read(handle, resp, arrival)
        finally:
            conn.close()

    def _read(self, handle: int, resp, arrival: int) -> Finished:
        times: list[int] = []
        finish_ns, reason, usage = None, None, None
        while True:
            try:
                line = resp.readline()
            except (socket.timeout, TimeoutError):
                raise self.request_fault(
                    f"stopped streaming: nothing for {self.read_timeout:g} s after {len(times)} tokens"
                ) from None
            except (OSError, http.client.HTTPException) as e:
                raise self.request_fault(f"the stream broke after {len(times)} tokens ({_why(e)})") from None
            now = time.perf_counter_ns()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators and ": keepalive" comments
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                raise self.request_fault(f"sent a stream line that is not JSON: {data[:80]!r}") from None
            if not isinstance(chunk, dict):
                raise self.request_fault(f"sent a stream line that is not a JSON object: {data[:80]!r}")
            if isinstance(chunk.get("system_fingerprint"), str):
                self._fingerprint = chunk["system_fingerprint"][:200]
            if chunk.get("error"):
                raise self.request_fault(f"reported an error mid-stream: {str(chunk['error'])[:200]}")
            for choice in chunk.get("choices") or []:
                if choice.get("text"):
                    times.append(now)
                if choice.get("finish_reason") is not None:
                    finish_ns, reason = now, choice["finish_reason"]
            usage = chunk.get("usage") or usage
        if finish_ns is None:
            raise self.request_fault(
                f"the stream ended before the request finished (after {len(times)} tokens)"
            )
        if not isinstance(usage, dict) or not all(
            isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens")
        ):
            raise self.request_fault(
                "sent no usage figures (the runner asks for stream_options.include_usage)"
            )
        n = usage["completion_tokens"]
        if len(times) == n - 1 and reason == "stop":
            times.append(finish_ns)  # the stop token sends no text: it ends the stream
        token_ns = tuple(times) if len(times) == n else None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        first = times[0] if times else finish_ns
        return Finished(
            handle,
            usage["prompt_tokens"],
            n,
            cached if isinstance(cached, int) else None,
            arrival,
            first,
            finish_ns,
            None,
            token_ns,
        )


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _snippet(resp) -> str:
    try:
        text = resp.read(300).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return "(no body)"
    return " ".join(text.split())[:200] or "(no body)"
