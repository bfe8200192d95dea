"""Gated DeltaNet (GDN): the linear-attention mixer of 3 in 4 layers, with its causal and preview forms.

Causal form (backbone, known): `in_proj_qkv` → depthwise causal conv (kernel 4) → SiLU → q, k, v; each key head
serves `Hv/Hk` consecutive value heads; q, k L2-normalised, q scaled by Dk^-0.5; β = sigmoid(b);
g = -exp(A_log)·softplus(a + dt_bias). Per token: S ← S·exp(g); S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq.
Many rows use the chunked (WY) form, one row the recurrent form; `fla`'s kernels replace both on CUDA where
installed, and the runtime's own Triton kernels replace the whole causal core through `causal_kernel`.

Preview form (reconstructed, see `preview_mix`): reads the conv ring and state, never writes them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from clover_local.config import CloverConfig
from clover_local.model.cache import GDNCache
from clover_local.model.norm import GatedRMSNorm

try:  # GPU extra: fast kernels, used only for CUDA tensors
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule as _fla_chunk
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as _fla_recurrent
except Exception:  # pragma: no cover - absent on CPU machines
    _fla_chunk = _fla_recurrent = None


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def recurrent_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-by-token form. q, k [B,T,H,Dk] (normalised, q already scaled), v [B,T,H,Dv], g/beta [B,T,H],
    state [B,H,Dk,Dv] fp32. Returns (o [B,T,H,Dv] fp32, new state)."""
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    outs = []
    for t in range(q.shape[1]):
        state = state * g[:, t].exp()[..., None, None]
        kv_mem = torch.einsum("bhkv,bhk->bhv", state, k[:, t])
        delta = (v[:, t] - kv_mem) * beta[:, t][..., None]
        state = state + k[:, t][..., :, None] * delta[..., None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t]))
    return torch.stack(outs, 1), state


