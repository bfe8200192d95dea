"""The prefix cache a causal pass advances and a preview pass only reads.

Per attention layer: keys and values of every committed token. Per GDN layer: the last `kernel-1` pre-conv
rows (the conv ring) and the recurrent state S [B, Hv, Dk, Dv] in fp32. `length` counts committed tokens.

Rewinding: keys/values can be cut to any earlier length (`AttentionCache.truncate`), but a GDN state cannot be
undone; the only earlier point a cache can go back to is one whose GDN rings and states were copied then
(`PrefixCache.snapshot` / `restore`, used by generate/prompt_cache.py to reuse a prompt prefill).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionCache:
    k: torch.Tensor | None = None  # [B, Hkv, capacity, D]
    v: torch.Tensor | None = None
    length: int = 0

    def keys_values(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.k is None or self.length == 0:
            return None
        return self.k[:, :, : self.length], self.v[:, :, : self.length]

    def preview_keys_values(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
        """What a preview attends to before its block: (keys, values, bool mask over them or None = all).
        Here exactly the committed ones; the runtime's arena answers with a fixed window and a mask, so that one
        CUDA graph serves every block (runtime/offload.py)."""
        kv = self.keys_values()
        return None if kv is None else (*kv, None)

    def writes_in_place(self, rows: int) -> bool:
        """Whether a causal pass of `rows` rows hands its keys/values to `write_block` (written at a device-side
        length, so a CUDA graph can replay the pass) instead of `append`. Never for this cache; the runtime's
        arena does it for a block's commit (runtime/offload.py)."""
        return False

    def write_block(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError("only caches whose writes_in_place() is True write blocks in place")

    def write_merged(self, k: torch.Tensor, v: torch.Tensor) -> tuple[tuple, tuple]:
        """A merged pass's commit rows k/v [B,Hkv,T,D] go in (`Attention.forward_merged`); returns what they
        attend to before themselves and what the next block's preview attends to before its own rows (the
        committed keys with these), each as `preview_keys_values` gives it."""
        before = self.preview_keys_values() or (k[:, :, :0], v[:, :, :0], None)
        self.append(k, v)  # views taken before stay valid: a reallocation keeps the old buffer alive under them
        return before, self.preview_keys_values()

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write new keys/values; capacity grows geometrically so appends stay amortised O(1)."""
        n = k.shape[2]
        need = self.length + n
        if self.k is None or need > self.k.shape[2]:
            cap = max(need, 2 * (self.k.shape[2] if self.k is not None else 0), 64)
            new_k = k.new_zeros(k.shape[0], k.shape[1], cap, k.shape[3])
            new_v = v.new_zeros(v.shape[0], v.shape[1], cap, v.shape[3])
            if self.k is not None and self.length:
                new_k[:, :, : self.length] = self.k[:, :, : self.length]
                new_v[:, :, : self.length] = self.v[:, :, : self.length]
            self.k, self.v = new_k, new_v
        self.k[:, :, self.length : need] = k
        self.v[:, :, self.length : need] = v
        self.length = need

    def chained(self) -> "AttentionCache":
        """A cache over the same keys/values that a long pass's chunks append to one after another, before the
        pass is settled (`CloverModel._layer_by_layer`); `adopt` takes it back."""
        return AttentionCache(self.k, self.v, self.length)

    def adopt(self, own: "AttentionCache") -> None:
        self.k, self.v, self.length = own.k, own.v, own.length

    def truncate(self, length: int) -> None:
        """Forget every token from `length` on; the buffer keeps its capacity (and rows past `length` are
        simply overwritten by the next append)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a {self.length}-token attention cache to {length}")
        self.length = length


@dataclass
class GDNCache:
    ring: torch.Tensor | None = None  # [B, kernel-1, conv_dim] last pre-conv rows, oldest first
    state: torch.Tensor | None = None  # [B, Hv, Dk, Dv] fp32

    def copy(self) -> "GDNCache":
        return GDNCache(_clone(self.ring), _clone(self.state))

    def update(self, ring: torch.Tensor | None, state: torch.Tensor | None) -> None:
        """Take this ring and state (from a snapshot: handed over, not copied). The runtime's caches copy into
        fixed buffers instead (a CUDA graph reads them at fixed addresses)."""
        self.ring, self.state = ring, state

    def write(self, ring: torch.Tensor, state: torch.Tensor) -> None:
        """What a causal pass leaves: here it takes effect at once; the runtime's caches hold it aside until the
        pass is settled (`PrefixCache.settle`), so a pass thrown away midway can run again from the same state."""
        self.update(ring, state)

    def chained(self) -> "GDNCache":
        """A cache that a long pass's chunks advance one after another, each reading the state the last one
        left (`CloverModel._layer_by_layer`); `adopt` hands the last one's to this cache as the pass's."""
        return GDNCache(self.ring, self.state)

    def adopt(self, own: "GDNCache") -> None:
        self.write(own.ring, own.state)


def _clone(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.clone()


@dataclass
class CacheSnapshot:
    """Copies of every GDN layer's ring and state at `length` committed tokens: the part of a cache that cannot
    be rewound. Keys/values are not copied: the cache they live in is truncated back to `length` instead."""

    length: int
    gdn: dict[int, GDNCache]  # by layer index

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for c in self.gdn.values() for t in (c.ring, c.state)
                   if t is not None)


@dataclass
class PrefixCache:
    layers: list[AttentionCache | GDNCache] = field(default_factory=list)
    length: int = 0

    @classmethod
    def empty(cls, layer_types: list[str]) -> "PrefixCache":
        return cls([AttentionCache() if t == "full_attention" else GDNCache() for t in layer_types])

    def tensors(self) -> list[torch.Tensor]:
        """Every live cache tensor (for tests that check a preview left them untouched)."""
        out = []
        for c in self.layers:
            if isinstance(c, AttentionCache):
                kv = c.keys_values()
                if kv is not None:
                    out.extend(kv)
            else:
                out.extend(t for t in (c.ring, c.state) if t is not None)
        return out

    def snapshot(self) -> CacheSnapshot:
        """Copy the GDN rings and states as they are now (a copy, so later passes cannot reach it)."""
        return CacheSnapshot(self.length, {i: c.copy() for i, c in enumerate(self.layers) if isinstance(c, GDNCache)})

    def restore(self, snap: CacheSnapshot) -> None:
        """Go back to `snap.length` tokens: keys/values cut there, GDN rings and states taken from the snapshot.
        The snapshot's tensors are handed over, not copied (no second copy on the device; the runtime's caches
        copy them into their fixed buffers): restore a snapshot once. The keys/values up to `snap.length` must be
        the ones the snapshot was taken with."""
        if snap.length > self.length or set(snap.gdn) != {i for i, c in enumerate(self.layers)
                                                           if isinstance(c, GDNCache)}:
            raise ValueError(f"this snapshot ({snap.length} tokens) was not taken from this {self.length}-token cache")
        for i, c in enumerate(self.layers):
            if isinstance(c, AttentionCache):
                c.truncate(snap.length)
            else:
                c.update(snap.gdn[i].ring, snap.gdn[i].state)
        self.length = snap.length

    def settle(self, length: int) -> None:
        """After a causal pass: the cache holds `length` tokens. (The runtime's cache also applies what the pass
        held aside and advances its attention layers' lengths here: runtime/offload.py.)"""
        self.length = length

    def preview_start(self) -> int | torch.Tensor:
        """Committed tokens before a preview's block, as the preview reads it (positions, the GDN history
        term): here the int; the runtime's cache gives a device tensor, which a CUDA graph reads at replay."""
        return self.length
