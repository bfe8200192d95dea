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

Parked prefixes (`park_bytes` > 0, the server's): a request of another conversation takes the cache over, which
would lose the saved prefix — and agents interleave such requests (a sub-agent's turns between the main
conversation's, a side question such as a title with a prompt of its own), so the main conversation's next turn
would read its whole prompt (often tens of thousands of tokens) again. Before that, the saved prefix is parked:
its keys/values up to the save point, its GDN snapshot and last-row logits copied to host memory (at 35B, 20 KiB
a token plus ~62 MiB: ≈ 0.5 GiB for a 20K-token prompt). A later prompt that starts with a parked prefix gets a
fresh cache with them copied back in. The oldest parked prefixes go first once their bytes pass `park_bytes`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from clover_local.model.cache import AttentionCache, CacheSnapshot, GDNCache, PrefixCache

if TYPE_CHECKING:
    from clover_local.model.clover import CloverModel


@dataclass
class Resume:
    """A cache ready for the next passes: `length` prompt tokens already in it."""

    cache: PrefixCache
    length: int
    last_logits: torch.Tensor | None  # logits of row length-1 (the shifted first-token prediction)


@dataclass
class _Prefix:
    """A saved prompt prefix: the model it was prefilled by and its token ids (a whole number of blocks)."""

    model: weakref.ref
    tokens: list[int]

    def matches(self, model: CloverModel, prefix: list[int]) -> bool:
        n = len(self.tokens)
        return self.model() is model and 0 < n <= len(prefix) and prefix[:n] == self.tokens


@dataclass
class _Saved(_Prefix):
    """The live one: the cache it was prefilled into, with its GDN snapshot at the save point."""

    cache: PrefixCache = None
    snapshot: CacheSnapshot = None
    last_logits: torch.Tensor | None = None


@dataclass
class _Parked(_Prefix):
    """One moved to host memory: keys/values [B, Hkv, n, D] by attention layer, the GDN snapshot, the logits."""

    kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    snapshot: CacheSnapshot = None
    last_logits: torch.Tensor | None = None
    device: torch.device = torch.device("cpu")  # where it came from, and goes back to

    @property
    def nbytes(self) -> int:
        tensors = [t for pair in self.kv.values() for t in pair] + (
            [self.last_logits] if self.last_logits is not None else [])
        return self.snapshot.nbytes + sum(t.numel() * t.element_size() for t in tensors)


def _moved(snapshot: CacheSnapshot, device: torch.device | str) -> CacheSnapshot:
    return CacheSnapshot(snapshot.length, {i: GDNCache(*(None if t is None else t.to(device, copy=True)
                                                         for t in (c.ring, c.state)))
                                           for i, c in snapshot.gdn.items()})


@dataclass
class PromptCacheStats:
    lookups: int = 0  # generations that asked
    hits: int = 0  # ... and resumed from a saved prefix (the live one or a parked one)
    parked_hits: int = 0  # ... of them, from a parked one
    parked: int = 0  # prefixes parked so far (another prompt took the cache over)
    reused_tokens: int = 0  # prompt tokens not prefilled again, all lookups together
    last_reused: int = 0  # of the latest lookup

    def to_dict(self) -> dict[str, int]:
        return {"lookups": self.lookups, "hits": self.hits, "parked_hits": self.parked_hits, "parked": self.parked,
                "reused_tokens": self.reused_tokens, "last_reused": self.last_reused}


@dataclass
class PromptCache:
    """The saved prompt prefix of the last generation, and those parked in host memory (the module docstring says
    what each costs)."""

    park_bytes: int = 0  # host memory for parked prefixes (0: a prefix another prompt displaces is dropped)
    stats: PromptCacheStats = field(default_factory=PromptCacheStats)
    _saved: _Saved | None = field(default=None, init=False, repr=False)
    _parked: list[_Parked] = field(default_factory=list, init=False, repr=False)  # oldest first

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

    @property
    def parked_bytes(self) -> int:
        return sum(p.nbytes for p in self._parked)

    def take(self, model: CloverModel, prefix: list[int]) -> Resume | None:
        """The kept cache rewound to the saved prefix when `prefix` (a block-aligned prefill) starts with it; else
        a fresh cache holding the longest parked prefix it starts with (the saved one parked first, since this
        generation will overwrite it); else None. Either way nothing stays saved until `save`: a generation that
        fails before saving again cannot leave a half-updated cache behind."""
        saved, self._saved = self._saved, None
        self.stats.lookups += 1
        self.stats.last_reused = 0
        intact = saved is not None and model.reclaim_cache(saved.cache)
        if intact and saved.matches(model, prefix):
            saved.cache.restore(saved.snapshot)
            return self._hit(Resume(saved.cache, len(saved.tokens), saved.last_logits))
        parked = max((p for p in self._parked if p.matches(model, prefix)), key=lambda p: len(p.tokens),
                     default=None)
        if parked is not None:
            self._parked.remove(parked)  # (before the saved one is parked, which may make room by dropping some)
        if intact and self.park_bytes:
            self._park(saved)
        if parked is None:
            return None
        self.stats.parked_hits += 1
        return self._hit(self._unpark(model, parked))

    def _hit(self, resume: Resume) -> Resume:
        self.stats.hits += 1
        self.stats.last_reused = resume.length
        self.stats.reused_tokens += resume.length
        return resume

    def _park(self, saved: _Saved) -> None:
        """Copy the saved prefix to host memory before another prompt overwrites its cache; drop the oldest
        parked ones past `park_bytes` (this one too, if it alone is larger)."""
        n = len(saved.tokens)
        attention = {i: c for i, c in enumerate(saved.cache.layers) if isinstance(c, AttentionCache)}
        device = next(iter([c.k.device for c in attention.values()] + [
            t.device for c in saved.snapshot.gdn.values() for t in (c.state, c.ring) if t is not None]),
            torch.device("cpu"))
        # views first: a prefix larger than the whole budget would be dropped at once, so it is not copied
        views = {i: (c.k[:, :, :n], c.v[:, :, :n]) for i, c in attention.items()}
        on_device = _Parked(saved.model, saved.tokens, views, saved.snapshot, saved.last_logits, device)
        self.stats.parked += 1
        if on_device.nbytes > self.park_bytes:
            return
        kv = {i: (k.to("cpu", copy=True), v.to("cpu", copy=True)) for i, (k, v) in on_device.kv.items()}
        logits = saved.last_logits.to("cpu", copy=True) if saved.last_logits is not None else None
        self._parked.append(_Parked(saved.model, saved.tokens, kv, _moved(saved.snapshot, "cpu"), logits, device))
        while self._parked and self.parked_bytes > self.park_bytes:
            self._parked.pop(0)

    @staticmethod
    def _unpark(model: CloverModel, parked: _Parked) -> Resume:
        """A fresh cache of `model` holding a parked prefix again: its keys/values appended, its GDN rings and
        states restored."""
        cache, device = model.new_cache(), parked.device
        for i, (k, v) in parked.kv.items():
            cache.layers[i].append(k.to(device), v.to(device))
        n = len(parked.tokens)
        cache.length = n
        cache.restore(_moved(parked.snapshot, device))
        logits = parked.last_logits.to(device) if parked.last_logits is not None else None
        return Resume(cache, n, logits)

    def save(self, model: CloverModel, cache: PrefixCache, tokens: list[int],
             last_logits: torch.Tensor | None) -> None:
        """Remember `cache` as it is now, after exactly `tokens` (a whole number of blocks) were prefilled."""
        if cache.length != len(tokens):
            raise ValueError(f"the cache holds {cache.length} tokens, not the {len(tokens)} given")
        logits = last_logits.clone() if last_logits is not None else None
        self._saved = _Saved(weakref.ref(model), list(tokens), cache, cache.snapshot(), logits)

    def clear(self) -> None:
        """Forget the saved prefix (after a failed generation; frees the snapshot and the kept cache). Parked ones
        stay: they were copied before the failed generation began."""
        self._saved = None
