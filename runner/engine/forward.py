"""The forward functions of a pass, optionally compiled with mx.compile.

`main` runs the target model over the pass's rows and returns float32 logits at the
requested positions plus what the drafter reads of every position (the final hidden
states, or with `feature_layers` the block drafter's features: those layers' states
concatenated); `mtp` runs the MTP layer over verified
(hidden, next token) pairs and returns the draft logits at each row's last pair;
`main_and_draft` runs both in one graph for greedy rows. All take the pool arrays as
explicit inputs and return them updated, so they are pure functions of their arguments
and safe to compile. Shapes are bucketed by layout.py.

The compiled functions hold a model's graph for every traced shape (about 1.5 MB a decode
shape on deep: most of an MTP engine's memory), and bind the model, never an engine's pool:
engines given the same `CompiledPasses` (engines of one model on a shelf, shelf.py) trace
each pass structure once between them.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Optional

import mlx.core as mx

from .cache import BlockPool, LayerKV
from .drafting.block_drafter import select_features
from .layers.attention import rope_table
from .layout import COMPILE_MAX_TOKENS, PassContext
from .model import Capture, Model


def _unpack(arrays, has_ik: tuple[bool, ...]) -> list[LayerKV]:
    out, i = [], 0
    for ik in has_ik:
        n = 2 if ik else 1
        out.append(LayerKV(*arrays[i : i + n]))
        i += n
    return out


def _pack(layers: list[LayerKV]) -> list[mx.array]:
    return [a for kv in layers for a in kv.arrays()]


def _ids(a: mx.array) -> mx.array:
    """Token ids as int32, the dtype the warm-up traces: a pass queued ahead feeds its
    predecessor's argmax (uint32), and a new input dtype is a new trace in a timed pass."""
    return a if a.dtype == mx.int32 else a.astype(mx.int32)


class CompiledPasses(dict):
    """The functions of one loaded model, by pass structure (see Forward._fn). A dict that
    names its model, so a shelf can hold it weakly: it lives while an engine uses it."""

    def __init__(self, model: Model):
        super().__init__()
        self.model = model


class _Graph:
    """What a pass's graph depends on besides its arrays: the model, index_topk and which
    pool layers carry indexer keys. Compiled functions bind this, not the Forward, so a
    shared function keeps no engine's pool alive."""

    def __init__(
        self, model: Model, index_topk: int, has_ik: tuple[bool, ...], feature_layers: tuple[int, ...] = ()
    ):
        self.model, self.index_topk, self.has_ik = model, index_topk, has_ik
        self.feature_layers = feature_layers
        self.n_main = model.args.num_hidden_layers

    def _context(self, spec, arrays) -> tuple[PassContext, list]:
        ctx, rest = PassContext.unflatten(spec, arrays)
        return replace(ctx, rope=rope_table(ctx.positions, self.model.args)), rest

    def _main(self, spec, tokens, out_index, *arrays):
        ctx, pool_arrays = self._context(spec, arrays)
        kv = _unpack(pool_arrays, self.has_ik[: self.n_main])
        cap = Capture() if self.feature_layers else None
        h = self.model.hidden_states(tokens, ctx, kv, self.index_topk, cap)  # (N, H)
        states = h if cap is None else select_features(cap.normed, h, self.feature_layers)
        return (self.model.head(h[out_index]).astype(mx.float32), states, *_pack(kv))  # (B, K, V)

    def _mtp(self, spec, hidden, next_tokens, last_index, *arrays):
        ctx, pool_arrays = self._context(spec, arrays)
        kv = LayerKV(*pool_arrays)
        out = self.model.mtp(hidden, self.model.embed_tokens(next_tokens), ctx, kv)  # (N, H)
        last = out[last_index]  # (R, H): after shared_head.norm, what a chained step carries
        return (self.model.head(last).astype(mx.float32), last, *_pack([kv]))  # (R, V), (R, H)

    def _main_draft(
        self,
        spec,
        with_drafts,
        tokens,
        out_index,
        next_known,
        next_from,
        cand_index,
        draft_in,
        drafted,
        *arrays,
    ):
        """Target pass and eager MTP in one graph (greedy rows): the MTP's next tokens are
        the ones the host knows (prompt) or the target's own argmax, so no round trip. The
        row's draft check runs here too, so the MTP head drafts from one position a row:
        the draft's own when it was accepted, the row's first otherwise."""
        ctx, pool_arrays = self._context(spec, arrays)
        kv = _unpack(pool_arrays, self.has_ik)  # main layers + MTP layer
        h = self.model.hidden_states(tokens, ctx, kv[:-1], self.index_topk)  # (N, H)
        logits = self.model.head(h[out_index]).astype(mx.float32)  # (B, K, V)
        greedy = mx.argmax(logits, axis=-1)  # (B, K)
        nxt = mx.where(next_from >= 0, greedy.reshape(-1)[mx.maximum(next_from, 0)], next_known)
        out = self.model.mtp(h, self.model.embed_tokens(nxt), ctx, kv[-1])  # (N, H)
        if not with_drafts:
            return (logits, h, greedy, *_pack(kv))
        ok = drafted & (greedy[:, 0] == draft_in)
        drafts = mx.argmax(
            self.model.head(out[mx.where(ok, cand_index[:, 1], cand_index[:, 0])]), axis=-1
        )  # (B,)
        return (logits, h, greedy, drafts, *_pack(kv))


