"""Reusable KV of shared prompt prefixes, in whole blocks, under a byte budget.

A full prompt block is keyed by a chained hash (its tokens and the previous block's
key), so a block is only reused after the same whole prefix. Tokens are re-checked on a
hit, so a hash collision can never serve wrong KV. Only blocks whose KV (and MTP KV) is
fully computed from committed prompt tokens are inserted: a drafted position is never
cached. Eviction is least-recently-used, down to the budget, after every pass.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from .cache import BlockPool


def block_key(prev: bytes, tokens: list[int]) -> bytes:
    return hashlib.blake2b(prev + b"|" + ",".join(map(str, tokens)).encode(), digest_size=16).digest()


class PrefixCache:
    def __init__(self, pool: BlockPool, budget_bytes: int):
        self.pool, self.budget = pool, budget_bytes
        self.entries: OrderedDict[bytes, tuple[int, tuple[int, ...]]] = (
            OrderedDict()
        )  # key -> (block, tokens)

    @property
    def enabled(self) -> bool:
        return self.budget >= self.pool.block_bytes

    def cached_bytes(self) -> int:
        return len(self.entries) * self.pool.block_bytes

    def match(self, prompt: list[int]) -> list[int]:
        """Blocks holding the longest cached whole-block prefix of `prompt` (retained for
        the caller). At least one prompt token is always left to compute."""
        if not self.enabled:
            return []
        bs, key, hits = self.pool.block_size, b"", []
        for j in range((len(prompt) - 1) // bs):
            toks = prompt[j * bs : (j + 1) * bs]
            key = block_key(key, toks)
            entry = self.entries.get(key)
            if entry is None or entry[1] != tuple(toks):
                break
            self.entries.move_to_end(key)
            self.pool.retain(entry[0])
            hits.append(entry[0])
        return hits

    def insert(self, prompt: list[int], blocks: list[int], valid_tokens: int) -> None:
        """Offer the row's full prompt blocks that lie wholly below `valid_tokens`."""
        if not self.enabled:
            return
        bs, key = self.pool.block_size, b""
        for j in range(min(valid_tokens, len(prompt)) // bs):
            toks = prompt[j * bs : (j + 1) * bs]
            key = block_key(key, toks)
            if key in self.entries:
                self.entries.move_to_end(key)
            else:
                self.pool.retain(blocks[j])
                self.entries[key] = (blocks[j], tuple(toks))

    def evict_to_budget(self) -> None:
        self._evict_down_to(self.budget)

    def clear(self) -> None:
        self._evict_down_to(0)

    def _evict_down_to(self, budget: int) -> None:
        """Drop least-recently-used entries until the cached bytes fit `budget`."""
        while self.entries and self.cached_bytes() > budget:
            _, (block, _) = self.entries.popitem(last=False)
            self.pool.release(block)
