"""Engine: continuous batching over one MLX model, one forward pass committed per `step()`.

- step() reads as the loop it is: take the pass queued by the previous step (or admit,
  plan and launch one), queue the pass after it when its inputs follow from this one's
  outputs (launch.py), wait for the pass, commit each row's tokens verifying its drafts
  (verify.py), have the drafter propose the next pass's drafts (k as the launcher
  decided; block drafting builds the next verify pass on them meanwhile, verify_ahead.py),
  retire finished rows (scheduler.py), let the draft policy learn, and emit the
  pass event.
- A pass event's duration is the wall time of the step that committed it, so a run's
  pass durations add up to its time in step().
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import mlx.core as mx
import numpy as np

from . import checkpoint as ckpt
from .cache import BlockPool
from .config import EngineConfig, ModelArgs
from .drafting.draft_policy import DraftPolicy
from .drafting.drafters import make_drafter
from .drafting.verify import commit_pass
from .events import Collected, Event, EventSink, PassEvent, RequestEvent
from .forward import CompiledPasses, Forward
from .launch import Launcher
from .model import Model
from .passes import Launched
from .prefix_cache import PrefixCache
from .scheduler import PassPlan, Scheduler, retire_finished
from .sequence import Sequence
from .shelf import Shelf
from .verify_ahead import draft_next
from .warmup import warm_engine

DTYPES = {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}


class Engine:
    def __init__(
        self,
        model: Model,
        args: ModelArgs,
        config: EngineConfig,
        tokenizer,
        checkpoint_dir: Path,
        eos: tuple[int, ...] = (),
        sink: Optional[EventSink] = None,
        passes: Optional[CompiledPasses] = None,
    ):
        """passes: the model's compiled functions when shared with other engines (shelf.py)."""
        self.model, self.args, self.config, self.tokenizer = model, args, config, tokenizer
        self.checkpoint_dir, self.sink, self.eos = checkpoint_dir, sink, frozenset(eos)
        self.pool = BlockPool(
            args,
            config.kv_block_size,
            DTYPES[config.dtype],
            with_mtp=config.mtp_layer,
            with_indexer=config.index_topk > 0,
        )
        self.prefix = PrefixCache(self.pool, config.prefix_cache_bytes)
        self.scheduler = Scheduler(
            config.max_batch_size,
            config.prefill_chunk,
            self.pool,
            self.prefix,
            config.max_pass_tokens,
            config.prefill_hold,
        )
        self.forward = Forward(model, self.pool, config.index_topk, config.compile, passes)
        self.drafter = make_drafter(
            config, self.forward, self.pool, self.scheduler.ensure_blocks, checkpoint_dir
        )
        prior = self.drafter.prior_acceptance if self.drafter is not None else ()
        self.policy = DraftPolicy(
            config.draft_policy, config.draft_max_width, config.draft_tokens, prior, config.prefill_hold > 0
        )
        self.launcher = Launcher(self.forward, self.scheduler, self.drafter, self.policy, config)
        self._next_id = 0
        self._pass_index = 0
        self._draft_reason = ""  # why the next pass's rows carry what they carry (adaptive)
        self._sha256: Optional[str] = None
        self._queued: Optional[Launched] = None  # a pass launched ahead, not yet committed
        self.tree_leaves_landed = 0  # passes whose draft tree kept a leaf beyond its chain

    # ---- construction -------------------------------------------------------------
    @classmethod
    def from_pretrained(
        cls, path: str | Path, sink: Optional[EventSink] = None, shelf: Optional[Shelf] = None, **knobs
    ) -> "Engine":
        """shelf: take the model, and its compiled functions, from there (shared with the
        shelf's other engines of the same model)."""
        config = EngineConfig.from_kwargs(**knobs)
        directory = ckpt.resolve_checkpoint(path)
        args = ckpt.read_args(directory)
        ckpt.check_knobs(directory, args, config)
        which = dict(
            with_mtp=config.mtp_layer, with_indexer=config.index_topk > 0, dtype=DTYPES[config.dtype]
        )
        passes = shelf.load(directory, args, **which) if shelf is not None else None
        model = passes.model if passes is not None else ckpt.load_model(directory, args, **which)
        tokenizer = ckpt.load_tokenizer(directory)
        eos = ckpt.eos_ids(directory, args, tokenizer)
        return cls(model, args, config, tokenizer, directory, eos, sink, passes)

    @classmethod
    def check_knobs(cls, path: str | Path, **knobs) -> EngineConfig:
        """Validate knobs against a checkpoint without loading its weights."""
        config = EngineConfig.from_kwargs(**knobs)
        directory = ckpt.resolve_checkpoint(path)
        ckpt.check_knobs(directory, ckpt.read_args(directory), config)
        return config

    def checkpoint_sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = ckpt.checkpoint_sha256(self.checkpoint_dir)
        return self._sha256

    # ---- requests -----------------------------------------------------------------
    def add_request(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: Optional[int] = None,
    ) -> int:
        if not prompt_ids:
            raise ValueError("prompt_ids: a request needs at least one prompt token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: must be >= 1, got {max_new_tokens}")
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"temperature must be >= 0 and top_p in (0, 1], got {temperature}, {top_p}")
        if len(prompt_ids) + max_new_tokens > self.args.max_position_embeddings:
            raise ValueError(
                f"prompt_ids + max_new_tokens: {len(prompt_ids)} + {max_new_tokens} exceeds the "
                f"model's max_position_embeddings ({self.args.max_position_embeddings})"
            )
        bad = [t for t in prompt_ids if not 0 <= t < self.args.vocab_size]
        if bad:
            raise ValueError(
                f"prompt_ids: token ids {bad[:5]} outside the vocabulary (0..{self.args.vocab_size - 1})"
            )
        rid = self._next_id
        self._next_id += 1
        rng = np.random.default_rng([self.config.seed, rid if seed is None else seed])
        self.scheduler.add(
            Sequence(
                rid,
                list(prompt_ids),
                max_new_tokens,
                float(temperature),
                float(top_p),
                rng,
                time.perf_counter_ns(),
            )
        )
        return rid

    @property
    def passes_queued(self) -> int:
        """Passes launched ahead of the previous pass's commit (pipelining at work)."""
        return self.launcher.passes_queued

    def has_work(self) -> bool:
        return bool(self.scheduler.waiting or self.scheduler.running or self._queued)

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int = 32,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: Optional[int] = None,
    ) -> list[list[int]]:
        ids = [
            self.add_request(p, max_new_tokens, temperature, top_p, None if seed is None else seed + i)
            for i, p in enumerate(prompts)
        ]
        done: dict[int, list[int]] = {}
        while self.has_work():
            for ev in self.step():
                done[ev.request_id] = list(ev.tokens)
        return [done[i] for i in ids]

    def collect(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: Optional[int] = None,
    ) -> Collected:
        """generate(...) with every event it sends collected (tests, benches); the engine's
        own sink is put back afterwards."""
        events: list[Event] = []
        saved, self.sink = self.sink, events.append
        try:
            outputs = self.generate(prompts, max_new_tokens, temperature, top_p, seed)
        finally:
            self.sink = saved
        return Collected(
            outputs,
            [e for e in events if isinstance(e, PassEvent)],
            [e for e in events if isinstance(e, RequestEvent)],
        )

    def warmup(self, max_context: int) -> int:
        """Compile every decode shape that contexts up to `max_context` tokens can hit and,
        under the adaptive policy, time each draft length's passes (warmup.py). Returns
        shapes traced."""
        return warm_engine(self, max_context)

    def clear_prefix_cache(self) -> None:
        """Drop every cached prefix block (a cold start for the next measurement)."""
        self.prefix.clear()

    def state_bytes(self) -> int:
        """Per-row state held by live rows: blocks they reference (KV, indexer keys, MTP
        KV) and the drafter's own (a lazy MTP backlog, sampling drafts' distributions)."""
        return sum(self._row_bytes(s) for s in self.scheduler.running)

    def _row_bytes(self, seq: Sequence) -> int:
        own = self.drafter.row_bytes(seq) if self.drafter is not None else 0
        return len(seq.blocks) * self.pool.block_bytes + own

    # ---- one pass -----------------------------------------------------------------
    def step(self) -> list[RequestEvent]:
        """Commit one pass (launching it first unless it is already queued); before
        waiting for it, queue the following pass when its inputs follow from this one."""
        t0 = time.perf_counter_ns()
        cur = self._take_or_launch()
        if cur is None:
            return []
        self._queued = self.launcher.launch_ahead(cur, self._pass_index + 1)
        reason = self._draft_reason  # decided when cur's drafts were made
        out = cur.wait()  # blocks until cur has run
        done = commit_pass(cur, out, self.eos, self.drafter, self.pool.move_position)
        if self.drafter is not None:
            self._draft_reason, built = draft_next(self.launcher, cur, out, self._queued is None)
            self._queued = self._queued or built
        self.tree_leaves_landed += done.branched
        # Read before retiring, which frees finished rows' blocks: the event reports what
        # every live row held, the rows the pass finished and those it left out included.
        row_bytes = [self._row_bytes(s) for s in self._live_rows(cur.plan)]
        finished = retire_finished(cur.plan.rows, self.prefix, self.scheduler, self.drafter)
        self._drop_queued_if_idle()
        self.prefix.evict_to_budget()
        duration = time.perf_counter_ns() - t0
        self.policy.record(
            cur.branch,
            duration,
            done.accepted_lengths,
            drafts_next=cur.drafts_next or 0,
            ahead=cur.ahead,
            queued=None if self._queued is None else self._queued.branch,
            outcomes=done.outcomes,
            drafter_lengths=done.drafter_lengths,
        )
        self._emit(PassEvent.of(self._pass_index, cur.plan, t0, duration, done, row_bytes, reason))
        self._pass_index += 1
        for ev in finished:
            self._emit(ev)
        return finished

    def _take_or_launch(self) -> Optional[Launched]:
        """The pass queued by the previous step, else one planned now (None: no work)."""
        cur, self._queued = self._queued, None
        if cur is None:
            self.scheduler.admit(self._pass_index)
            if self.scheduler.running:
                cur = self.launcher.launch()
        return cur

    def _drop_queued_if_idle(self) -> None:
        """A pass launched ahead whose rows this pass all finished (EOS, unforeseeable when
        it was queued) commits nothing: it is no pass of the run. Wait for it here, so its
        device time lands in this step's duration, and drop it."""
        if self._queued is not None and not self._queued.live:
            self._queued.wait()
            self._queued = None

    def _live_rows(self, plan: PassPlan) -> list[Sequence]:
        """The pass's rows, and the running rows the token budget left out of it (a prefill
        waiting for room: it holds blocks all the same)."""
        running = self.scheduler.running
        if len(running) == len(plan.rows):
            return plan.rows
        inside = set(plan.rows)
        return plan.rows + [s for s in running if s not in inside]

    def _emit(self, event) -> None:
        if self.sink is not None:
            self.sink(event)