class Forward:
    def __init__(
        self,
        model: Model,
        pool: BlockPool,
        index_topk: int,
        compile: bool,
        passes: Optional[CompiledPasses] = None,
    ):
        """passes: the model's compiled functions, shared with other engines on it (a new,
        private set when None)."""
        if passes is not None and passes.model is not model:
            raise ValueError("passes: compiled functions of another model")
        self.model, self.pool, self.index_topk = model, pool, index_topk
        self.n_main = model.args.num_hidden_layers
        self._compile = compile
        self._graph = _Graph(model, index_topk, tuple(kv.ik is not None for kv in pool.layers))
        self._plain = self._graph  # the graph without the drafter's features
        self._compiled = passes if passes is not None else CompiledPasses(model)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The target layers whose states `main` returns concatenated (the block
        drafter's features); empty: the final hidden states."""
        return self._graph.feature_layers

    @feature_layers.setter
    def feature_layers(self, layers: tuple[int, ...]) -> None:
        g = self._plain
        self._graph = _Graph(g.model, g.index_topk, g.has_ik, tuple(layers)) if layers else g

    def _fn(self, name: str, static: tuple, n_tokens: int, eager: bool = False, features: bool = True):
        """The function for this pass structure (row groups and padding change the graph,
        so each gets its own). Long passes run eagerly: compiling pays where dispatching
        the graph is much of a pass's time (decode), not for a long prefill. The key names
        all the graph depends on, as engines of other knobs may share the dict. features
        False: the graph without the drafter's features (`main`)."""
        graph = self._graph if features else self._plain
        fn = getattr(graph, name)
        if eager or n_tokens > COMPILE_MAX_TOKENS or not self._compile:
            return partial(fn, *static)
        key = (name, self.index_topk, graph.has_ik, graph.feature_layers, static)
        if key not in self._compiled:
            self._compiled[key] = mx.compile(partial(fn, *static))
        return self._compiled[key]

    def main_and_draft(
        self,
        tokens: mx.array,
        ctx: PassContext,
        out_index: mx.array,
        next_known: mx.array,
        next_from: mx.array,
        cand_index: mx.array,
        draft_in: Optional[mx.array],
        drafted: mx.array,
        with_drafts: bool,
        eager: bool = False,
    ):
        """-> (logits (B, K, V), hidden (N, H), greedy (B, K), drafts (B,) or None).
        next_known (N,): the token after each packed position where the host knows it;
        next_from (N,): else the index into greedy.flatten() that holds it (-1: known);
        cand_index (B, 2): the packed position to draft from if the row's draft is
        rejected / accepted; draft_in (B,), drafted (B,) bool: the drafts verified (None:
        no row carries one); with_drafts False skips the MTP head (drafts None); eager: skip
        compilation (see main)."""
        layers = self.pool.layers
        spec, ctx_arrays = ctx.flatten()
        if draft_in is None:
            draft_in = mx.zeros(drafted.shape, mx.int32)
        fn = self._fn("_main_draft", (spec, with_drafts), tokens.shape[0], eager)
        outs = fn(
            _ids(tokens),
            out_index,
            next_known,
            next_from,
            cand_index,
            _ids(draft_in),
            drafted,
            *ctx_arrays,
            *_pack(layers),
        )
        n_out = 4 if with_drafts else 3
        self._store(layers, outs[n_out:], self._graph.has_ik)
        logits, hidden, greedy = outs[:3]
        return logits, hidden, greedy, outs[3] if with_drafts else None

    def main(
        self,
        tokens: mx.array,
        ctx: PassContext,
        out_index: mx.array,
        eager: bool = False,
        features: bool = True,
    ) -> tuple[mx.array, Optional[mx.array]]:
        """tokens (N,) packed; out_index (B, K) packed positions whose logits are wanted.
        eager: skip compilation (a pass carrying prompt tokens: its packed length is the
        prompt's, rarely seen twice, so it would trace a new graph inside a timed pass).
        features False: a pass whose positions the drafter will never read runs the graph
        without them. -> logits (B, K, V), and the hidden states (N, H) or features
        (N, n*H) of every packed position (None: a pass without its features)."""
        layers = self.pool.layers[: self.n_main]
        spec, ctx_arrays = ctx.flatten()
        logits, hidden, *arrays = self._fn("_main", (spec,), tokens.shape[0], eager, features)(
            _ids(tokens), out_index, *ctx_arrays, *_pack(layers)
        )
        self._store(layers, arrays, self._graph.has_ik[: self.n_main])
        return logits, hidden if features or not self.feature_layers else None

    def mtp(
        self,
        hidden: mx.array,
        next_tokens: mx.array,
        ctx: PassContext,
        last_index: mx.array,
        eager: bool = False,
    ) -> tuple[mx.array, mx.array]:
        """hidden (N, H) and next tokens (N,) packed pairs -> draft logits (R, V) and the
        layer's output hidden (R, H) at last_index. eager: skip compilation (a lazy
        catch-up has a one-off shape; tracing it costs more)."""
        layer = self.pool.layers[self.n_main]
        spec, ctx_arrays = ctx.flatten()
        logits, last, *arrays = self._fn("_mtp", (spec,), hidden.shape[0], eager)(
            hidden, _ids(next_tokens), last_index, *ctx_arrays, *_pack([layer])
        )
        self._store([layer], arrays, self._graph.has_ik[self.n_main :])
        return logits, last

    @staticmethod
    def _store(layers: list[LayerKV], arrays: list[mx.array], has_ik: tuple[bool, ...]) -> None:
        for kv, new in zip(layers, _unpack(arrays, has_ik)):
            kv.kv, kv.ik = new.kv, new.ik
