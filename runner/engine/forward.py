"""The two forward functions of a pass, optionally compiled with mx.compile.

`main` runs the target model over the pass's rows and returns float32 logits at the
requested positions plus all hidden states; `mtp` runs the MTP layer over verified
(hidden, next token) pairs and returns the draft logits at each row's last pair. Both
take the pool arrays as explicit inputs and return them updated, so they are pure
functions of their arguments and safe to compile. Shapes are bucketed by the scheduler.
"""
from __future__ import annotations

from functools import partial

import mlx.core as mx

from .attention import LayerKV, PassContext
from .cache import BlockPool
from .model import Model


def _unpack(arrays, layers: list[LayerKV]) -> list[LayerKV]:
    out, i = [], 0
    for kv in layers:
        n = 3 if kv.ik is not None else 2
        out.append(LayerKV(*arrays[i:i + n]))
        i += n
    return out


def _pack(layers: list[LayerKV]) -> list[mx.array]:
    return [a for kv in layers for a in (kv.k, kv.v, kv.ik) if a is not None]


class Forward:
    def __init__(self, model: Model, pool: BlockPool, index_topk: int, compile: bool):
        self.model, self.pool, self.index_topk = model, pool, index_topk
        self.n_main = model.args.num_hidden_layers
        wrap = mx.compile if compile else (lambda f: f)
        # `fresh` changes the graph, so each value gets its own compiled function.
        self._main_fn = {fresh: wrap(partial(self._main, fresh)) for fresh in (False, True)}
        self._mtp_fn = wrap(self._mtp)

    def _main(self, fresh, tokens, offsets, write, read, mask, out_pos, *arrays):
        kv = _unpack(arrays, self.pool.layers[:self.n_main])
        ctx = PassContext(offsets, write, read, mask, fresh)
        h = self.model.hidden_states(tokens, ctx, kv, self.index_topk)       # (B, T, H)
        picked = mx.take_along_axis(h, out_pos[..., None], axis=1)           # (B, K, H)
        return (self.model.head(picked).astype(mx.float32), h, *_pack(kv))

    def _mtp(self, hidden, next_tokens, offsets, write, read, mask, last, *arrays):
        kv = LayerKV(*arrays)
        ctx = PassContext(offsets, write, read, mask)
        out = self.model.mtp(hidden, self.model.embed_tokens(next_tokens), ctx, kv)  # (R, T, H)
        picked = mx.take_along_axis(out, last[:, None, None], axis=1)        # (R, 1, H)
        return (self.model.head(picked)[:, 0].astype(mx.float32), *_pack([kv]))

    def main(self, tokens: mx.array, ctx: PassContext, out_pos: mx.array) -> tuple[mx.array, mx.array]:
        layers = self.pool.layers[:self.n_main]
        logits, hidden, *arrays = self._main_fn[ctx.fresh](tokens, ctx.offsets, ctx.write_slots,
                                                           ctx.read_slots, ctx.mask, out_pos, *_pack(layers))
        self._store(layers, arrays)
        return logits, hidden

    def mtp(self, hidden: mx.array, next_tokens: mx.array, ctx: PassContext, last: mx.array) -> mx.array:
        layer = self.pool.layers[self.n_main]
        logits, *arrays = self._mtp_fn(hidden, next_tokens, ctx.offsets, ctx.write_slots, ctx.read_slots,
                                       ctx.mask, last, *_pack([layer]))
        self._store([layer], arrays)
        return logits

    def warm(self, max_rows: int, max_blocks: int, with_mtp: bool) -> int:
        """Trace the compiled functions for every decode shape (rows x verify width x
        read-slot bucket) up to these sizes, so no timed pass pays for tracing. Writes
        only the scratch block. Returns how many shapes were traced."""
        bs, H, traced, n_blocks = self.pool.block_size, self.model.args.hidden_size, 0, 1
        widths = (1, 2) if with_mtp else (1,)
        while n_blocks <= max_blocks:
            S = n_blocks * bs
            for B in range(1, max_rows + 1):
                for T in widths:
                    ctx = PassContext(mx.zeros((B,), mx.int32), mx.zeros((B * T,), mx.int32),
                                      mx.zeros((B, S), mx.int32), mx.ones((B, 1, T, S), mx.bool_))
                    logits, hidden = self.main(mx.zeros((B, T), mx.int32), ctx, mx.zeros((B, T), mx.int32))
                    outs = [logits, hidden]
                    if with_mtp:
                        outs.append(self.mtp(hidden, mx.zeros((B, T), mx.int32), ctx, mx.zeros((B,), mx.int32)))
                    mx.eval(outs)
                    traced += 1
            n_blocks *= 2
        return traced

    @staticmethod
    def _store(layers: list[LayerKV], arrays: list[mx.array]) -> None:
        for kv, new in zip(layers, _unpack(arrays, layers)):
            kv.k, kv.v, kv.ik = new.k, new.v, new.ik
