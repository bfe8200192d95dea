"""The runtime's Triton kernels: W4A16 / W8A16 on the GPTQ layout (a dense linear for small M, a fused MoE
addressed by cache slot: `w4a16.py`), the preview pass's fused GDN core (`gdn_preview.py`) and split-window
attention (`preview_attention.py`), the causal GDN pass (`gdn_causal.py`; a prefill's chunked form:
`gdn_chunked.py`), and a layer's small ops (`layer_ops.py`). `compile_check.py` compiles them
all for sm_90 / sm_120 on a machine without a GPU.

`linear_w4a16` and `moe_w4a16` pick the Triton kernels (`w4a16.py`) when the inputs are on CUDA and triton
imports, and the pure-PyTorch reference (`reference.py`, the spec) otherwise. Environment:

- `CLOVER_FORCE_TRITON=1` together with `TRITON_INTERPRET=1`: run the Triton kernels on CPU tensors through
  Triton's interpreter (tests). Both must be set before the first call (triton reads TRITON_INTERPRET when the
  kernels are defined).
- `CLOVER_DISABLE_TRITON=1`: always use the reference (debugging, bisecting a kernel bug on a GPU).
- `CLOVER_DISABLE_FUSED=1`: keep the W4A16 kernels but run the model's own PyTorch path for the GDN preview,
  preview attention, norms, router and slot mapping (the before/after of a benchmark; bisecting).
- `CLOVER_W4A16_FORM=unpacked`: the W4A16 kernels unpack each weight tile into K order instead of the
  field-wise dots (`w4a16.py`; the before/after of the default's change, on a GPU).
- `CLOVER_W4A16_FOLD=0`: the routed experts' field-wise form before the zero fold (`MoeConfig.folded`).
- `CLOVER_W4A16_SWAP=0`: the routed experts' folded dots with the weights as the MMA's second operand, the form
  before the transposed one (`MoeConfig.swap`).
- `CLOVER_W4A16_REPACK=0`: dense packed linears keep the GPTQ row order at load (`dense_k_tile`).

Nothing here imports triton at module level.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache

import torch
from torch import Tensor

from .reference import (PackedStack, check_packed, dequantize_w, field_major, field_major_rows, linear_w4a16_ref,
                        moe_w4a16_ref, repacked_input)

__all__ = [
    "PackedStack",
    "check_packed",
    "dense_k_tile",
    "dequantize_w",
    "expert_planes",
    "field_major",
    "field_major_rows",
    "gdn_causal_kernel",
    "gdn_preview_kernel",
    "fused_layer_ops",
    "linear_w4a16",
    "linear_w4a16_ref",
    "moe_w4a16",
    "moe_w4a16_ref",
    "planes3_in_place",
    "preview_attention_kernel",
    "triton_available",
]


@lru_cache(maxsize=None)
def triton_available() -> bool:
    """True when triton and our kernels import (on a CPU-only machine triton may import but not run)."""
    try:
        from . import w4a16  # noqa: F401
    except Exception:  # ImportError, or triton failing to find a backend at import
        return False
    return True


def _use_triton(x: Tensor) -> bool:
    return triton_on(x.device)


def triton_on(device: torch.device) -> bool:
    if os.environ.get("CLOVER_DISABLE_TRITON") == "1":
        return False
    if device.type == "cuda":
        return triton_available()
    forced = os.environ.get("CLOVER_FORCE_TRITON") == "1" and os.environ.get("TRITON_INTERPRET") == "1"
    return forced and triton_available()


def linear_w4a16(x: Tensor, qweight: Tensor, scales: Tensor, qzeros: Tensor, group_size: int, bits: int = 4,
                 k_tile: int = 0) -> Tensor:
    """x [..., K] @ dequant(W [K, N]) in x's dtype; see `linear_w4a16_ref` for the exact math. k_tile ≠ 0: the
    rows of qweight are repacked field-major (`field_major_rows`, see `dense_k_tile`)."""
    if _use_triton(x):
        from .w4a16 import linear_w4a16_triton

        return linear_w4a16_triton(x, qweight, scales, qzeros, group_size, bits, k_tile=k_tile)
    if k_tile:
        lead, k = x.shape[:-1], x.shape[-1]
        x = repacked_input(x.reshape(-1, k), k_tile, bits).reshape(*lead, k)
    return linear_w4a16_ref(x, qweight, scales, qzeros, group_size, bits)


def kernel_forms(device: torch.device) -> dict | None:
    """Which W4A16 forms a run on `device` uses by default (the environment switches above), with the triton that
    compiles them — for a report to say what it timed (BENCHMARKS.md: triton 3.6 and 3.8 compile the same MoE to
    different code). None where the Triton kernels do not run."""
    if not triton_on(device):
        return None
    import triton

    from .w4a16 import moe_config

    moe = moe_config(32, 8, 8192, device)
    return {"triton": triton.__version__, "fields": moe.fields, "moe_folded": moe.folded, "moe_swap": moe.swap,
            "dense_repacked": dense_k_tile(2048, 128, 8, device) > 0,  # a GDN input projection's rows
            # 3-bit experts at the real shapes, group 128
            "moe3_planes": expert_planes(3, 2048, 512, 128, 128, torch.bfloat16, device),
            "gdn_preview": _gdn_preview_form()}  # (a tuning table's entry may choose per call)


def _gdn_preview_form() -> str:
    from .gdn_preview import preview_config

    return preview_config().form


def dense_k_tile(k: int, group_size: int, bits: int, device: torch.device) -> int:
    """The tile a dense packed linear's rows are repacked field-major in at load (`field_major_rows`), or 0 to
    keep the GPTQ order: where the Triton kernels run on `device` with their field-wise dots (the default tile
    form), whose loads of x then are contiguous and pipelined instead of 2-byte gathers. compile_check --sass,
    sm_90: W8A16 2048→8192 6.07 → 5.3 instructions per weight, W4A16 2048→8192 4.84 → 4.44, W8A16 4096→2048
    8.0 → 6.64. `CLOVER_W4A16_REPACK=0` keeps the GPTQ order (a before/after on a GPU)."""
    if os.environ.get("CLOVER_W4A16_REPACK", "1") == "0" or not triton_on(device):
        return 0
    from .w4a16 import _block_k, _default_fields, _fields_ok

    try:
        tile = _block_k(k, group_size, bits)
    except ValueError:
        return 0
    return tile if _fields_ok(_default_fields(), tile, bits) and k % tile == 0 else 0


def expert_planes(bits: int, hidden: int, inter: int, group_gu: int, group_down: int, dtype: torch.dtype,
                  device: torch.device) -> bool:
    """Whether a load rewrites 3-bit experts (device and host slabs) into the planes layout
    (`reference.planes3_rows`), which the Triton MoE reads field-wise (`w4a16._planes3_dot`: compile_check --sass,
    sm_90 / sm_120 instructions per weight gate/up 7.75 / 7.16 → 4.93 / 4.37, down 8.86 / 7.8 → 7.06 / 6.56, no
    shared-memory store per weight):
    3-bit experts, where the Triton kernels run, 16-bit activations, every K tile of 128 inputs inside one group.
    CLOVER_W3_PLANES=0 keeps GPTQ's layout and the unpacking form (a before/after on a GPU)."""
    if bits != 3 or os.environ.get("CLOVER_W3_PLANES", "1") == "0" or not triton_on(device):
        return False
    from .reference import PLANES_TILE

    return (dtype in (torch.bfloat16, torch.float16)
            and all(v % PLANES_TILE == 0 for v in (hidden, inter, group_gu, group_down)))