def chunk_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk: int = 64,
    chunk_states: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Chunked (WY) form of `recurrent_delta_rule`, same inputs. Within a chunk with cumulative log-decay γ,
    the corrected values U solve (I + A)U = β(V − e^γ K S₀) with A[t,s] = β_t e^{γ_t−γ_s} k_t·k_s (s<t); then
    o_t = e^{γ_t} S₀ᵀq_t + Σ_{s≤t} e^{γ_t−γ_s}(q_t·k_s) u_s and S = e^{γ_C} S₀ + Σ_s e^{γ_C−γ_s} k_s u_sᵀ.
    With `chunk_states`, also returns the state before each chunk [B, n_chunks, H, Dk, Dv] (used by training to
    preview every block of a sequence at once)."""
    b, t_len, h, dk = k.shape
    dv = v.shape[-1]
    q, k, v, g, beta = (x.float().transpose(1, 2) for x in (q, k, v, g, beta))  # [B,H,T,...]
    pad = (-t_len) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (t_len + pad) // chunk
    q, k, v = (x.reshape(b, h, n, chunk, -1) for x in (q, k, v))
    g, beta = g.reshape(b, h, n, chunk), beta.reshape(b, h, n, chunk)
    gamma = g.cumsum(-1)
    strict_upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(strict_upper, float("-inf")).exp()
    kk = k @ k.transpose(-1, -2)
    a_mat = (beta[..., :, None] * kk * decay).tril(-1)
    eye = torch.eye(chunk, device=q.device, dtype=q.dtype)
    system = eye + a_mat
    u0 = torch.linalg.solve_triangular(system, beta[..., None] * v, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(
        system, beta[..., None] * gamma.exp()[..., None] * k, upper=False, unitriangular=True
    )
    qk = (q @ k.transpose(-1, -2)) * decay  # causal incl. diagonal (decay is 0 above it)
    q_dec = q * gamma.exp()[..., None]
    k_dec = k * (gamma[..., -1:] - gamma).exp()[..., None]
    out = torch.empty(b, h, n, chunk, dv, dtype=torch.float32, device=q.device)
    # written in place, not stacked from a list: at the quantizer's shapes this is 0.5 GB that would exist twice
    states = torch.empty(b, n, h, dk, dv, dtype=torch.float32, device=q.device) if chunk_states else None
    state = state.float()
    for i in range(n):
        if states is not None:
            states[:, i] = state
        u = u0[:, :, i] - w[:, :, i] @ state
        out[:, :, i] = q_dec[:, :, i] @ state + qk[:, :, i] @ u
        state = state * gamma[:, :, i, -1].exp()[..., None, None] + k_dec[:, :, i].transpose(-1, -2) @ u
    out = out.reshape(b, h, n * chunk, dv)[:, :, :t_len].transpose(1, 2)
    return out, state, states


def preview_mix(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor,
    logit_scale: torch.Tensor,
    history_bias: torch.Tensor,
    history_c: torch.Tensor,
    n_prefix: torch.Tensor,
    block_size: int,
) -> torch.Tensor:
    """The block-diffusion preview operator of a GDN layer. RECONSTRUCTED from third-party engines'
    descriptions (shared/docs/clover-model.md); every later correction belongs here and nowhere else.

    q, k [B,T,Hv,Dk] L2-normalised (not scaled), v [B,T,Hv,Dv], state S [B,Hv,Dk,Dv] (the clean prefix state,
    only read), per-head parameters [Hv], n_prefix [B] committed rows before the block.
    For each value head h and block row t: block logits ℓ[t,s] = logit_scale[h]·(q̂_t·k̂_s) over every block row
    s (bidirectional); one history slot with logit history_bias[h] + history_c[h]·ln(n_prefix/block_size);
    p = softmax([history, ℓ[t,:]]); o_t = p_hist·(Sᵀq̂_t·Dk^-0.5) + Σ_s p[t,s]·v_s.
    With no prefix (n_prefix = 0) the history slot is empty and gets no weight.
    Returns o [B,T,Hv,Dv] fp32.
    """
    q, k, v = q.float(), k.float(), v.float()
    dk = q.shape[-1]
    block_logits = logit_scale.float()[None, :, None, None] * torch.einsum("bthd,bshd->bhts", q, k)
    n = n_prefix.to(q.device).float()
    log_len = torch.log(n.clamp(min=1.0) / block_size)  # [B]
    hist = history_bias.float()[None, :] + history_c.float()[None, :] * log_len[:, None]  # [B,Hv]
    hist = torch.where(n[:, None] > 0, hist, torch.full_like(hist, float("-inf")))
    hist = hist[:, :, None, None].expand(-1, -1, q.shape[1], 1)
    p = torch.softmax(torch.cat([hist, block_logits], -1), -1)  # [B,Hv,T,1+T]
    read = torch.einsum("bhkv,bthk->bhtv", state.float(), q) * dk**-0.5
    out = p[..., :1] * read + p[..., 1:] @ v.transpose(1, 2)
    return out.transpose(1, 2)


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: CloverConfig) -> None:
        super().__init__()
        self.hk, self.hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.dk, self.dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.kernel = cfg.linear_conv_kernel_dim
        self.block_size = cfg.diffusion.block_size
        h, conv = cfg.hidden_size, cfg.gdn_conv_dim
        self.in_proj_qkv = nn.Linear(h, conv, bias=False)
        self.in_proj_z = nn.Linear(h, cfg.gdn_value_dim, bias=False)
        self.in_proj_b = nn.Linear(h, self.hv, bias=False)
        self.in_proj_a = nn.Linear(h, self.hv, bias=False)
        self.conv1d = nn.Conv1d(conv, conv, self.kernel, groups=conv, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.zeros(self.hv))
        self.norm = GatedRMSNorm(self.dv, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(cfg.gdn_value_dim, h, bias=False)
        # block-diffusion extras (known names, reconstructed shapes)
        self.conv_right_weight = nn.Parameter(torch.zeros(conv, self.kernel - 1))
        self.bd_softmax_logit_scale = nn.Parameter(torch.ones(self.hv))
        self.bd_softmax_history_bias = nn.Parameter(torch.zeros(self.hv))
        self.bd_softmax_history_c = nn.Parameter(torch.zeros(self.hv))
        # A fused replacement for the preview from pre-conv rows to the normed output, (self, rows, ring, state,
        # n_prefix [B], z) -> [B,T,Hv·Dv]: the runtime installs its Triton kernel on CUDA
        # (runtime/kernels/gdn_preview.py); None: the PyTorch path below, which is the definition.
        self.preview_kernel: Callable | None = None
        # A fused replacement for a causal pass (a commit, a prefill chunk) from pre-conv rows to the mixed
        # output and new state, (self, rows, ring, state, a, b) -> (o [B,T,Hv,Dv] fp32, state): the runtime
        # installs its Triton kernels on CUDA (runtime/kernels/gdn_causal.py: row by row for a block,
        # gdn_chunked.py's chunked form past it); None: `delta_rule` and the pieces before it, the definition.
        self.causal_kernel: Callable | None = None
        # With a fused kernel: one projection computing [in_proj_qkv(x), in_proj_z(x)] (the runtime's packed
        # merge, whose columns the two modules then view); None: the two calls
        self.in_proj_qkvz: nn.Module | None = None

    # ------------------------------------------------------------------ pieces
    def conv(self, rows: torch.Tensor, ring: torch.Tensor | None, right: bool) -> torch.Tensor:
        """Depthwise conv of pre-conv rows [B,T,C] after the ring [B,K-1,C] (zeros when None), then SiLU.
        With `right`, the preview's right taps add Σ_d rows[t+d]·right[:, d-1] (nothing past the block end)."""
        b, t, c = rows.shape
        if ring is None:
            ring = rows.new_zeros(b, self.kernel - 1, c)
        # K shifted multiply-adds instead of F.conv1d: same sums, and far cheaper to differentiate on CPU
        xs = torch.cat([ring.to(rows.dtype), rows], 1)  # [B,K-1+T,C]
        w = self.conv1d.weight[:, 0, :].to(rows.dtype)  # [C,K]
        out = xs[:, 0:t] * w[:, 0]
        for j in range(1, self.kernel):
            out = out + xs[:, j : j + t] * w[:, j]
        if right:
            padded = F.pad(rows, (0, 0, 0, self.kernel - 1))
            rw = self.conv_right_weight.to(rows.dtype)
            for d in range(1, self.kernel):
                out = out + padded[:, d : d + t] * rw[:, d - 1]
        return F.silu(out)

    def split_heads(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Post-conv rows → q̂, k̂ (L2-normalised, expanded to value heads) and v."""
        b, t, _ = mixed.shape
        kd = self.hk * self.dk
        q = mixed[..., :kd].reshape(b, t, self.hk, self.dk)
        k = mixed[..., kd : 2 * kd].reshape(b, t, self.hk, self.dk)
        v = mixed[..., 2 * kd :].reshape(b, t, self.hv, self.dv)
        q, k = l2_normalize(q.float()), l2_normalize(k.float())
        rep = self.hv // self.hk
        if rep > 1:
            q, k = q.repeat_interleave(rep, 2), k.repeat_interleave(rep, 2)
        return q, k, v

    def gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        beta = torch.sigmoid(self.in_proj_b(x).float())
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias.float())
        return g, beta

    def output(self, o: torch.Tensor, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        return self.out_proj(self.gated_norm(o, x, z))

    def gated_norm(self, o: torch.Tensor, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """`output` before out_proj: the gated RMSNorm of o [B,T,Hv,Dv] with z (from x when None), [B,T,Hv·Dv]."""
        b, t = x.shape[:2]
        z = (self.in_proj_z(x) if z is None else z).reshape(b, t, self.hv, self.dv)
        return self.norm(o, z).reshape(b, t, -1)  # in z's dtype, x's

    def delta_rule(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q = q * self.dk**-0.5
        if q.is_cuda and _fla_chunk is not None:  # pragma: no cover - GPU only
            fn = _fla_recurrent if q.shape[1] == 1 else _fla_chunk
            o, new_state = fn(q, k, v.float(), g, beta, scale=1.0, initial_state=state, output_final_state=True)
            return o.float(), new_state.float()
        if q.shape[1] == 1:
            return recurrent_delta_rule(q, k, v, g, beta, state)
        o, new_state, _ = chunk_delta_rule(q, k, v, g, beta, state)
        return o, new_state

    # ------------------------------------------------------------------ passes
    def forward(
        self, x: torch.Tensor, cache: GDNCache | None, preview: bool, n_prefix: int | torch.Tensor
    ) -> torch.Tensor:
        fused_causal = not preview and self.causal_kernel is not None
        fused = (preview and self.preview_kernel is not None) or fused_causal
        rows, z = self.project_rows(x, fused)
        ring, state = self.start(cache, x)
        if preview:
            n = self.prefix_rows(n_prefix, x)
            if fused:
                z = self.in_proj_z(x) if z is None else z
                return self.out_proj(self.preview_kernel(self, rows, ring, state, n, z))
            q, k, v = self.split_heads(self.conv(rows, ring, right=True))
            o = preview_mix(
                q, k, v, state, self.bd_softmax_logit_scale, self.bd_softmax_history_bias,
                self.bd_softmax_history_c, n, self.block_size,
            )
            return self.output(o, x)
        o, _, _ = self.causal(x, rows, ring, state, cache, fused_causal)
        return self.output(o, x, z)

    def project_rows(self, x: torch.Tensor, fused: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(pre-conv rows, the gate z or None = not made yet): with a fused kernel one projection call for both
        (the runtime's packed merge, `in_proj_qkvz`)."""
        if fused and self.in_proj_qkvz is not None:
            return self.in_proj_qkvz(x).split([self.in_proj_qkv.out_features, self.in_proj_z.out_features], -1)
        return self.in_proj_qkv(x), None

    def start(self, cache: GDNCache | None, x: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The committed ring (None: nothing committed) and state (zeros when none) that rows x follow."""
        ring = cache.ring if cache is not None else None
        state = cache.state if cache is not None else None
        if state is None:
            state = x.new_zeros(x.shape[0], self.hv, self.dk, self.dv, dtype=torch.float32)
        return ring, state

    @staticmethod
    def prefix_rows(n_prefix: int | torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Committed rows before the block, [B]: from an int, or the runtime's 0-dim device tensor (a CUDA graph
        reads it)."""
        b = x.shape[0]
        return n_prefix.expand(b) if torch.is_tensor(n_prefix) else torch.full((b,), n_prefix, device=x.device)

    def causal(
        self, x: torch.Tensor, rows: torch.Tensor, ring: torch.Tensor | None, state: torch.Tensor,
        cache: GDNCache | None, fused: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The causal core of rows x over their pre-conv rows after (ring, state): (o [B,T,Hv,Dv] fp32, new ring,
        new state), which go to `cache` too; `fused`: the runtime's kernel."""
        if fused:
            o, new_state = self.causal_kernel(self, rows, ring, state, self.in_proj_a(x), self.in_proj_b(x))
        else:
            q, k, v = self.split_heads(self.conv(rows, ring, right=False))
            g, beta = self.gates(x)
            o, new_state = self.delta_rule(q, k, v, g, beta, state)
        k1 = self.kernel - 1
        if rows.shape[1] >= k1:  # the last pre-conv rows (not a concatenation: a prefill chunk has 512)
            new_ring = rows[:, -k1:].clone()
        else:
            prev = ring if ring is not None else rows.new_zeros(rows.shape[0], k1, rows.shape[-1])
            new_ring = torch.cat([prev.to(rows.dtype), rows], 1)[:, -k1:].clone()
        if cache is not None:
            cache.write(new_ring, new_state)
        return o, new_ring, new_state

    def forward_merged(
        self, x: torch.Tensor, cache: GDNCache, n_prefix: int | torch.Tensor, n_commit: int
    ) -> torch.Tensor:
        """A merged pass (`CloverModel.commit_and_preview`): rows [:n_commit] commit a block (causal; the new
        ring and state go to the cache), the rest preview the next block from that ring and state, `n_prefix`
        + n_commit rows after the start. in_proj_qkv/z and out_proj run once over both parts."""
        c = n_commit
        fused = self.preview_kernel is not None and self.causal_kernel is not None
        rows, z = self.project_rows(x, fused)
        z = self.in_proj_z(x) if z is None else z
        o_c, ring, state = self.causal(x[:, :c], rows[:, :c], *self.start(cache, x), cache, fused)
        n = self.prefix_rows(n_prefix + c, x)
        if fused:
            normed_p = self.preview_kernel(self, rows[:, c:], ring, state, n, z[:, c:])
        else:
            q, k, v = self.split_heads(self.conv(rows[:, c:], ring, right=True))
            o_p = preview_mix(q, k, v, state, self.bd_softmax_logit_scale, self.bd_softmax_history_bias,
                              self.bd_softmax_history_c, n, self.block_size)
            normed_p = self.gated_norm(o_p, x[:, c:], z[:, c:])
        return self.out_proj(torch.cat([self.gated_norm(o_c, x[:, :c], z[:, :c]), normed_p], 1))

    def forward_all_blocks(
        self, clean: torch.Tensor, noisy: torch.Tensor, block_size: int, row: torch.Tensor, blk: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Training form: the causal pass over `clean` [B,T,H] (T a multiple of `block_size`) and a preview of
        each block `noisy` [M,bs,H] (block `blk[m]` of sequence `row[m]`) against the clean ring and state at
        that block's start."""
        b, t, _ = clean.shape
        rows_c = self.in_proj_qkv(clean)
        q, k, v = self.split_heads(self.conv(rows_c, None, right=False))
        g, beta = self.gates(clean)
        state0 = clean.new_zeros(b, self.hv, self.dk, self.dv, dtype=torch.float32)
        o_c, _, states = chunk_delta_rule(q * self.dk**-0.5, k, v, g, beta, state0, block_size, chunk_states=True)
        # ring of a block: the clean pre-conv rows just before it (zeros before the sequence start)
        k1 = self.kernel - 1
        padded = torch.cat([rows_c.new_zeros(b, k1, rows_c.shape[-1]), rows_c], 1)
        starts = blk * block_size
        rings = padded[row[:, None], starts[:, None] + torch.arange(k1, device=clean.device)[None, :]]  # [M,K-1,C]
        qn, kn, vn = self.split_heads(self.conv(self.in_proj_qkv(noisy), rings, right=True))
        # every block in order (the quantizer; nonzero() and _block_items list blocks row-major): a view, not a copy
        start_states = states.flatten(0, 1) if row.numel() == states.shape[0] * states.shape[1] else states[row, blk]
        o_n = preview_mix(
            qn, kn, vn, start_states, self.bd_softmax_logit_scale,
            self.bd_softmax_history_bias, self.bd_softmax_history_c, starts, self.block_size,
        )
        return self.output(o_c, clean), self.output(o_n, noisy)
