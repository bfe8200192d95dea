"""Reusing the last generation's prompt prefill: chat turns and a server's consecutive requests re-send the
whole conversation, and all but its end was prefilled last time.

What is kept: the cache of the last generation, the token ids of its prompt prefix up to one block boundary
(the snapshot point, at most the block-aligned prefill), a copy of its GDN rings and states there, and the
logits of the last row before it. Keys/values are not copied: the kept cache is truncated back to the snapshot
point. The next generation whose block-aligned prefill starts with exactly those token ids resumes there and
prefills only the rest; anything else (no match, a divergence inside the saved prefix, another model, a runtime
arena handed to a newer cache) starts from a fresh cache. Token ids are compared, never assumed: a chat
template may render earlier turns differently from what was generated (thinking dropped, say).

Why one snapshot and not one per block: a GDN state cannot be rewound, so only a point whose state was copied
can be resumed, and each copy costs, per GDN layer, the state Hv x Dk x Dv fp32 plus the conv ring (kernel-1)
x conv_dim. At 35B: 32 x 128 x 128 x 4 B = 2 MiB per layer, 30 GDN layers -> 60 MiB per snapshot (+ ~1.5 MiB
of rings, + the vocab-wide logits row, ~1 MiB). Kept between generations as well: the last cache itself (with
the runtime its keys/values live in the preallocated arena anyway; a plain cache keeps its own buffers).

One live sequence: a PromptCache belongs to one front end's single decoding loop (chat, the server's worker).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from clover_local.model.cache import CacheSnapshot, PrefixCache

if TYPE_CHECKING:
    from clover_local.model.clover import CloverModel


@dataclass
class Resume:
    """A cache ready for the next passes: `length` prompt tokens already in it."""

    cache: PrefixCache
    length: int
    last_logits: torch.Tensor | None  # logits of row length-1 (the shifted first-token prediction)


@dataclass
class _Saved:
    model: weakref.ref
    cache: PrefixCache
    tokens: list[int]  # the prompt prefix the snapshot was taken after (a whole number of blocks)
    snapshot: CacheSnapshot
    last_logits: torch.Tensor | None

    def matches(self, model: CloverModel, prefix: list[int]) -> bool:
        n = len(self.tokens)
        return self.model() is model and 0 < n <= len(prefix) and prefix[:n] == self.tokens


@dataclass
class PromptCacheStats:
    lookups: int = 0  # generations that asked
    hits: int = 0  # ... and resumed from the saved prefix
    reused_tokens: int = 0  # prompt tokens not prefilled again, all lookups together
    last_reused: int = 0  # of the latest lookup

    def to_dict(self) -> dict[str, int]:
        return {"lookups": self.lookups, "hits": self.hits, "reused_tokens": self.reused_tokens,
                "last_reused": self.last_reused}


@dataclass
class PromptCache:
    """The one saved prompt prefix of the last generation (see the module docstring for what it costs)."""

    stats: PromptCacheStats = field(default_factory=PromptCacheStats)
    _saved: _Saved | None = field(default=None, init=False, repr=False)

    @property
    def saved_tokens(self) -> int:
        return len(self._saved.tokens) if self._saved is not None else 0

    @property
    def nbytes(self) -> int:
        """Device/host bytes of the snapshot copy (not of the kept cache, whose buffers a generation needs)."""
        if self._saved is None:
            return 0
        logits = self._saved.last_logits
        return self._saved.snapshot.nbytes + (logits.numel() * logits.element_size() if logits is not None else 0)

    def take(self, model: CloverModel, prefix: list[int]) -> Resume | None:
        """The kept cache rewound to the saved prefix when `prefix` (a block-aligned prefill) starts with it, else
        None. Either way nothing stays saved until `save`: a generation that fails before saving again cannot
        leave a half-updated cache behind."""
        saved, self._saved = self._saved, None
        self.stats.lookups += 1
        self.stats.last_reused = 0
        if saved is None or not saved.matches(model, prefix) or not model.reclaim_cache(saved.cache):
            return None
        saved.cache.restore(saved.snapshot)
        n = len(saved.tokens)
        self.stats.hits += 1
        self.stats.last_reused = n
        self.stats.reused_tokens += n
        return Resume(saved.cache, n, saved.last_logits)

    def save(self, model: CloverModel, cache: PrefixCache, tokens: list[int],
             last_logits: torch.Tensor | None) -> None:
        """Remember `cache` as it is now, after exactly `tokens` (a whole number of blocks) were prefilled."""
        if cache.length != len(tokens):
            raise ValueError(f"the cache holds {cache.length} tokens, not the {len(tokens)} given")
        logits = last_logits.clone() if last_logits is not None else None
        self._saved = _Saved(weakref.ref(model), cache, list(tokens), cache.snapshot(), logits)

    def clear(self) -> None:
        """Forget the saved prefix (after a failed generation; frees the snapshot and the kept cache)."""
        self._saved = None