def moe_w4a16(x: Tensor, slot_ids: Tensor, weights: Tensor, gate_up: PackedStack, down: PackedStack,
              host: tuple[PackedStack, PackedStack] | None = None, install: Tensor | None = None) -> Tensor:
    """Routed experts of one layer: x [M, H], slot_ids/weights [M, topk] → [M, H]; see `moe_w4a16_ref`. host: the
    layer's experts in (pinned) host memory, read in place for slots ≥ S; install: where they are read through
    into (a read-through install)."""
    if _use_triton(x):
        from .w4a16 import moe_w4a16_triton

        return moe_w4a16_triton(x, slot_ids, weights, gate_up, down, host=host, install=install)
    return moe_w4a16_ref(x, slot_ids, weights, gate_up, down, host, install)


def planes3_in_place(qweight: Tensor) -> None:
    """A 3-bit qweight [S, K·3/32, N] rewritten in place into the planes layout: one Triton launch where the
    kernels run (the load's device cache), else `reference.planes3_rows` in pieces."""
    if triton_on(qweight.device):
        from .w4a16 import planes3_rows_triton

        planes3_rows_triton(qweight)
    else:
        from .reference import planes3_rows

        planes3_rows(qweight, out=qweight, chunk_elems=1 << 21)


def _fused_on(device: torch.device) -> bool:
    return triton_on(device) and os.environ.get("CLOVER_DISABLE_FUSED") != "1"


def gdn_preview_kernel(gdn, device: torch.device) -> Callable | None:
    """The fused GDN preview for `GatedDeltaNet.preview_kernel` where the Triton kernels run on `device` and the
    layer's head dims suit it; None keeps the model's PyTorch path."""
    if not _fused_on(device):
        return None
    from .gdn_preview import supports, tuned_gdn_preview

    # the form per call: this GPU's tuning table, else CLOVER_GDN_PREVIEW (split: the mix over (head, value
    # slice) programs, then the gated norm), else one launch a layer
    return tuned_gdn_preview if supports(gdn) else None


def gdn_causal_kernel(gdn, device: torch.device) -> Callable | None:
    """The fused causal GDN pass for `GatedDeltaNet.causal_kernel` (a commit row by row, `gdn_causal.py`; a prefill
    chunk in the chunked form, `gdn_chunked.py`) where the Triton kernels run on `device` and the layer's head
    dims suit it; None keeps the model's PyTorch path."""
    if not _fused_on(device):
        return None
    from .gdn_causal import fused_gdn_causal, supports

    return fused_gdn_causal if supports(gdn) else None


def fused_layer_ops(device: torch.device):
    """The module of fused per-layer ops (`layer_ops.py`: rms_norm_zc, route_topk, optimistic_slots) where the
    Triton kernels run on `device`, else None."""
    if not _fused_on(device):
        return None
    from . import layer_ops as ops

    return ops


def preview_attention_kernel(head_dim: int, device: torch.device) -> Callable | None:
    """The split-window preview attention for `Attention.preview_kernel` where the Triton kernels run on
    `device` and the head dim suits it; None keeps the model's PyTorch path."""
    if not _fused_on(device):
        return None
    from .preview_attention import preview_attention, supports

    return preview_attention if supports(head_dim) else None
