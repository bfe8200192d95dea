"""W4A16 / W8A16 kernels: the PyTorch reference pinned to the pack format, and the Triton kernels (run through
Triton's interpreter on CPU tensors) pinned to the reference. Random inputs, never zeros; small shapes."""

from __future__ import annotations

import os

import pytest
import torch

# Triton decides between compiling and interpreting when a kernel is defined: set this before anything imports
# triton or clover_local.runtime.kernels.w4a16. With a GPU the kernels are compiled and tested on CUDA tensors.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from clover_local.runtime.kernels import PackedStack, linear_w4a16, moe_w4a16
from clover_local.runtime.kernels.reference import linear_w4a16_ref, moe_w4a16_ref
from quantize.gptq_format import default_g_idx, dequantize, pack_weight

try:
    import triton  # noqa: F401

    _TRITON_ERR = None
except Exception as err:  # pragma: no cover - depends on the environment
    _TRITON_ERR = f"triton cannot be imported ({type(err).__name__}: {err}); pip install 'triton>=3.0'"

needs_triton = pytest.mark.skipif(_TRITON_ERR is not None, reason=_TRITON_ERR or "")
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if _INTERPRETED or not torch.cuda.is_available() else "cuda"


def _random_pack(k: int, n: int, group: int, bits: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A GPTQ pack of a random [out=n, in=k] weight: codes over the full range, zeros in [1, 2^bits), scales > 0."""
    maxq = (1 << bits) - 1
    q = torch.randint(0, maxq + 1, (n, k), generator=gen)
    zeros = torch.randint(1, maxq + 1, (n, k // group), generator=gen)
    scales = (torch.rand(n, k // group, generator=gen) * 0.02 + 0.005) / 2.0 ** (bits - 4)
    return pack_weight(q, scales, zeros, default_g_idx(k, group), bits)


def _x(m: int, k: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(m, k, generator=gen)
    x = torch.where(x.abs() < 1e-3, torch.full_like(x, 0.5), x)  # never zeros
    return x.to(dtype)


def _assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    else:  # bf16 rounds at 2^-8: allow 2–3 ulps of the output's scale (interpreted runs measure ≤ 0.9%)
        torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-2 * want.abs().max().item())


# --- the reference is the pack format ------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [64, 128])
def test_reference_linear_matches_gptq_format(bits: int, group: int) -> None:
    gen = torch.Generator().manual_seed(bits * 1000 + group)
    k, n = 256, 192
    pack = _random_pack(k, n, group, bits, gen)
    x = _x(5, k, torch.float32, gen)
    want = x @ dequantize(pack, bits).t()  # dequantize gives [out, in]
    got = linear_w4a16_ref(x, pack["qweight"], pack["scales"], pack["qzeros"], group, bits)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    bf = linear_w4a16_ref(x.bfloat16(), pack["qweight"], pack["scales"], pack["qzeros"], group, bits)
    assert bf.dtype == torch.bfloat16


def test_reference_rejects_mismatched_shapes() -> None:
    gen = torch.Generator().manual_seed(1)
    pack = _random_pack(256, 192, 64, 4, gen)
    with pytest.raises(ValueError, match="group_size"):
        linear_w4a16_ref(_x(1, 256, torch.float32, gen), pack["qweight"], pack["scales"], pack["qzeros"], 100)
    with pytest.raises(ValueError, match="scales"):
        linear_w4a16_ref(_x(1, 256, torch.float32, gen), pack["qweight"], pack["scales"], pack["qzeros"], 128)
    with pytest.raises(ValueError, match="features"):
        linear_w4a16_ref(_x(1, 128, torch.float32, gen), pack["qweight"], pack["scales"], pack["qzeros"], 64)


# --- MoE stacks as strided views into one cache buffer -----------------------------------------------------

H, I, SLOTS, TOPK = 128, 64, 6, 2


def _slot_layout(shapes: list[tuple[tuple[int, ...], torch.dtype]], align: int = 256) -> tuple[list[int], int]:
    """Byte offsets of each tensor inside one slot, and the slot's (padded) byte size."""
    offsets, pos = [], 0
    for shape, dtype in shapes:
        pos = (pos + align - 1) // align * align
        offsets.append(pos)
        pos += torch.Size(shape).numel() * dtype.itemsize
    return offsets, (pos + align - 1) // align * align + align  # a spare gap: slot stride > one slot's bytes


def _cache_stacks(packs: list[dict[str, dict[str, torch.Tensor]]], bits: int, groups: tuple[int, int], device: str,
                  pin: bool = False):
    """Lay each expert's gate_up / down tensors into one uint8 slab per slot (like the expert cache) and return
    PackedStacks that view the slab with a slot stride larger than any one tensor. pin: in pinned host memory
    (the host store's slabs, which CUDA kernels read in place)."""
    names = [(proj, t) for proj in ("gate_up", "down") for t in ("qweight", "scales", "qzeros")]
    first = packs[0]
    shapes = [(tuple(first[p][t].shape), first[p][t].dtype) for p, t in names]
    offsets, slot_bytes = _slot_layout(shapes)
    buf = torch.zeros(len(packs) * slot_bytes + 512, dtype=torch.uint8)  # + 512: the stacks start mid-buffer
    base = 128
    for s, pack in enumerate(packs):
        for (p, t), off in zip(names, offsets):
            raw = pack[p][t].contiguous().view(torch.uint8).reshape(-1)
            start = base + s * slot_bytes + off
            buf[start : start + raw.numel()] = raw
    buf = buf.pin_memory() if pin else buf.to(device)
    views = {}
    for ((p, t), off), (shape, dtype) in zip(zip(names, offsets), shapes):
        itemsize = dtype.itemsize
        typed = buf.view(dtype)  # every offset is a multiple of the itemsize
        views[(p, t)] = typed.as_strided(
            (len(packs), *shape), (slot_bytes // itemsize, shape[1], 1), (base + off) // itemsize
        )
    stacks = tuple(
        PackedStack(views[(p, "qweight")], views[(p, "scales")], views[(p, "qzeros")], g, bits)
        for p, g in zip(("gate_up", "down"), groups)
    )
    assert stacks[0].qweight.stride(0) > stacks[0].qweight[0].numel()
    return stacks


def _moe_case(bits: int, groups: tuple[int, int], seed: int, device: str = "cpu", inter: int = I):
    gen = torch.Generator().manual_seed(seed)
    packs = [
        {"gate_up": _random_pack(H, 2 * inter, groups[0], bits, gen),
         "down": _random_pack(inter, H, groups[1], bits, gen)}
        for _ in range(SLOTS)
    ]
    gate_up, down = _cache_stacks(packs, bits, groups, device)
    return gen, packs, gate_up, down


def _route(m: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    slot_ids = torch.stack([torch.randperm(SLOTS, generator=gen)[:TOPK] for _ in range(m)])
    weights = torch.softmax(torch.randn(m, TOPK, generator=gen), dim=-1) + 0.05
    return slot_ids, weights


def test_reference_moe_matches_dense_experts() -> None:
    """The MoE reference against per-token dense experts built from `quantize.gptq_format.dequantize`."""
    bits, groups = 4, (64, 32)
    gen, packs, gate_up, down = _moe_case(bits, groups, seed=7)
    m = 7
    x = _x(m, H, torch.float32, gen)
    slot_ids, weights = _route(m, gen)
    want = torch.zeros(m, H)
    for i in range(m):
        for j in range(TOPK):
            pack = packs[int(slot_ids[i, j])]
            gu = x[i] @ dequantize(pack["gate_up"], bits).t()
            act = torch.nn.functional.silu(gu[:I]) * gu[I:]
            want[i] += weights[i, j] * (act @ dequantize(pack["down"], bits).t())
    got = moe_w4a16_ref(x, slot_ids, weights, gate_up, down)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())


# --- Triton kernels vs the reference -----------------------------------------------------------------------


@pytest.fixture
def force_triton(monkeypatch):
    """Make the dispatchers take the Triton path: compiled on CUDA tensors, interpreted on CPU ones."""
    from clover_local.runtime.kernels import w4a16

    if DEVICE == "cpu" and not w4a16._INTERPRET:
        pytest.skip("no GPU, and TRITON_INTERPRET=1 was not in force when the kernels were defined")
    monkeypatch.delenv("CLOVER_DISABLE_TRITON", raising=False)
    monkeypatch.setenv("CLOVER_FORCE_TRITON", "1")


def _dev(*tensors):
    return tuple(t.to(DEVICE) for t in tensors)


def _two_runs(gen: torch.Generator, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, slot ids and weights of 24 rows on the device, slot 3 in 18 of them: one slot with two BLOCK_M runs."""
    x = _x(24, H, dtype, gen)
    slot_ids, weights = _route(24, gen)
    slot_ids[:18, 0] = 3
    slot_ids[:18, 1] = torch.where(slot_ids[:18, 1] == 3, 0, slot_ids[:18, 1])
    return _dev(x, slot_ids, weights.to(dtype))


@needs_triton
@pytest.mark.parametrize(
    "m,bits,group,dtype",
    [
        (1, 4, 128, torch.bfloat16),
        (5, 4, 64, torch.float32),
        (32, 4, 128, torch.bfloat16),
        (5, 8, 128, torch.bfloat16),
        (32, 8, 64, torch.float32),
        (33, 4, 64, torch.float16),
    ],
)
def test_triton_linear_matches_reference(force_triton, m: int, bits: int, group: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(m * 100 + bits * 10 + group)
    k, n = 256, 192
    pack = _random_pack(k, n, group, bits, gen)
    x, qweight, scales, qzeros = _dev(_x(m, k, dtype, gen), pack["qweight"], pack["scales"], pack["qzeros"])
    args = (qweight, scales, qzeros, group, bits)
    _assert_close(linear_w4a16(x, *args), linear_w4a16_ref(x, *args), dtype)


@needs_triton
def test_triton_linear_split_k_and_strided_input(force_triton) -> None:
    from clover_local.runtime.kernels.w4a16 import LinearConfig, linear_w4a16_triton

    gen = torch.Generator().manual_seed(3)
    k, n, group = 256, 96, 64
    pack = _random_pack(k, n, group, 4, gen)
    x, qweight, scales, qzeros = _dev(_x(3, 2 * k, torch.float32, gen), pack["qweight"], pack["scales"], pack["qzeros"])
    x = x[:, ::2]  # non-contiguous rows and columns
    args = (qweight, scales, qzeros, group, 4)
    want = linear_w4a16_ref(x, *args)
    # 8 K tiles of 32: split 4 even; 3 asked (the launcher takes 2: a third split would run past K into x's next
    # row and past the weight, NaN here); 4 tiles of 64 in 3 asked
    for cfg in (LinearConfig(16, 32, 32, split_k=4), LinearConfig(16, 32, 32, split_k=3),
                LinearConfig(16, 64, 64, split_k=3)):
        _assert_close(linear_w4a16_triton(x, *args, config=cfg), want, torch.float32)


@needs_triton
def test_launchers_name_their_launches_for_the_profile(force_triton) -> None:
    """The bench's component profile splits a call by launch (`runtime/segments.py`): the fused MoE names its
    align, gate/up, down and sum, the two passes with their shares of an expert's bytes (codes, scales, zeros of
    each matrix); a dense call names its split-K sum, and only when it splits."""
    from clover_local.runtime import segments
    from clover_local.runtime.kernels.w4a16 import LinearConfig, linear_w4a16_triton, moe_w4a16_triton

    seen: list[tuple[str, float]] = []

    def sink(name: str, share: float) -> None:
        seen.append((name, share))

    gen, packs, gate_up, down = _moe_case(4, (64, 32), seed=11, device=DEVICE)
    x = _x(5, H, torch.float32, gen)
    slot_ids, weights = _route(5, gen)
    x, slot_ids, weights = _dev(x, slot_ids, weights)
    pack = _random_pack(H, 96, 64, 4, gen)  # 4 K tiles of 32
    args = _dev(pack["qweight"], pack["scales"], pack["qzeros"])
    assert not segments.listening()  # (the gate/up share is computed only for a listener)
    segments.listen(sink)
    try:
        assert segments.listening()
        moe_w4a16_triton(x, slot_ids, weights, gate_up, down)
        moe = list(seen)
        seen.clear()
        linear_w4a16_triton(x, *args, 64, 4, config=LinearConfig(16, 32, 32, split_k=2))
        split = list(seen)
        seen.clear()
        linear_w4a16_triton(x, *args, 64, 4, config=LinearConfig(16, 32, 32, split_k=1))
        assert seen == []
    finally:
        segments.stop(sink)
    assert not segments.listening()
    assert [n for n, _ in moe] == ["align", "gate/up", "down", "sum"]
    nbytes = {k: sum(t.numel() * t.element_size() for t in (p[k]["qweight"], p[k]["scales"], p[k]["qzeros"]))
              for p in packs[:1] for k in ("gate_up", "down")}
    up_share = nbytes["gate_up"] / (nbytes["gate_up"] + nbytes["down"])
    assert [s for _, s in moe] == pytest.approx([0.0, up_share, 1 - up_share, 0.0])
    assert 0.6 < up_share < 0.7  # gate/up: 2 × I outputs of H inputs; down: H outputs of I inputs (I = H/2 here)
    assert split == [("split-K sum", 0.0)]


def test_k_split_shares_the_k_tiles_evenly(monkeypatch) -> None:
    """The K loop has a static trip count and no bound: every split must get the same whole number of tiles,
    whatever a heuristic or a tuned table asks for; and the heuristic at the real shapes on an H200's 132 SMs (the
    merged attention q/k/v, 2048 → 9216 at 32 rows, asked for 3 splits of 16 tiles and read past K: NaN)."""
    from clover_local.runtime.kernels import w4a16

    for k_tiles in range(1, 65):
        for asked in range(0, 20):
            per, split = w4a16.k_split(k_tiles, asked)
            assert per * split == k_tiles and 1 <= split <= max(1, asked)
            assert all(k_tiles % s for s in range(split + 1, min(asked, k_tiles) + 1))  # the most that divide
    monkeypatch.setattr(w4a16, "_num_sms", lambda device: 132)
    for k, n in ((2048, 9216), (2048, 8192), (2048, 4096), (4096, 2048), (2048, 1024), (512, 2048), (2048, 512),
                 (2048, 12288), (2048, 248320), (2048, 3000), (3072, 2048)):
        for m in (1, 32, 64, 512):
            for bits in (4, 8):
                cfg = w4a16.linear_config(m, n, k, 128, bits, torch.device("cpu"), use_table=False)
                assert (k // cfg.block_k) % cfg.split_k == 0, (m, n, k, bits, cfg)
    assert w4a16.linear_config(32, 9216, 2048, 128, 8, torch.device("cpu"), use_table=False).split_k == 2


@needs_triton
def test_moe_align_pads_runs_per_slot() -> None:
    from clover_local.runtime.kernels.w4a16 import moe_align

    slot_ids = torch.tensor([[3, 0], [3, 5], [0, 3]])
    sorted_ids, block_slot, num_padded = moe_align(slot_ids, num_slots=6, block_m=4)
    t = slot_ids.numel()
    assert int(num_padded) == 3 * 4  # slots 0, 3, 5, each padded to one run of 4
    assert sorted_ids.numel() % 4 == 0 and block_slot.numel() == sorted_ids.numel() // 4
    runs = sorted_ids[: int(num_padded)].view(-1, 4)
    flat = slot_ids.reshape(-1)
    for run, slot in zip(runs, block_slot[: runs.shape[0]]):
        real = run[run < t]
        assert real.numel() > 0 and bool((flat[real.long()] == slot).all())
    assert sorted(sorted_ids[sorted_ids < t].tolist()) == list(range(t))


@needs_triton
@pytest.mark.parametrize("t,num_slots,block_m", [(5, 6, 4), (256, 8899, 16), (256, 40, 16), (70, 9000, 32),
                                                  (1, 9000, 16), (600, 300, 64), (304, 5, 16)])
def test_moe_align_triton_matches_the_torch_sort(t, num_slots, block_m) -> None:
    """The two-pass pairwise align gives the torch sort's layout exactly: every pair at the same row (stable
    by pair id within a slot), the same run slots up to num_padded, the same num_padded. Random slot ids over
    few and over many slots (a preview pass: 256 pairs over a ~9,000-slot cache), many pairs per slot too."""
    from clover_local.runtime.kernels.w4a16 import align_length, moe_align_torch, moe_align_triton

    g = torch.Generator().manual_seed(t + num_slots)
    slot_ids = torch.randint(0, num_slots, (t,), generator=g).view(-1, 1) if t % 8 else \
        torch.randint(0, num_slots, (t // 8, 8), generator=g)
    want = moe_align_torch(slot_ids, num_slots, block_m)
    got = moe_align_triton(slot_ids.to(DEVICE), num_slots, block_m)
    got = [x.cpu() for x in got]
    n = int(want[2])
    assert int(got[2]) == n and got[0].numel() == want[0].numel() == align_length(t, num_slots, block_m)
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1][: n // block_m], want[1][: n // block_m])
    if num_slots == 5:  # slots with several runs each: the rank and run loops really ran
        assert int(torch.bincount(slot_ids.reshape(-1)).min()) > 2 * block_m


@needs_triton
@pytest.mark.parametrize(
    "m,bits,groups,dtype",
    [
        (1, 4, (128, 64), torch.bfloat16),
        (7, 4, (64, 32), torch.float32),
        (32, 4, (128, 64), torch.bfloat16),
        (7, 8, (64, 64), torch.bfloat16),
        (7, 3, (64, 32), torch.float32),  # 3-bit: runs of 32 rows in 3 words, two fields across a word boundary
        (32, 3, (128, 64), torch.bfloat16),
    ],
)
def test_triton_moe_matches_reference(force_triton, m: int, bits: int, groups: tuple[int, int], dtype) -> None:
    gen, _, gate_up, down = _moe_case(bits, groups, seed=m * 10 + bits, device=DEVICE)
    x = _x(m, H, dtype, gen)
    slot_ids, weights = _route(m, gen)
    if m == 32:
        slot_ids[:20, 0] = 4  # one slot with more pairs than a BLOCK_M run: several runs of one slot
        slot_ids[:20, 1] = torch.where(slot_ids[:20, 1] == 4, 1, slot_ids[:20, 1])
    x, slot_ids, weights = _dev(x, slot_ids, weights.to(dtype))
    got = moe_w4a16(x, slot_ids, weights, gate_up, down)
    want = moe_w4a16_ref(x, slot_ids, weights, gate_up, down)
    _assert_close(got, want, dtype)


def _host_case(bits: int, groups: tuple[int, int], seed: int, resident: list[int]):
    """Every expert in host stacks (indexed by expert id, like `HostExpertStore`) and a device cache whose slot s
    holds expert resident[s]; returns (all experts on the device, the cache's stacks, the host stacks, the slot
    map: expert e → its slot, or S + e when not resident)."""
    gen, packs, all_gu, all_dn = _moe_case(bits, groups, seed, device=DEVICE)
    host = _cache_stacks(packs, bits, groups, "cpu", pin=DEVICE == "cuda")
    cache = _cache_stacks([packs[e] for e in resident], bits, groups, DEVICE)
    slot_of = torch.tensor([resident.index(e) if e in resident else len(resident) + e for e in range(SLOTS)])
    return gen, (all_gu, all_dn), cache, host, slot_of


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_moe_reads_non_resident_experts_from_host(dtype) -> None:
    gen, everything, cache, host, slot_of = _host_case(4, (64, 32), 11, resident=[5, 1, 3])
    x = _x(9, H, dtype, gen).to(DEVICE)
    experts, weights = _route(9, gen)
    assert (slot_of[experts] >= 3).any() and (slot_of[experts] < 3).any()  # both kinds in the call
    weights = weights.to(dtype)
    got = moe_w4a16_ref(x, slot_of[experts], weights, *cache, host=host)
    assert torch.equal(got, moe_w4a16_ref(x, experts, weights, *everything))


def test_host_stacks_must_match_the_cache_slabs() -> None:
    _, _, cache, host, slot_of = _host_case(4, (64, 32), 12, resident=[0, 1])
    _, _, other, _, _ = _host_case(4, (32, 32), 12, resident=[0, 1])  # other groups along H: other shapes
    x = torch.randn(2, H)
    ids, w = slot_of[:2].view(1, 2).expand(2, 2), torch.ones(2, 2)
    with pytest.raises(ValueError, match="does not match"):
        moe_w4a16_ref(x, ids, w, *cache, host=(other[0], host[1]))


@needs_triton
@pytest.mark.parametrize("bits,dtype", [(4, torch.bfloat16), (8, torch.float16), (4, torch.float32),
                                        (3, torch.bfloat16)])
def test_triton_moe_reads_non_resident_experts_from_host(force_triton, bits: int, dtype) -> None:
    """Slots past the cache's name host experts, read in place: the same output, bit for bit, as with every
    expert on the device (each pair's sums do not depend on which runs the align made), also for a host expert
    with more pairs than one BLOCK_M run and for the folded and unfolded forms."""
    from clover_local.runtime.kernels.w4a16 import MoeConfig, moe_w4a16_triton

    gen, everything, cache, host, slot_of = _host_case(bits, (64, 32), 13 + bits, resident=[4, 0, 2])
    m = 24
    x = _x(m, H, dtype, gen)
    experts, weights = _route(m, gen)
    experts[:20, 0] = 5  # expert 5 (on the host) in 20 rows: two runs of 16
    experts[:20, 1] = torch.where(experts[:20, 1] == 5, 3, experts[:20, 1])
    x, experts, weights = _dev(x, experts, weights.to(dtype))
    slots = slot_of.to(experts.device)[experts]
    want = moe_w4a16(x, experts, weights, *everything)
    assert torch.equal(moe_w4a16(x, slots, weights, *cache, host=host), want)
    _assert_close(want, moe_w4a16_ref(x, experts, weights, *everything), dtype)
    for folded in (True, False):
        cfg = MoeConfig(16, 32, 64, folded=folded)
        assert torch.equal(moe_w4a16_triton(x, slots, weights, *cache, config=cfg, host=host),
                           moe_w4a16_triton(x, experts, weights, *everything, config=cfg))


def _read_through_case(bits: int, dtype, seed: int, groups: tuple[int, int] = (64, 32), inter: int = I,
                       planes: bool = False):
    """A cache of 5 slots: experts 4, 0, 2 resident in slots 0–2, slots 3 and 4 free (holding other bytes); the
    rest on the host. 24 rows: expert 5 (host) in 20 of them (two runs of 16), experts 1 and 3 (host) in the other
    four. install: expert 5 → slot 3, expert 1 → slot 4; expert 3 is read in place only. planes (3-bit): the
    cache's and the host's slabs in the planes layout (`reference.planes3_rows`), as a load leaves them."""
    from dataclasses import replace

    from clover_local.runtime.kernels.reference import planes3_rows

    gen, packs, all_gu, all_dn = _moe_case(bits, groups, seed, device=DEVICE, inter=inter)
    host = _cache_stacks(packs, bits, groups, "cpu", pin=DEVICE == "cuda")
    resident = [4, 0, 2]
    cache = _cache_stacks([packs[e] for e in resident] + [packs[3], packs[5]], bits, groups, DEVICE)
    if planes:
        for st in host + cache:
            planes3_rows(st.qweight, out=st.qweight)
        host, cache = tuple(replace(st, planes=True) for st in host), tuple(replace(st, planes=True) for st in cache)
    n = len(resident) + 2
    slot_of = torch.tensor([resident.index(e) if e in resident else n + e for e in range(SLOTS)])
    m = 24
    x = _x(m, H, dtype, gen)
    experts, weights = _route(m, gen)
    experts[:20, 0] = 5
    experts[:20, 1] = torch.where(experts[:20, 1] == 5, 3, experts[:20, 1])
    experts[20:, 0], experts[20:, 1] = 1, 3
    install = torch.zeros(SLOTS, dtype=torch.int32)
    install[5], install[1] = 1 + 3, 1 + 4
    x, experts, weights, install = _dev(x, experts, weights.to(dtype), install)
    return (all_gu, all_dn), cache, host, slot_of.to(experts.device)[experts], experts, x, weights, install


def _assert_read_through(cache, host, before) -> None:
    """Slots 3 and 4 now hold host experts 5 and 1, bit for bit; slots 0–2 are as they were."""
    for dev, hst, old in zip(cache, host, before):
        for part in ("qweight", "scales", "qzeros"):
            got, src = getattr(dev, part), getattr(hst, part)
            assert torch.equal(got[3].cpu(), src[5].cpu()) and torch.equal(got[4].cpu(), src[1].cpu())
            assert torch.equal(got[:3].cpu(), old[part][:3])


def _stack_copies(cache):
    return [{p: getattr(st, p).cpu().clone() for p in ("qweight", "scales", "qzeros")} for st in cache]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_moe_reads_through_into_free_slots(dtype) -> None:
    """install: the host experts it names are copied into their free slots as they are read; the output is the
    same as reading them in place."""
    everything, cache, host, slots, experts, x, w, install = _read_through_case(4, dtype, 31)
    before = _stack_copies(cache)
    want = moe_w4a16_ref(x, slots, w, *cache, host=host)
    assert torch.equal(want, moe_w4a16_ref(x, experts, w, *everything))
    assert torch.equal(moe_w4a16_ref(x, slots, w, *cache, host=host, install=install), want)
    _assert_read_through(cache, host, before)


@needs_triton
@pytest.mark.parametrize("bits,dtype,planes", [(4, torch.bfloat16, False), (8, torch.float16, False),
                                               (4, torch.float32, False), (3, torch.bfloat16, False),
                                               (3, torch.bfloat16, True)])
def test_triton_moe_reads_through_into_free_slots(force_triton, bits: int, dtype, planes: bool) -> None:
    """The kernel's read-through install: each program of a host run with a target copies its columns of the host
    slab into the free slot and computes from there. The output equals reading in place (bit for bit), the slots
    end whole (every part of gate/up and down, both gate and up halves, an expert with two runs), the resident
    slots untouched; folded and unfolded forms. 3-bit: 12 rows a 128-input tile and zero words that straddle
    (GPTQ's runs, columns 10 and 21 of each 32), in GPTQ's layout and the planes layout."""
    from clover_local.runtime.kernels.w4a16 import MoeConfig, moe_w4a16_triton

    kw = dict(groups=(128, 128), inter=128, planes=True) if planes else {}
    everything, cache, host, slots, experts, x, w, install = _read_through_case(bits, dtype, 41 + bits, **kw)
    want = moe_w4a16(x, slots, w, *cache, host=host)
    if not planes:  # (the planes layout's stacks of everything would need rewriting too: the reference says)
        assert torch.equal(want, moe_w4a16(x, experts, w, *everything))
    else:
        _assert_close(want, moe_w4a16_ref(x, experts, w, *everything), dtype)
    bk = 128 if planes else 64
    # (3-bit, 16 columns a program: zero words shared by two programs' columns, each writing it whole)
    for cfg in [MoeConfig(16, 32, bk, folded=f) for f in (True, False)] + [MoeConfig(16, 16, bk)] * (bits == 3):
        for st in cache:  # the free slots' old bytes back (other experts'), so each form copies afresh
            for part in ("qweight", "scales", "qzeros"):
                getattr(st, part)[3:].copy_(torch.randint_like(getattr(st, part)[3:], -100, 100))
        before = _stack_copies(cache)
        got = moe_w4a16_triton(x, slots, w, *cache, config=cfg, host=host, install=install)
        assert torch.equal(got, moe_w4a16_triton(x, slots, w, *cache, config=cfg, host=host))
        _assert_read_through(cache, host, before)


def test_planes3_layout_is_a_rearrangement_of_gptq_3bit() -> None:
    """The 3-bit planes layout (`reference.planes3_rows`): same shape as GPTQ's qweight, every code where the layout
    says (tile row 8κ + f, κ = 2p + half: low bits in word p at 2f + 16·half, the high bit in word 8 + p mod 4 at
    f + 8·(p div 4) + 16·half), undone exactly by `gptq_rows`, in place and in pieces alike."""
    from clover_local.runtime.kernels.reference import gptq_rows, planes3_rows, unpack_rows

    gen = torch.Generator().manual_seed(3)
    qw = _random_pack(256, 64, 128, 3, gen)["qweight"]  # [256·3/32, 64]
    codes = unpack_rows(qw, 3)
    planar = planes3_rows(qw)
    assert planar.shape == qw.shape and not torch.equal(planar, qw) and (planar < 0).any()  # bit 31 used
    for row in (0, 5, 8, 77, 127, 128, 200, 255):
        t, r = divmod(row, 128)
        kappa, f = divmod(r, 8)
        p, half = divmod(kappa, 2)
        for n in (0, 17, 63):
            low = (int(planar[12 * t + p, n]) >> (2 * f + 16 * half)) & 3
            high = (int(planar[12 * t + 8 + p % 4, n]) >> (f + 8 * (p // 4) + 16 * half)) & 1
            assert low + 4 * high == int(codes[row, n]), (row, n)
    assert torch.equal(gptq_rows(planar), qw)
    stack = torch.stack([qw, qw.flip(1)])
    inplace = stack.clone()
    planes3_rows(inplace, out=inplace, chunk_elems=1000)  # column pieces of one matrix at a time
    assert torch.equal(inplace, planes3_rows(stack)) and torch.equal(inplace[0], planar)


@needs_triton
def test_planes3_rewrite_kernel_matches_the_reference(force_triton) -> None:
    """The load's rewrite into the planes layout in one launch (`planes3_rows_triton`) gives the reference's words
    (`planes3_rows`), in place on strided slots of a buffer (columns not a multiple of its tile), the bytes
    around them untouched."""
    from clover_local.runtime.kernels.reference import planes3_rows
    from clover_local.runtime.kernels.w4a16 import planes3_rows_triton

    gen = torch.Generator().manual_seed(8)
    buf = torch.randint(-2**31, 2**31 - 1, (3, 24 * 100 + 7), dtype=torch.int32, generator=gen).to(DEVICE)
    slots = buf[:, 3 : 3 + 24 * 100].view(3, 24, 100)  # K = 256: two tiles; 100 columns
    want, before = planes3_rows(slots.clone()), buf.clone()
    planes3_rows_triton(slots)
    assert torch.equal(slots, want) and not torch.equal(slots, before[:, 3 : 3 + 24 * 100].view(3, 24, 100))
    assert torch.equal(buf[:, :3], before[:, :3]) and torch.equal(buf[:, 3 + 24 * 100 :], before[:, 3 + 24 * 100 :])


@needs_triton
@pytest.mark.parametrize("swap,dtype", [(True, torch.bfloat16), (False, torch.bfloat16), (True, torch.float16)])
def test_planes3_moe_matches_reference(force_triton, swap: bool, dtype) -> None:
    """The MoE on 3-bit experts in the planes layout (`_planes3_dot`: field-wise, zero folded, a field-major) against
    the reference on the same experts in GPTQ's layout, both dots' orientations; the launches run it as
    configured (BITS 3, field-wise, folded, a field-major), also when the config asks for the unpacking form, which
    cannot read this layout; GPTQ words marked planar give another answer, so the layout is what is read."""
    from dataclasses import replace

    from clover_local.runtime.kernels import w4a16
    from clover_local.runtime.kernels.compile_check import _intercepted
    from clover_local.runtime.kernels.reference import planes3_rows
    from clover_local.runtime.kernels.w4a16 import MoeConfig, moe_w4a16_triton

    gen, _, gate_up, down = _moe_case(3, (128, 128), seed=90 + swap, device=DEVICE, inter=128)
    x, slot_ids, weights = _two_runs(gen, dtype)
    want = moe_w4a16_ref(x, slot_ids, weights, gate_up, down)
    planar = [replace(st, qweight=planes3_rows(st.qweight), planes=True) for st in (gate_up, down)]
    assert torch.equal(moe_w4a16_ref(x, slot_ids, weights, *planar), want)  # the reference reads either layout
    cfg = MoeConfig(16, 32, 128, swap=swap)
    launches: list = []
    with _intercepted(w4a16, ["_moe_kernel", "_sum_parts_kernel"], launches, lambda: "planes"):  # records, runs none
        moe_w4a16_triton(x, slot_ids, weights, *planar, config=cfg)
        moe_w4a16_triton(x, slot_ids, weights, *planar, config=replace(cfg, fields=False, folded=False))
    moe = [(a.args["BITS"], a.args["FIELDS"], a.args["FOLD"], a.args["A_FM"], a.args["SWAP"], a.args["BLOCK_K"])
           for a in launches if a.kernel == "_moe_kernel"]
    assert moe == [(3, True, True, True, swap, 128)] * 4
    got = moe_w4a16_triton(x, slot_ids, weights, *planar, config=cfg)
    _assert_close(got, want, dtype)
    wrong = [replace(st, planes=True) for st in (gate_up, down)]  # GPTQ's words read as planes
    bad = moe_w4a16_triton(x, slot_ids, weights, *wrong, config=cfg)
    assert (bad.float() - want.float()).norm() > 0.3 * want.float().norm()


@needs_triton
def test_gpu_check_moe3_runs(force_triton, monkeypatch) -> None:
    """gpu_check's 3-bit MoE check at small shapes (interpreted; its timing stubbed) agrees with the reference, in
    GPTQ's layout and in the planes layout."""
    from clover_local.runtime import gpu_check

    gen = torch.Generator().manual_seed(31)
    x, (idx, w) = _x(5, H, torch.bfloat16, gen), _route(5, gen)
    monkeypatch.setattr(gpu_check, "_timed_ms", lambda dev, fn: 1.0 + 0.0 * (fn() is None))
    x, w = _dev(x, w.to(torch.bfloat16))
    res = gpu_check.moe3_check(torch.device(DEVICE), gen, x, idx, w, inter=128, experts=SLOTS)
    assert res["ok"] and res["rel_err"] < 2e-2 and res["ms_32rows"] == 1.0
    assert res["planes_rel_err"] < 2e-2 and res["planes_ms_32rows"] == 1.0  # the same experts in the planes layout


@needs_triton
def test_gpu_check_host_reads_runs(force_triton, monkeypatch) -> None:
    """gpu_check's host-read check on tiny shapes (interpreted; its timings stubbed): every expert resident in a
    permuted cache, some read from the host, then all, then all read through into other slots: equal to the
    all-resident call, the slabs whole where they went, the cache as it was after, and the check says so."""
    from clover_local.runtime import gpu_check

    resident = [3, 5, 0, 1, 4, 2]
    gen, _, cache, host, slot_of = _host_case(4, (64, 32), 21, resident=resident)
    slots = [resident.index(e) for e in range(SLOTS)]
    x = _x(5, H, torch.bfloat16, gen)
    idx, w = _route(5, gen)
    x, w = _dev(x, w.to(torch.bfloat16))
    want = moe_w4a16(x, torch.tensor(slots)[idx].to(x.device), w, *cache)
    monkeypatch.setattr(gpu_check, "_flushed_ms", lambda dev, fn, reps=10: 1.0 + 0.1 * (fn() is None))
    res = gpu_check.host_reads_check(torch.device(DEVICE), x, idx, w, slots, *cache, host, SLOTS, 1000, want)
    assert res["ok"] and res["resident_equal"] and res["8_on_host_equal"] and res["all_on_host_equal"]
    assert res["read_through_equal"] and res["read_through_slabs_equal"]  # each expert into the next one's slot
    assert torch.equal(moe_w4a16(x, torch.tensor(slots)[idx].to(x.device), w, *cache), want)  # and back after
    wrong = gpu_check.host_reads_check(torch.device(DEVICE), x, idx, w, slots, *cache, host, SLOTS, 1000, want * 2)
    assert not wrong["ok"]


@needs_triton
@pytest.mark.parametrize(
    "bits,groups,dtype",
    [
        (4, (128, 64), torch.bfloat16),  # field pairs by bf16 exponent bits (0x4300)
        (8, (64, 64), torch.float32),  # the fp32 form (2^23 + code)
        (8, (64, 64), torch.float16),  # field pairs by fp16 exponent bits (0x6400), 8-bit codes
        (4, (128, 64), torch.float16),
        (8, (128, 64), torch.bfloat16),  # 8-bit codes overflow bf16's mantissa: the fp32 form, then bf16
    ],
)
def test_both_tile_forms_match_reference(force_triton, bits: int, groups: tuple[int, int], dtype) -> None:
    """The field-wise dots (the default: one small dot per packed field, strided columns of a, codes turned into
    floats by exponent bits) and the unpacking form give the reference's sums: MoE (gated pass and down pass, a
    slot with several runs) and the dense linear with split-K."""
    from clover_local.runtime.kernels.w4a16 import (
        LinearConfig, MoeConfig, _fields_ok, linear_w4a16_triton, moe_w4a16_triton,
    )

    gen, _, gate_up, down = _moe_case(bits, groups, seed=50 + bits, device=DEVICE)
    m = 24
    x = _x(m, H, dtype, gen)
    slot_ids, weights = _route(m, gen)
    slot_ids[:18, 0] = 2
    slot_ids[:18, 1] = torch.where(slot_ids[:18, 1] == 2, 1, slot_ids[:18, 1])
    x, slot_ids, weights = _dev(x, slot_ids, weights.to(dtype))
    bk = 16 * (32 // bits)  # the smallest K tile field-wise dots allow (I = 64: 4-bit down stays unpacked)
    assert _fields_ok(True, bk, bits) and not _fields_ok(True, bk // 2, bits)
    want = moe_w4a16_ref(x, slot_ids, weights, gate_up, down)
    for cfg in (MoeConfig(16, 32, bk), MoeConfig(16, 32, bk, folded=False), MoeConfig(16, 32, bk, fields=False),
                MoeConfig(16, 32, bk, maxnreg=128)):
        _assert_close(moe_w4a16_triton(x, slot_ids, weights, gate_up, down, config=cfg), want, dtype)

    k, n, group = 256, 96, 128
    pack = _random_pack(k, n, group, bits, gen)
    xl, qweight, scales, qzeros = _dev(_x(5, 2 * k, dtype, gen), pack["qweight"], pack["scales"], pack["qzeros"])
    xl = xl[:, ::2]  # strided columns: the field loads step through a's column stride
    args = (qweight, scales, qzeros, group, bits)
    want = linear_w4a16_ref(xl, *args)
    for fields in (True, False):
        for cfg in (LinearConfig(16, 32, bk, fields=fields), LinearConfig(16, 64, bk, split_k=2, fields=fields)):
            _assert_close(linear_w4a16_triton(xl, *args, config=cfg), want, dtype)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("tile", [64, 128])
def test_field_major_rows_is_the_same_linear_of_a_permuted_input(bits: int, tile: int) -> None:
    """`field_major_rows` repacks a weight's rows so that a kernel reading x field-major computes x @ W: the
    reference on the repacked weight with x permuted by field_major(x, tile, R) gives the original product, in
    place or not, in any column chunking; a PackedLinear repacked that way is the same function of x."""
    from clover_local.runtime.kernels.reference import field_major, field_major_rows
    from clover_local.runtime.packed_linear import PackedLinear

    gen = torch.Generator().manual_seed(tile + bits)
    k, n, group = 256, 40, 128
    pack = _random_pack(k, n, group, bits, gen)
    x = _x(6, k, torch.float32, gen)
    args = (pack["scales"], pack["qzeros"], group, bits)
    want = linear_w4a16_ref(x, pack["qweight"], *args)
    repacked = field_major_rows(pack["qweight"], tile, bits, chunk_elems=3 * k)
    assert not torch.equal(repacked, pack["qweight"])
    in_place = pack["qweight"].clone()
    field_major_rows(in_place, tile, bits, out=in_place, chunk_elems=7 * k)
    assert torch.equal(in_place, repacked)
    r = tile // (32 // bits)
    torch.testing.assert_close(linear_w4a16_ref(field_major(x, tile, r), repacked, *args), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(field_major(field_major(x, tile, 32 // bits), tile, r), x)  # the two permutations: inverses
    lin = PackedLinear(pack["qweight"], pack["scales"], pack["qzeros"], group, bits)
    fm = lin.repacked(tile)
    assert fm.k_tile == tile and fm.columns(0, 16).k_tile == tile
    torch.testing.assert_close(fm(x), want, rtol=1e-5, atol=1e-5)


@needs_triton
@pytest.mark.parametrize("bits,dtype", [(4, torch.bfloat16), (8, torch.bfloat16), (8, torch.float16),
                                        (4, torch.float32)])
def test_triton_linear_on_field_major_rows_matches_reference(force_triton, bits: int, dtype) -> None:
    """The dense kernel on rows repacked field-major (k_tile): field-wise dots reading x's columns contiguously
    (A_FM), with and without split-K, and the unpacking form on x permuted to match, all give the reference on
    the original weight; x strided, as in the other linear tests."""
    from clover_local.runtime.kernels.reference import field_major_rows
    from clover_local.runtime.kernels.w4a16 import LinearConfig, linear_w4a16_triton

    gen = torch.Generator().manual_seed(90 + bits)
    k, n, group = 256, 96, 128
    pack = _random_pack(k, n, group, bits, gen)
    tile = 128
    repacked = field_major_rows(pack["qweight"], tile, bits)
    xl, qw, rqw, sc, qz = _dev(_x(5, 2 * k, dtype, gen), pack["qweight"], repacked, pack["scales"], pack["qzeros"])
    xl = xl[:, ::2]
    want = linear_w4a16_ref(xl, qw, sc, qz, group, bits)
    for cfg in (LinearConfig(16, 32, 64), LinearConfig(16, 64, 64, split_k=2), LinearConfig(16, 32, 64, fields=False)):
        _assert_close(linear_w4a16_triton(xl, rqw, sc, qz, group, bits, config=cfg, k_tile=tile), want, dtype)
    _assert_close(linear_w4a16(xl, rqw, sc, qz, group, bits, k_tile=tile), want, dtype)  # the dispatcher


@needs_triton
@pytest.mark.parametrize("bits,dtype", [(4, torch.bfloat16), (4, torch.float16), (8, torch.float16)])
def test_folded_moe_form_matches_reference(force_triton, monkeypatch, bits: int, dtype) -> None:
    """The MoE's folded form (the default for 16-bit codes: each K tile's zero taken off through a's row sums, not
    from every weight; x and the activations between the passes read field-major per K tile), its dots either way
    round (`swap`), at an I where both passes read field-wise (4-bit codes need K tiles of 128), against the
    reference and the unfolded form. The launches are checked to run folded and swapped as configured, so a
    silent fallback cannot pass it."""
    from clover_local.runtime.kernels import w4a16
    from clover_local.runtime.kernels.compile_check import _intercepted
    from clover_local.runtime.kernels.w4a16 import MoeConfig, moe_w4a16_triton

    bk = 16 * (32 // bits)
    gen, _, gate_up, down = _moe_case(bits, (bk, bk), seed=70 + bits, device=DEVICE, inter=bk)
    x, slot_ids, weights = _two_runs(gen, dtype)
    want = moe_w4a16_ref(x, slot_ids, weights, gate_up, down)
    configs = {"folded": MoeConfig(16, 32, bk), "unswapped": MoeConfig(16, 32, bk, swap=False),
               "plain": MoeConfig(16, 32, bk, folded=False)}
    launches: list = []
    with _intercepted(w4a16, ["_moe_kernel", "_sum_parts_kernel"], launches, lambda: "folded"):  # records, runs none
        for cfg in configs.values():
            moe_w4a16_triton(x, slot_ids, weights, gate_up, down, config=cfg)
    moe = [(a.args["FOLD"], a.args["A_FM"], a.args["OUT_FM"], a.args["A_SUM"], a.args["OUT_SUM"], a.args["SWAP"])
           for a in launches if a.kernel == "_moe_kernel"]
    # gate/up reads x's sums from the align pass and writes act's (per its 32 columns: two per down K tile); by
    # default the folded dots run transposed (weights first), swap=False the other way round, unfolded never
    assert moe[:2] == [(True, True, bk, 1, 32, True), (True, True, 0, bk // 32, 0, True)]
    assert moe[2:4] == [(True, True, bk, 1, 32, False), (True, True, 0, bk // 32, 0, False)]
    assert [m[0] or m[5] for m in moe[4:]] == [False, False]
    outs = {name: moe_w4a16_triton(x, slot_ids, weights, gate_up, down, config=cfg) for name, cfg in configs.items()}
    for out in outs.values():
        _assert_close(out, want, dtype)
    folded = outs["folded"]
    monkeypatch.setattr(w4a16, "ALIGN_MAX_PAIRS", 0)  # the torch align: x made field-major by a torch copy
    assert torch.equal(moe_w4a16_triton(x, slot_ids, weights, gate_up, down, config=MoeConfig(16, 32, bk)), folded)


@needs_triton
def test_moe_swap_default_by_arch_and_triton(monkeypatch) -> None:
    """`MoeConfig.swap`'s default (`w4a16._default_swap`): the transposed dots except on Hopper (sm_90, measured
    slower there under triton 3.6; waited-for, fenced warpgroup MMAs under ≥ 3.7), whatever triton's version;
    CLOVER_W4A16_SWAP overrides it anywhere."""
    from clover_local.runtime.kernels import w4a16

    monkeypatch.delenv("CLOVER_W4A16_SWAP", raising=False)
    cuda = torch.device("cuda", 0)
    arch = {"major": 9}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (arch["major"], 0))
    for major, version, want in ((9, "3.6.0", False), (9, "3.8.0", False), (9, "3.10.0+git1a2b", False),
                                 (9, "main", False), (12, "3.9.0", True), (8, "3.8.0", True)):
        arch["major"] = major
        monkeypatch.setattr(w4a16.triton, "__version__", version)
        assert w4a16._default_swap(cuda) is want and w4a16.moe_config(32, 8, 8192, cuda).swap is want, (major, version)
    assert w4a16._default_swap(None) and w4a16._default_swap(torch.device("cpu"))  # (arch 8 last: on)
    arch["major"] = 9
    monkeypatch.setenv("CLOVER_W4A16_SWAP", "1")
    assert w4a16._default_swap(cuda)
    monkeypatch.setenv("CLOVER_W4A16_SWAP", "0")
    assert not w4a16._default_swap(torch.device("cpu")) and not w4a16.moe_config(32, 8, 8192).swap


@needs_triton
def test_kernel_forms_report_what_a_run_uses(force_triton, monkeypatch) -> None:
    """bench's `kernel_forms`: the triton version and the W4A16 forms the environment switches select, so a GPU
    report says what it timed; None where the Triton kernels do not run."""
    import triton

    from clover_local.runtime.kernels import kernel_forms

    dev = torch.device(DEVICE)
    for name in ("CLOVER_W4A16_SWAP", "CLOVER_W4A16_FOLD", "CLOVER_W4A16_REPACK", "CLOVER_W4A16_FORM",
                 "CLOVER_W3_PLANES", "CLOVER_GDN_PREVIEW"):
        monkeypatch.delenv(name, raising=False)
    assert kernel_forms(dev) == {"triton": triton.__version__, "fields": True, "moe_folded": True, "moe_swap": True,
                                 "dense_repacked": True, "moe3_planes": True, "gdn_preview": "whole"}
    monkeypatch.setenv("CLOVER_GDN_PREVIEW", "split")
    assert kernel_forms(dev)["gdn_preview"] == "split"
    monkeypatch.setenv("CLOVER_W4A16_SWAP", "0")
    monkeypatch.setenv("CLOVER_W4A16_REPACK", "0")
    monkeypatch.setenv("CLOVER_W3_PLANES", "0")
    forms = kernel_forms(dev)
    assert forms["moe_swap"] is False and forms["dense_repacked"] is False and forms["moe_folded"] is True
    assert forms["moe3_planes"] is False
    monkeypatch.setenv("CLOVER_DISABLE_TRITON", "1")
    assert kernel_forms(dev) is None


@needs_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rounded16_is_round_to_nearest_even_like_torch(force_triton, dtype) -> None:
    """The gate/up epilogue rounds act by `_rounded16` before summing it for the down pass's fold: the sums are
    exact only if it rounds as torch's cast does (nearest, ties to even), ties and signs included."""
    from rounding_kernel import round_kernel

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(4096, generator=gen) * 3
    base = x.to(dtype).float()
    if dtype == torch.bfloat16:  # exact ties: a bf16 value plus half its last place, both parities
        tie = (base.view(torch.int32) | 0x8000).view(torch.float32)
        x[:1024] = tie[:1024]
    x = x.to(DEVICE)
    y = torch.empty_like(x)
    round_kernel[(1,)](x, y, BF16=dtype == torch.bfloat16, N=4096)
    assert torch.equal(y.cpu(), x.cpu().to(dtype).float())


@needs_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_magic_bits_turn_every_code_and_zero_into_an_exact_float(dtype, bits: int) -> None:
    """What `_fields_dot` relies on, for every code c and zero z (qzeros + 1) the format allows: the 16-bit
    float with bits MAGIC | c, minus the one with MAGIC | z, is exactly c − z; and where no such 16-bit pattern
    exists (8-bit codes in bf16: 7 mantissa bits) `magic_bits` says 0, so the fp32 form runs."""
    from clover_local.runtime.kernels.w4a16 import magic_bits

    magic = magic_bits(dtype, bits)
    codes = torch.arange(1 << bits, dtype=torch.int32)
    zeros = torch.arange(1, (1 << bits) + 1, dtype=torch.int32)
    if magic == 0:
        assert dtype == torch.bfloat16 and bits == 8
        as16 = ((0x4300 | codes) & 0xFFFF).to(torch.int16).view(dtype).float()
        assert not torch.equal(as16 - 128, codes.float())  # the 16-bit trick would be wrong here
        magic, dtype, codes_f = 0x4B000000, torch.float32, codes  # the fp32 form: 2^23 + c
        w = (magic | codes_f[:, None]).view(torch.float32) - (magic | zeros[None, :]).view(torch.float32)
    else:
        def f16(v: torch.Tensor) -> torch.Tensor:
            return (magic | v).to(torch.int16).view(dtype)
        w = (f16(codes)[:, None] - f16(zeros)[None, :]).float()  # the subtraction in the 16-bit dtype, as on a GPU
    assert torch.equal(w, (codes[:, None] - zeros[None, :]).float())


def test_dispatch_uses_reference_without_force(monkeypatch) -> None:
    """On CPU tensors without CLOVER_FORCE_TRITON the dispatchers are the reference, bit for bit."""
    monkeypatch.delenv("CLOVER_FORCE_TRITON", raising=False)
    gen, _, gate_up, down = _moe_case(4, (64, 64), seed=11)
    x = _x(3, H, torch.float32, gen)
    slot_ids, weights = _route(3, gen)
    want = moe_w4a16_ref(x, slot_ids, weights, gate_up, down)
    assert torch.equal(moe_w4a16(x, slot_ids, weights, gate_up, down), want)


@needs_triton
def test_bench_script_runs_on_tiny_shapes(force_triton, monkeypatch) -> None:
    """The GPU benchmark's code paths (random packs, cache-like stacks, correctness, JSON fields) on tiny shapes;
    on CPU it runs the kernels through the interpreter and skips timing and graph capture."""
    from clover_local.runtime.kernels import bench_kernels

    monkeypatch.setattr(bench_kernels, "DEVICE", DEVICE)
    torch.manual_seed(0)  # the bench draws its inputs from the global generator: the same ones every run
    lin = bench_kernels.bench_linear("tiny", 5, 256, 192, 4, 64, torch.bfloat16, 4800.0, "none")
    assert lin["errors"] == [] and lin["max_rel_err"] < 1e-2 and lin["bytes"] > 256 * 192 // 2
    moe = bench_kernels.bench_moe(7, 6, 2, H, I, 64, 4, torch.bfloat16, 4800.0, "none")
    assert moe["errors"] == [] and moe["max_rel_err"] < 1e-2 and 1 <= moe["distinct_slots"] <= 6


# --- the fused GDN preview vs the model's PyTorch path ---------------------------------------------------------


def _gdn_inputs(gdn, b: int, t: int, dtype: torch.dtype, gen: torch.Generator):
    """A layer's input rows x [b,t,H], a conv ring [b,K-1,C] and a state [b,Hv,Dk,Dv], random, on DEVICE."""
    h = gdn.in_proj_qkv.in_features
    x = _dev(_x(b * t, h, dtype, gen).reshape(b, t, h))[0]
    ring = _dev(_x(b * (gdn.kernel - 1), gdn.in_proj_qkv.out_features, dtype, gen))[0].reshape(b, gdn.kernel - 1, -1)
    return x, ring, _dev(torch.randn(b, gdn.hv, gdn.dk, gdn.dv, generator=gen))[0]


def _random_gdn(spec_kw: dict, dtype: torch.dtype, gen: torch.Generator):
    from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.gdn import GatedDeltaNet

    gdn = GatedDeltaNet(parse_config(tiny_config_dict(TinySpec(**spec_kw))))
    with torch.no_grad():
        for p in gdn.parameters():  # every weight random, the preview extras and norm included: never zeros
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.dim() > 1 else 0.3) + (1.0 if p.dim() == 1 else 0))
    return gdn.to(dtype)


@needs_triton
@pytest.mark.parametrize(
    "spec_kw,b,t,n_prefix,dtype",
    [
        # block rows < the kernel's 16-row tile, two value heads per key head, a prefix
        ({"linear_key_head_dim": 16, "linear_value_head_dim": 32, "block_size": 8}, 1, 8, 40, torch.float32),
        # no prefix: the history slot is empty; one value head per key head; two sequences
        ({"linear_num_key_heads": 2, "linear_num_value_heads": 2, "block_size": 16}, 2, 16, 0, torch.float32),
        # bf16 activations (the runtime's dtype), 32 block rows, short prefix (n < block size)
        ({"linear_key_head_dim": 32, "linear_value_head_dim": 32, "block_size": 32}, 1, 32, 5, torch.bfloat16),
    ],
)
@pytest.mark.parametrize("form", ["whole", "split"])
def test_fused_gdn_preview_matches_model(force_triton, monkeypatch, spec_kw, b, t, n_prefix, dtype, form) -> None:
    """Both forms: one launch a layer (one program per value head), and CLOVER_GDN_PREVIEW=split (programs per
    head and value slice, then the gated norm: two launches)."""
    from clover_local.model.cache import GDNCache
    from clover_local.runtime.kernels import gdn_preview, gdn_preview_kernel

    monkeypatch.setenv("CLOVER_GDN_PREVIEW", form)
    gen = torch.Generator().manual_seed(b * 1000 + t + n_prefix)
    gdn = _random_gdn(spec_kw, dtype, gen).to(DEVICE)
    kernel = gdn_preview_kernel(gdn, torch.device(DEVICE))
    assert kernel is gdn_preview.tuned_gdn_preview and gdn_preview.preview_config().form == form
    x, ring, state = _gdn_inputs(gdn, b, t, dtype, gen)
    n = torch.tensor(n_prefix, device=DEVICE)
    with torch.no_grad():
        want = gdn(x, GDNCache(ring, state), preview=True, n_prefix=n)
        gdn.preview_kernel = kernel
        got = gdn(x, GDNCache(ring, state), preview=True, n_prefix=n)
    assert want.abs().max() > 0.1  # the comparison has something to compare
    _assert_close(got, want, dtype)


@needs_triton
@pytest.mark.parametrize("block_dv", [16, 32, 64])
def test_split_gdn_preview_slices_the_value_channels(force_triton, block_dv: int) -> None:
    """The split form over 4, 2 and 1 value slices of a 64-channel head (two value heads per key head, a prefix)
    gives the one-launch form's output: each slice's programs read their own state columns and v channels."""
    from clover_local.runtime.kernels.gdn_preview import fused_gdn_preview, split_gdn_preview

    gen = torch.Generator().manual_seed(40 + block_dv)
    gdn = _random_gdn({"linear_key_head_dim": 32, "linear_value_head_dim": 64, "block_size": 16}, torch.float32,
                      gen).to(DEVICE)
    x, ring, state = _gdn_inputs(gdn, 1, 16, torch.float32, gen)
    rows, z = gdn.in_proj_qkv(x), gdn.in_proj_z(x)
    n = torch.tensor(24, device=DEVICE)
    with torch.no_grad():
        want = fused_gdn_preview(gdn, rows, ring, state, n, z)
        got = split_gdn_preview(gdn, rows, ring, state, n, z, block_dv=block_dv)
    assert want.abs().max() > 0.1  # the comparison has something to compare
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gdn_merged_input_projection(force_triton, dtype) -> None:
    """The runtime's merge of a GDN layer's packed in_proj_qkv and in_proj_z (`load._merge_gdn_inputs`): the
    fused preview then makes one projection call, the causal pass uses the two column views, both give what the
    separate packed projections give, and the layer's buffers hold each weight once."""
    from clover_local.model.cache import GDNCache
    from clover_local.runtime.kernels import gdn_preview_kernel
    from clover_local.runtime.load import _merge_gdn_inputs
    from clover_local.runtime.packed_linear import PackedLinear

    gen = torch.Generator().manual_seed(77)
    gdn = _random_gdn({"linear_key_head_dim": 32, "linear_value_head_dim": 32, "block_size": 16}, dtype, gen)
    h = gdn.in_proj_qkv.in_features

    def packed(cols: int) -> PackedLinear:
        pk = _random_pack(h, cols, 32, 8, gen)
        return PackedLinear(*_dev(pk["qweight"], pk["scales"], pk["qzeros"]), 32, 8)

    gdn.in_proj_qkv, gdn.in_proj_z = packed(gdn.in_proj_qkv.out_features), packed(gdn.in_proj_z.out_features)
    gdn = gdn.to(DEVICE)
    gdn.preview_kernel = gdn_preview_kernel(gdn, torch.device(DEVICE))
    x = _dev(_x(16, h, dtype, gen).reshape(1, 16, h))[0]
    ring = _dev(_x(gdn.kernel - 1, gdn.in_proj_qkv.out_features, dtype, gen))[0].reshape(1, gdn.kernel - 1, -1)
    state = _dev(torch.randn(1, gdn.hv, gdn.dk, gdn.dv, generator=gen))[0]
    n = torch.tensor(20, device=DEVICE)

    def run(preview: bool) -> torch.Tensor:
        with torch.no_grad():
            return gdn(x, GDNCache(ring.clone(), state.clone()), preview=preview, n_prefix=n)

    buffers = lambda: sum(b.numel() * b.element_size() for b in gdn.buffers())  # noqa: E731
    want_preview, want_causal, bytes_before = run(True), run(False), buffers()
    layer = torch.nn.Module()
    layer.linear_attn = gdn
    _merge_gdn_inputs(layer)
    assert isinstance(gdn.in_proj_qkvz, PackedLinear) and buffers() == bytes_before
    calls = []
    gdn.in_proj_qkv.register_forward_hook(lambda *a: calls.append("qkv"))
    _assert_close(run(True), want_preview, dtype)
    assert calls == []  # the preview made the one merged call
    _assert_close(run(False), want_causal, dtype)
    assert calls == ["qkv"]


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_merged_input_projection(force_triton, dtype) -> None:
    """The runtime's merge of an attention layer's packed q_proj, k_proj and v_proj (`load._merge_attention_inputs`):
    `Attention.project` then makes one projection call (eager head norms, or the fused `norm_rope`), gives what the
    three separate calls give, and the layer's buffers hold each weight once."""
    from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.attention import Attention
    from clover_local.model.rope import Rotary
    from clover_local.runtime.kernels import fused_layer_ops
    from clover_local.runtime.load import _merge_attention_inputs
    from clover_local.runtime.packed_linear import PackedLinear

    gen = torch.Generator().manual_seed(78)
    cfg = parse_config(tiny_config_dict(TinySpec()))
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = 4, 2, 32
    att = Attention(cfg)
    with torch.no_grad():
        for prm in att.parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen) * (0.3 if prm.dim() == 1 else 0.1))
    h = cfg.hidden_size

    def packed(cols: int) -> PackedLinear:
        pk = _random_pack(h, cols, 32, 8, gen)
        return PackedLinear(*_dev(pk["qweight"], pk["scales"], pk["qzeros"]), 32, 8)

    att = att.to(DEVICE, dtype)
    att.q_proj, att.k_proj, att.v_proj = (packed(getattr(att, n).out_features) for n in ("q_proj", "k_proj", "v_proj"))
    x = _dev(_x(9, h, dtype, gen).reshape(1, 9, h))[0]
    cos, sin = Rotary(cfg.rotary_dim, 10000.0).cos_sin(torch.arange(40, 49, device=DEVICE), dtype)
    fused = fused_layer_ops(torch.device(DEVICE)).norm_rope
    buffers = lambda: sum(b.numel() * b.element_size() for b in att.buffers())  # noqa: E731

    def project(kernel) -> tuple:
        att.norm_rope_kernel = kernel
        with torch.no_grad():
            return att.project(x, cos, sin)

    want, want_fused, bytes_before = project(None), project(fused), buffers()
    layer = torch.nn.Module()
    layer.self_attn = att
    _merge_attention_inputs(layer)
    assert isinstance(att.qkv_proj, PackedLinear) and buffers() == bytes_before
    calls = []
    for n in ("q_proj", "k_proj", "v_proj"):
        getattr(att, n).register_forward_hook(lambda *a, n=n: calls.append(n))
    for kernel, expected in ((None, want), (fused, want_fused)):
        got = project(kernel)
        for g, w in zip(got, expected):
            assert g.shape == w.shape
            _assert_close(g, w, dtype)
    assert calls == []  # one merged call each time
    att.qkv_proj = None  # the column views alone still compute the three projections
    for g, w in zip(project(None), want):
        _assert_close(g, w, dtype)
    assert calls == ["q_proj", "k_proj", "v_proj"]


@needs_triton
def test_gpu_check_fused_ops_run_at_real_shapes(force_triton) -> None:
    """`gpu_check.gdn_preview_check`, `layer_ops_check` and `preview_attention_check` (a GPU session's few
    minutes) run here at the real layer's shapes, the
    kernel interpreted: the check a GPU session reads cannot crash on something a CPU could have caught."""
    from clover_local.runtime import gpu_check

    res = gpu_check.gdn_preview_check(torch.device(DEVICE), reps=2)
    assert res["installed"] and res["ok"], res
    assert res["split_rel_err"] < 2e-2 and res["split16_rel_err"] < 2e-2  # the two-launch form, 2 and 8 slices
    res = gpu_check.gdn_preview_check(torch.device(DEVICE), reps=2, causal=True, rows=8)  # 32 rows: 30 s
    assert res["installed"] and res["ok"], res
    # a prefill chunk's chunked kernels (the GPU check runs 512 rows; 40 here: one chunk, 13 s interpreted)
    res = gpu_check.gdn_preview_check(torch.device(DEVICE), reps=2, causal=True, rows=40, eager=True)
    assert res["installed"] and res["ok"] and res["rows"] == 40, res
    # ... with the synthetic packs' decays (A up to 16: a chunk's cumulative decay far below fp32's range)
    res = gpu_check.gdn_preview_check(torch.device(DEVICE), reps=2, causal=True, rows=40, eager=True,
                                      decays="synthetic")
    assert res["installed"] and res["ok"], res
    res = gpu_check.layer_ops_check(torch.device(DEVICE))
    assert res["ok"] and res["route_ids_equal"] > 0.9, res
    mapping = res["slot_mapping"]  # a whole pass of read-through assignments: some through, some ran out
    assert 0 < mapping["read_through"] < mapping["missing"] and mapping["pinned_taken"] > 0, mapping
    res = gpu_check.preview_attention_check(torch.device(DEVICE), window=640, committed=500)
    assert res["ok"], res


# --- a layer's small ops, fused (kernels/layer_ops.py) vs their definitions ------------------------------------


@needs_triton
@pytest.mark.parametrize("shape,dtype", [((3, 5, 96), torch.float32), ((4, 2048), torch.bfloat16), ((2, 3, 16), torch.float32)])
def test_fused_rms_norm_matches_the_model_norm(force_triton, shape, dtype) -> None:
    from clover_local.model.norm import ZeroCenteredRMSNorm
    from clover_local.runtime.kernels import fused_layer_ops

    gen = torch.Generator().manual_seed(shape[-1])
    norm = ZeroCenteredRMSNorm(shape[-1], eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(shape[-1], generator=gen) * 0.3)
    norm = norm.to(DEVICE, dtype)
    x = _dev(_x(int(torch.tensor(shape[:-1]).prod()), shape[-1], dtype, gen).reshape(shape) * 3)[0]
    want = norm(x)
    norm.kernel = fused_layer_ops(torch.device(DEVICE)).rms_norm_zc
    got = norm(x)
    _assert_close(got, want, dtype)
    strided = torch.cat([x, x], -1)[..., : shape[-1]]  # rows not contiguous: the kernel copies or strides
    _assert_close(norm(strided), want, dtype)
    # with the residual sum in front (a decoder layer's x + mixer(x), then the norm): both outputs
    r = _dev(_x(x.numel() // shape[-1], shape[-1], dtype, gen).reshape(shape))[0]
    norm.kernel = None
    want_sum, want_norm = norm.add_forward(x, r)
    assert torch.equal(want_sum, x + r)
    norm.add_kernel = fused_layer_ops(torch.device(DEVICE)).add_rms_norm_zc
    got_sum, got_norm = norm.add_forward(strided, r)
    if dtype == torch.float32:
        assert torch.equal(got_sum, want_sum)
    else:  # one rounding of the same fp32 sum; interpreted, triton 3.9 truncates where a GPU rounds to nearest
        _assert_close(got_sum, want_sum, dtype)
    _assert_close(got_norm, want_norm, dtype)


def _random_moe(n: int, e: int, k: int, gen: torch.Generator):
    """A SparseMoe of e experts, top-k, with a random router on the test device, and n random rows for it."""
    from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.moe import SparseMoe

    cfg = parse_config(tiny_config_dict(TinySpec(num_experts=e, num_experts_per_tok=k)))
    moe = SparseMoe(cfg)
    with torch.no_grad():
        moe.gate.weight.copy_(torch.randn(moe.gate.weight.shape, generator=gen))
    return moe.to(DEVICE), _dev(_x(n, cfg.hidden_size, torch.float32, gen))[0]


@needs_triton
@pytest.mark.parametrize("n,e,k", [(7, 24, 3), (32, 256, 8), (1, 16, 1)])
def test_fused_route_matches_sparse_moe_route(force_triton, n, e, k) -> None:
    """Same experts in the same (descending) order and the same renormalised weights as `SparseMoe.route`."""
    from clover_local.runtime.kernels import fused_layer_ops

    gen = torch.Generator().manual_seed(n * e + k)
    moe, x = _random_moe(n, e, k, gen)
    want_idx, want_w, _ = moe.route(x)
    idx, w = fused_layer_ops(torch.device(DEVICE)).route_topk(moe.gate(x), k, x.dtype)
    assert idx.dtype == torch.int64 and torch.equal(idx, want_idx)
    _assert_close(w, want_w, torch.float32)

    class Seen(torch.nn.Module):  # the routing the model's forward hands its experts, through the hook
        def forward(self, flat, i, ww):
            self.idx, self.w = i, ww
            return torch.zeros_like(flat)

    moe.experts = Seen()
    moe.route_kernel = fused_layer_ops(torch.device(DEVICE)).route_topk
    moe(x)
    assert torch.equal(moe.experts.idx, want_idx)
    _assert_close(moe.experts.w, want_w, torch.float32)


@needs_triton
@pytest.mark.parametrize("n,e,k", [(7, 24, 3), (32, 256, 8)])
def test_restricted_route_chooses_among_allowed_experts(force_triton, n, e, k) -> None:
    """Resident routing (`allowed`: a slot table's row, -1 = not resident): the kernel and `SparseMoe.route` pick
    the same experts, all allowed, each row's k best of them by the unrestricted router, weighted by those
    probabilities renormalised; fewer than k allowed leaves the routing as it was."""
    from clover_local.runtime.kernels import fused_layer_ops

    gen = torch.Generator().manual_seed(n * e + k + 1)
    moe, x = _random_moe(n, e, k, gen)
    ops = fused_layer_ops(torch.device(DEVICE))
    _, _, probs = moe.route(x)
    slots = torch.randint(0, 1000, (e,), generator=gen, dtype=torch.int32)
    slots[torch.randperm(e, generator=gen)[: e // 2]] = -1  # half the experts not resident
    allowed = _dev(slots)[0]
    wanted_t, wanted_k = (torch.zeros(e, dtype=torch.int32, device=DEVICE) for _ in range(2))
    want_idx, want_w, _ = moe.route(x, (allowed, wanted_t))
    idx, w = ops.route_topk(moe.gate(x), k, x.dtype, (allowed, wanted_k))
    assert torch.equal(idx, want_idx)
    _assert_close(w, want_w, torch.float32)
    ok = (slots >= 0).to(DEVICE)
    assert bool(ok[idx].all())
    best = probs.masked_fill(~ok, -1).topk(k, -1)  # k best allowed by the unrestricted probabilities
    assert torch.equal(idx, best.indices)
    _assert_close(w, best.values / best.values.sum(-1, keepdim=True), torch.float32)
    free = moe.route(x)[0]
    assert not torch.equal(idx, free)  # the restriction changed something
    # wanted: per expert, the rows whose own top-k had it and lost it
    lost = torch.bincount(free[~ok[free]], minlength=e).to(torch.int32)
    assert int(lost.sum()) > 0 and torch.equal(wanted_k, lost) and torch.equal(wanted_t, lost)

    few = torch.full((e,), -1, dtype=torch.int32, device=DEVICE)
    few[: k - 1] = 0
    counts = torch.zeros(e, dtype=torch.int32, device=DEVICE)
    assert torch.equal(ops.route_topk(moe.gate(x), k, x.dtype, (few, counts))[0], free)
    assert int(counts.sum()) == 0  # nothing was taken away
    assert torch.equal(moe.route(x, (few, counts))[0], free) and int(counts.sum()) == 0


@needs_triton
@pytest.mark.parametrize("n,dtype", [(7, torch.float32), (32, torch.bfloat16)])
def test_fused_shared_expert_path_matches_sparse_moe(force_triton, n, dtype) -> None:
    """`SparseMoe.forward` with the shared expert merged (`PackedMLP`: gate and up in one packed call, silu · up
    fused) and the combine fused (`shared_combine`: the gate's one-column linear, sigmoid, product, sum, and the
    decoder layer's residual) gives the eager forward's output; and each fused op alone its line of eager code."""
    from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.moe import SparseMoe
    from clover_local.runtime.kernels import fused_layer_ops
    from clover_local.runtime.packed_linear import PackedLinear, PackedMLP, merge_columns

    ops = fused_layer_ops(torch.device(DEVICE))
    gen = torch.Generator().manual_seed(n)
    cfg = parse_config(tiny_config_dict(TinySpec(num_experts=16, num_experts_per_tok=4)))
    moe = SparseMoe(cfg)
    with torch.no_grad():
        for prm in moe.parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen) * 0.1)
    h, inter = cfg.hidden_size, cfg.shared_expert_intermediate_size

    def packed(k: int, cols: int, bits: int) -> PackedLinear:
        pk = _random_pack(k, cols, 32, bits, gen)
        return PackedLinear(*_dev(pk["qweight"], pk["scales"], pk["qzeros"]), 32, bits)

    gate, up, down = packed(h, inter, 8), packed(h, inter, 8), packed(inter, h, 8)
    moe.shared_expert.gate_proj, moe.shared_expert.up_proj, moe.shared_expert.down_proj = gate, up, down
    moe = moe.to(DEVICE, dtype)
    x = _dev(_x(n, h, dtype, gen))[0]
    want = moe(x)

    merged = merge_columns(gate, up)
    assert merged is not None and merged.out_features == 2 * inter and merge_columns(gate, packed(h, inter, 4)) is None
    both = merged(x)
    _assert_close(both, torch.cat([gate(x), up(x)], -1), dtype)
    _assert_close(ops.silu_mul(both), torch.nn.functional.silu(gate(x)) * up(x), dtype)
    routed, shared = moe.experts(x, *moe.route(x)[:2]), moe.shared_expert(x)
    _assert_close(ops.shared_combine(routed, x, moe.shared_expert_gate.weight, shared),
                  routed + torch.sigmoid(moe.shared_expert_gate(x)) * shared, dtype)

    res = _dev(_x(n, h, dtype, gen))[0]  # a decoder layer's residual, added after the MoE
    want_res = moe(x, residual=res)
    assert torch.equal(want_res, res + want)
    mlp = PackedMLP(merged, down)
    _assert_close(mlp(x), shared, dtype)  # the torch silu · up
    mlp.silu_mul_kernel = ops.silu_mul
    moe.shared_expert, moe.combine_kernel = mlp, ops.shared_combine
    _assert_close(moe(x), want, dtype)
    _assert_close(moe(x, residual=res), want_res, dtype)
    with pytest.raises(ValueError, match="disagree"):
        ops.shared_combine(routed, x[:, :-1], moe.shared_expert_gate.weight, shared)


@needs_triton
@pytest.mark.parametrize("dtype,n_heads,n_kv,head_dim,rotary", [(torch.float32, 4, 2, 32, 8),
                                                                (torch.bfloat16, 16, 2, 64, 16),
                                                                (torch.float32, 3, 1, 16, 16)])
def test_fused_norm_rope_matches_attention_project(force_triton, dtype, n_heads, n_kv, head_dim, rotary) -> None:
    """`Attention.project` with the head norms and the rotary embedding fused (`norm_rope`: q from the strided
    half of the q/gate projection, k whole) gives the eager q, k, v and gate, at positions past the start."""
    from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.attention import Attention
    from clover_local.model.rope import Rotary
    from clover_local.runtime.kernels import fused_layer_ops

    gen = torch.Generator().manual_seed(head_dim + n_heads)
    cfg = parse_config(tiny_config_dict(TinySpec()))
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = n_heads, n_kv, head_dim
    att = Attention(cfg)
    with torch.no_grad():
        for prm in att.parameters():
            prm.copy_(torch.randn(prm.shape, generator=gen) * (0.3 if prm.dim() == 1 else 0.1))
    att = att.to(DEVICE, dtype)
    x = _dev(_x(2 * 9, cfg.hidden_size, dtype, gen).reshape(2, 9, -1))[0]
    cos, sin = Rotary(rotary, 10000.0).cos_sin(torch.arange(100, 109, device=DEVICE), dtype)
    want = att.project(x, cos, sin)
    att.norm_rope_kernel = fused_layer_ops(torch.device(DEVICE)).norm_rope
    got = att.project(x, cos, sin)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        _assert_close(g, w, dtype)
    assert got[0].stride(-1) == 1 and got[1].stride(-1) == 1


@needs_triton
def test_fused_optimistic_slots_match_the_torch_mapping(force_triton) -> None:
    """Use counts (with repeats: atomic adds), slot lookup, non-resident choices zero-weighted on slot 0."""
    from clover_local.runtime.kernels import fused_layer_ops

    gen = torch.Generator().manual_seed(5)
    n_layers, e, row = 3, 40, 2
    table = torch.randint(-1, 500, (n_layers * e,), generator=gen, dtype=torch.int32)
    table[row * e : row * e + 8] = -1  # some certainly missing
    idx = torch.randint(0, e, (300, 8), generator=gen)
    idx[:5, 0] = 3  # repeats of a missing expert
    w = torch.rand(300, 8, generator=gen).bfloat16()
    table, idx, w = _dev(table, idx, w)
    counts = torch.zeros(n_layers * e, dtype=torch.int32, device=DEVICE)
    slots, w_out = fused_layer_ops(torch.device(DEVICE)).optimistic_slots(idx, w, table, counts, row * e)
    flat = idx.reshape(-1) + row * e
    want_counts = torch.zeros_like(counts).index_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    want_slots = table[flat].view(idx.shape)
    assert torch.equal(counts, want_counts)
    assert torch.equal(slots, want_slots.clamp(min=0)) and slots.dtype == table.dtype
    assert torch.equal(w_out, w.masked_fill(want_slots < 0, 0))
    assert bool((want_slots < 0).any()) and bool((want_slots >= 0).any())
    # host reads: a non-resident choice goes to host slot host_base + expert, its weight kept
    counts.zero_()
    slots, w_out = fused_layer_ops(torch.device(DEVICE)).optimistic_slots(idx, w, table, counts, row * e, 500)
    assert torch.equal(counts, want_counts)
    assert torch.equal(slots, torch.where(want_slots < 0, 500 + idx.to(table.dtype), want_slots))
    assert torch.equal(w_out, w)


@needs_triton
def test_fused_optimistic_slots_offer_slots_as_the_cache_says(force_triton) -> None:
    """Read-through: per layer, the missing experts by id take, in order, the offered slots whose expert the pass
    did not use (the layer before's: unpinned ones, then what earlier layers left over, then pinned ones; free ones
    for the first) — the kernel (one program over up to 2,400 choices a layer) against
    `ExpertCache.read_through_targets`, and against the PyTorch twin `OptimisticPass` runs off the GPU; the slot
    mapping and counts as without. The layers' routing is built so that every source is taken from and the
    candidates run out: few experts used in rows 0, 1 and 4 (spare slots, carried on), almost all in 2 and 3."""
    import numpy as np

    from clover_local.runtime.expert_cache import ExpertCache
    from clover_local.runtime.kernels import fused_layer_ops
    from clover_local.runtime.optimistic import OptimisticPass
    from clover_local.runtime.slab import SlabLayout

    gen = torch.Generator().manual_seed(6)
    n_layers, e = 5, 40
    n_slots = 100
    cache = ExpertCache(SlabLayout(64, 32, 4, 1, 1), n_slots, list(range(n_layers)), e, torch.device(DEVICE), None)
    flat = torch.randperm(n_layers * e, generator=gen)[: n_slots - 4].numpy()  # half resident, 4 slots free
    cache.slot_of.reshape(-1)[flat] = np.arange(flat.size)
    cache.owner[: flat.size] = flat
    cache.pin_gen[torch.randperm(flat.size, generator=gen)[:40].numpy()] = cache.gen  # pinned: offered last
    cache.set_read_through(True)
    offers = cache.offer_slots()
    table = torch.from_numpy(cache.slot_of.reshape(-1).astype(np.int32))
    assert (cache.offers[0] >= 0).sum() == 4 and (cache.offers[1:] >= 0).sum() > 10
    assert (cache.offers[1:] <= -2).sum() > 10
    used = [10, 10, 38, 38, 10]  # experts each layer routes to
    idx = [torch.randperm(e, generator=gen)[:k][torch.randint(0, k, (300, 8), generator=gen)] for k in used]
    w = torch.rand(300, 8, generator=gen).bfloat16()
    table_d, w = _dev(table, w)
    ops = fused_layer_ops(torch.device(DEVICE))
    counts, install = (torch.zeros(n_layers * e, dtype=torch.int32, device=DEVICE) for _ in range(2))
    rt = ops.ReadThrough(install, offers, torch.zeros(2 * e, dtype=torch.int32, device=DEVICE),
                         torch.zeros(1 + e, dtype=torch.int32, device=DEVICE), e)
    for row in range(n_layers):
        ids = idx[row].to(DEVICE)
        slots, w_out = ops.optimistic_slots(ids, w, table_d, counts, row * e, n_slots, rt)
        want_slots = table_d[ids + row * e]
        assert torch.equal(slots, torch.where(want_slots < 0, n_slots + ids.to(table.dtype), want_slots))
        assert torch.equal(w_out, w)
    c = counts.cpu().numpy().reshape(n_layers, e)
    want = cache.read_through_targets(c)
    assert np.array_equal(install.cpu().numpy().reshape(n_layers, e), want)
    missing = (c > 0) & (cache.slot_of < 0)
    assert (want[missing] > 0).any() and (want[missing] == 0).any()  # some read through, some ran out
    assert not want[~missing].any()  # only missing experts install
    taken = want[want > 0] - 1
    assert np.unique(taken).size == taken.size  # no slot twice
    own = [set(cache.offers[r][cache.offers[r] >= 0]) | set(-2 - cache.offers[r][cache.offers[r] <= -2])
           for r in range(n_layers)]
    assert any(s not in own[r] for r in range(n_layers) for s in want[r][want[r] > 0] - 1)  # carried
    assert any(-2 - s in cache.offers[r] for r in range(n_layers) for s in want[r][want[r] > 0] - 1)  # pinned
    for r in range(n_layers):  # nothing this pass used is overwritten: a taken slot's expert is unused
        for s in want[r][want[r] > 0] - 1:
            o = cache.owner[s]
            assert o < 0 or (o // e < r and c[o // e, o % e] == 0)
    # the PyTorch twin (`OptimisticPass` without the fused ops), same counts and offers
    opt = OptimisticPass(cache)
    opt.counts.copy_(counts)
    opt.table = table_d
    for row in range(n_layers):
        opt._assign_offers(row * e, offers, opt.install[row * e : (row + 1) * e])
    assert torch.equal(opt.install, install)


# --- the split-window preview attention vs the model's SDPA path ---------------------------------------------


@needs_triton
@pytest.mark.parametrize("b,h,hkv,t,d,w,n,chunk,dtype", [
    (1, 4, 2, 8, 16, 300, 170, 64, torch.float32),   # masked window over several splits and a partial chunk
    (2, 4, 1, 16, 32, 128, None, 256, torch.float32),  # no mask (every window key), one split, 2 sequences
    (1, 8, 2, 32, 64, 200, 3, 64, torch.bfloat16),   # almost empty window: splits with every key masked
])
@pytest.mark.parametrize("causal", [False, True], ids=["preview", "commit"])
def test_preview_attention_matches_sdpa(force_triton, b, h, hkv, t, d, w, n, chunk, dtype, causal) -> None:
    """A preview (every block key) or a commit written in place (`causal`: each row up to its own block key)."""
    import torch.nn.functional as F

    from clover_local.runtime.kernels.preview_attention import preview_attention

    gen = torch.Generator().manual_seed(w + t + d)
    rnd = lambda *s: torch.randn(*s, generator=gen).to(dtype)  # noqa: E731
    q, k, v = rnd(b, t, h, d).transpose(1, 2), rnd(b, hkv, t, d), rnd(b, hkv, t, d)  # q: strided like project()
    arena_k, arena_v = rnd(b, hkv, w + 40, d), rnd(b, hkv, w + 40, d)  # the window is a view of a longer arena
    k_win, v_win = arena_k[:, :, :w], arena_v[:, :, :w]
    committed = None if n is None else torch.arange(w) < n
    q, k, v, k_win, v_win = _dev(q, k, v, k_win, v_win)
    committed = None if committed is None else committed.to(DEVICE)
    window = committed if committed is not None else torch.ones(w, dtype=torch.bool, device=DEVICE)
    own = torch.ones(t, t, dtype=torch.bool, device=DEVICE)
    mask = torch.cat([window[None, :].expand(t, -1), own.tril() if causal else own], 1)
    want = F.scaled_dot_product_attention(q.float(), torch.cat([k_win, k], 2).float(), torch.cat([v_win, v], 2).float(),
                                          attn_mask=mask, scale=d**-0.5, enable_gqa=True).to(dtype)
    got = preview_attention(q, k, v, k_win, v_win, committed, d**-0.5, chunk=chunk, causal=causal)
    assert got.shape == want.shape and got.transpose(1, 2).is_contiguous()
    _assert_close(got, want, dtype)
    gate = _dev(rnd(b, t, h, 2 * d))[0][..., :d]  # the output gate: a strided half of the q projection
    gated = preview_attention(q, k, v, k_win, v_win, committed, d**-0.5, chunk=chunk, gate=gate, causal=causal)
    _assert_close(gated, (want.transpose(1, 2) * torch.sigmoid(gate)).transpose(1, 2), dtype)


@needs_triton
def test_preview_attention_hook_in_the_model(force_triton) -> None:
    """Through `Attention.forward` (preview over a cache with a committed prefix): same output with the hook."""
    from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.attention import Attention
    from clover_local.model.cache import AttentionCache
    from clover_local.model.rope import Rotary
    from clover_local.runtime.kernels import preview_attention_kernel

    cfg = parse_config(tiny_config_dict(TinySpec(head_dim=32)))
    gen = torch.Generator().manual_seed(8)
    att = Attention(cfg)
    with torch.no_grad():
        for p in att.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.2 if p.dim() > 1 else 0.3))
    att = att.to(DEVICE)
    rot = Rotary(int(cfg.head_dim * cfg.partial_rotary_factor), cfg.rope_theta)
    prefix, block = _dev(torch.randn(1, 50, cfg.hidden_size, generator=gen), torch.randn(1, 8, cfg.hidden_size, generator=gen))
    cache = AttentionCache()
    with torch.no_grad():
        cos, sin = rot.cos_sin(torch.arange(50, device=DEVICE), torch.float32)
        att(prefix, cos, sin, cache, preview=False)
        cos, sin = rot.cos_sin(torch.arange(50, 58, device=DEVICE), torch.float32)
        want = att(block, cos, sin, cache, preview=True)
        att.preview_kernel = preview_attention_kernel(cfg.head_dim, torch.device(DEVICE))
        got = att(block, cos, sin, cache, preview=True)
    _assert_close(got, want, torch.float32)


@needs_triton
def test_disable_fused_keeps_w4a16_kernels(force_triton, monkeypatch) -> None:
    """CLOVER_DISABLE_FUSED=1 (a benchmark's before): the model's own path for the fused pieces, Triton W4A16."""
    from clover_local.runtime import kernels

    dev = torch.device(DEVICE)
    gdn = _random_gdn({}, torch.float32, torch.Generator().manual_seed(0))
    assert kernels.fused_layer_ops(dev) is not None and kernels.gdn_preview_kernel(gdn, dev) is not None
    monkeypatch.setenv("CLOVER_DISABLE_FUSED", "1")
    assert kernels.fused_layer_ops(dev) is None and kernels.gdn_preview_kernel(gdn, dev) is None
    assert kernels.preview_attention_kernel(64, dev) is None
    assert kernels._use_triton(torch.zeros(1, device=DEVICE))


@needs_triton
def test_runtime_with_every_fused_kernel_matches_the_pytorch_path(force_triton, monkeypatch) -> None:
    """The whole runtime on a packed model (synthetic small pack: GDN and attention layers, offloading machinery,
    fp32) with every fused kernel installed — norms with and without the residual, RoPE, router, shared-expert
    path, combine, GDN preview with its merged input projection, preview attention with its output gate — against
    the same runtime with CLOVER_DISABLE_TRITON=1 (the model's PyTorch path and the reference W4A16 matmuls in the
    GPTQ row order: no Triton at all; it kept the W4A16 kernels until 2026-12-03, which under the interpreter made
    the test take 458 s instead of 259 s on a busy 2-core machine):
    the logits of a prefill, a preview, the block's commit, a merged commit + first preview (over the plain
    commit's state) and a preview after it agree (a preview over all masks and one right after the plain commit
    were dropped on 2026-12-07: they ran no path these do not). Pins the pieces' interplay (the hooks' contracts,
    views, residuals, repacked rows) that the per-op tests do not."""
    from clover_local.runtime.load import RuntimeOptions, load_packed_model
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    folder = ensure_synthetic("small")

    def passes(fused: bool) -> list[torch.Tensor]:
        monkeypatch.delenv("CLOVER_DISABLE_FUSED", raising=False)
        if fused:
            monkeypatch.delenv("CLOVER_DISABLE_TRITON", raising=False)
        else:
            monkeypatch.setenv("CLOVER_DISABLE_TRITON", "1")
        model = load_packed_model(folder, torch.device(DEVICE), torch.float32, RuntimeOptions(context=256))
        cfg = model.config
        assert (model.layers[0].linear_attn.in_proj_qkvz is not None) and (
            (model.layers[0].mlp.combine_kernel is not None) == fused)
        mask = cfg.diffusion.mask_token_id
        gen = torch.Generator().manual_seed(0)
        out = []
        with torch.inference_mode():
            cache = model.new_cache()
            out.append(model(torch.randint(0, mask, (1, 40), generator=gen).to(DEVICE), cache, rows=slice(-1, None)))
            block = torch.full((1, cfg.diffusion.block_size), mask, dtype=torch.long, device=DEVICE)
            block[0, :3] = torch.randint(0, mask, (3,), generator=gen).to(DEVICE)
            out.append(model(block, cache, preview=True))
            out.append(model(block, cache))
            # a commit merged with the next block's first preview (the fused GDN causal + preview kernels on the
            # commit's new state, the preview attention over the window with the commit's keys in it); it reads
            # the plain commit's state, so that state is checked here too
            out.extend(model.commit_and_preview(block.flip(1), torch.full_like(block, mask), cache))
            out.append(model(block, cache, preview=True))
        return out

    for got, want in zip(passes(True), passes(False)):
        assert want.abs().max() > 0.1
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


@needs_triton
@pytest.mark.parametrize("fused", [True, False], ids=["route_kernel", "route"])
def test_uniform_routing_reaches_the_experts_through_either_router(force_triton, fused) -> None:
    """bench's `UniformRouting` works on the router's logits, so a block's rows reach the experts it drew whether
    the fused top-k kernel (the path on CUDA, installed by the runtime's loader) or `SparseMoe.route` routes
    them. It once patched `route`, which the kernel bypasses: on a GPU `--routing uniform` (and `tune`'s uniform
    recording) would have timed the synthetic model's own ~15 experts a layer instead of ~160."""
    from clover_local.checkpoint.synthetic import TinySpec, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.clover import CloverModel
    from clover_local.model.moe import SparseMoe
    from clover_local.runtime.bench import UniformRouting
    from clover_local.runtime.kernels import fused_layer_ops

    cfg = parse_config(tiny_config_dict(TinySpec(num_experts=16, num_experts_per_tok=4)))
    torch.manual_seed(0)
    model = CloverModel(cfg).to(DEVICE)
    moes = [m for m in model.modules() if isinstance(m, SparseMoe)]
    seen: dict[int, torch.Tensor] = {}
    for i, moe in enumerate(moes):
        moe.route_kernel = fused_layer_ops(torch.device(DEVICE)).route_topk if fused else None
        moe.experts.register_forward_hook(lambda mod, args, out, i=i: seen.__setitem__(i, args[1].clone()))
    rows = 32
    x = torch.randn(rows, cfg.hidden_size, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    routing = UniformRouting(model, rows, seed=3)
    with torch.no_grad():
        for moe in moes:
            moe(x)
        drawn = [seen[i].sort(-1).values for i in range(len(moes))]
        for got, want in zip(drawn, routing.idx):
            assert torch.equal(got, want.sort(-1).values)
        assert len({e for d in drawn for e in d[:, 0].tolist()}) > 4  # rows spread over the experts
        # a merged pass (2 × rows: the block's commit, then the next block's rows) routes by the merged table
        routing.redraw_merged(seed=4)
        x2 = torch.cat([x, x.flip(0)])
        for moe in moes:
            moe(x2)
        for i, (m, k) in enumerate(zip(routing.merged, routing.top_k)):
            assert torch.equal(seen[i].sort(-1).values, m.topk(k, -1).indices.sort(-1).values)
            assert torch.equal(seen[i][:rows].sort(-1).values, drawn[i])  # the commit rows keep the block's
        routing.close()
        for moe in moes:
            moe(x)
    own = [seen[i].sort(-1).values for i in range(len(moes))]
    assert all(not torch.equal(a, b) for a, b in zip(own, drawn))  # closed: the model's own routing again


def test_every_kernel_compiles_for_h200_and_rtx50() -> None:
    """`compile_check`: each Triton kernel, launched by its own wrapper at the real model's shapes, compiles for
    sm_90 (H200), sm_120 (RTX 5070 Ti) and sm_89 (RTX 40: most 16 GB gaming cards) with the bundled ptxas and fits
    the arch's shared memory — what the interpreter cannot tell (its first run caught a global the compiler rejects
    and a 544 KiB attention tile)."""
    import json
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-m", "clover_local.runtime.kernels.compile_check", "--arch", "90,120,89",
                          "--json", "--sass"], env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    report = json.loads(res.stdout)
    bad = [(r["arch"], r["kernel"], r["case"], r.get("error", "shared memory over the limit")) for r in report["results"]
           if not r["ok"]]
    assert not bad, bad
    kernels = {r["kernel"] for r in report["results"]}
    assert {"_moe_kernel", "_linear_kernel", "_gdn_preview_kernel", "_gdn_causal_kernel", "_partial_kernel",
            "_route_topk_kernel", "_gdn_chunk_prep_kernel", "_gdn_chunk_scan_kernel"} <= kernels
    assert any(r["kernel"] == "_partial_kernel" and r["case"].endswith("causal") for r in report["results"])
    assert all(r["specialized"] for r in report["results"])  # compiled as a launch would compile them
    assert {r["arch"] for r in report["results"]} == {"sm_90", "sm_120", "sm_89"}
    # The default (field-wise) W4A16 tiles turn codes into floats without int→float instructions (I2F runs at a
    # quarter of the integer rate) and spend fewer instructions per weight in the K loop than the unpacking form.
    w4 = {(r["arch"], r["case"]): r for r in report["results"] if r["kernel"] in ("_moe_kernel", "_linear_kernel")}
    for arch in ("sm_90", "sm_120"):
        for case in ("MoE 4-bit H2048 I512 gate/up", "MoE 4-bit H2048 I512 down", "W4A16 2048->8192"):
            default = w4[(arch, case)]
            unpacked = w4[(arch, case.replace("I512 ", "I512 unpacked ") if "MoE" in case else case + " unpacked")]
            assert "I2F" not in default["loop_ops"] and unpacked["loop_ops"].get("I2F", 0) > 0, (arch, case)
            assert default["per_weight"] < 0.85 * unpacked["per_weight"], (arch, case, default["per_weight"],
                                                                          unpacked["per_weight"])
    # and the MoE's folded form (zero through a's row sums, act field-major) is below the field-wise form before it
    for arch in ("sm_90", "sm_120"):
        for half in ("gate/up", "down"):
            folded = w4[(arch, f"MoE 4-bit H2048 I512 {half}")]
            unfolded = w4[(arch, f"MoE 4-bit H2048 I512 unfolded {half}")]
            assert folded["per_weight"] < 0.95 * unfolded["per_weight"], (arch, half, folded, unfolded)
    # and on the RTX 50 (sm_120) its dots transposed (weights as the MMA's first operand: no register moves to
    # reorder a's fragment) are below the other way round, without a spill
    for half in ("gate/up", "down"):
        swapped = w4[("sm_120", f"MoE 4-bit H2048 I512 {half}")]
        unswapped = w4[("sm_120", f"MoE 4-bit H2048 I512 unswapped {half}")]
        assert swapped["per_weight"] < unswapped["per_weight"] and not swapped["spills"], (half, swapped, unswapped)
    # 3-bit experts (straddled runs, the unpacking form) turn codes into 16-bit floats by exponent bits too
    for arch in ("sm_90", "sm_120"):
        for half in ("gate/up", "down"):
            three = w4[(arch, f"MoE 3-bit H2048 I512 {half}")]
            assert "I2F" not in three["loop_ops"] and not three["spills"], (arch, half, three)
            # and in the planes layout read field-wise: no shared-memory store per weight (the unpacking form's
            # STS), fewer instructions (compile_check gate/up · down: triton 3.8 sm_90 4.93 vs 7.75 · 7.06 vs 8.86,
            # sm_120 4.37 vs 7.16 · 6.56 vs 7.8; triton 3.9 sm_90 5.47 vs 7.2 · 6.56 vs 7.98, sm_120 4.37 vs 7.16 ·
            # 6.56 vs 7.41; the operands built from words loaded as two tiles went through shared memory)
            planes = w4[(arch, f"MoE 3-bit planes H2048 I512 {half}")]
            assert planes["loop_ops"].get("STS", 0) < 8 <= three["loop_ops"]["STS"], (arch, half, planes)
            assert planes["per_weight"] < (0.85 if half == "gate/up" else 0.95) * three["per_weight"], (arch, half)
            assert "I2F" not in planes["loop_ops"] and not planes["spills"], (arch, half, planes)


# --- the short causal GDN pass (a commit), fused, vs the model's chunked path ---------------------------------


@needs_triton
@pytest.mark.parametrize(
    "spec_kw,b,t,ring,dtype",
    [
        # two value heads per key head, a ring and a state from earlier rows, fewer rows than the conv needs
        ({"linear_key_head_dim": 16, "linear_value_head_dim": 32, "block_size": 8}, 1, 2, True, torch.float32),
        # no ring yet (the sequence's first rows); one value head per key head; two sequences; a full block
        ({"linear_num_key_heads": 2, "linear_num_value_heads": 2, "block_size": 16}, 2, 16, False, torch.float32),
        # bf16 activations (the runtime's dtype), 32 rows, value channels over two programs (Dv 64 > 32)
        ({"linear_key_head_dim": 32, "linear_value_head_dim": 64, "block_size": 32}, 1, 32, True, torch.bfloat16),
    ],
)
def test_fused_gdn_causal_matches_model(force_triton, spec_kw, b, t, ring, dtype) -> None:
    """The layer's causal pass with `causal_kernel` installed gives the chunked path's output and writes the
    same ring and state into the cache."""
    from clover_local.model.cache import GDNCache
    from clover_local.runtime.kernels import gdn_causal_kernel

    gen = torch.Generator().manual_seed(t + b)
    gdn = _random_gdn(spec_kw, dtype, gen).to(DEVICE)
    with torch.no_grad():  # decays and gates in the model's range: A_log small, dt_bias around 0
        gdn.A_log.copy_(torch.randn(gdn.hv, generator=gen).to(gdn.A_log) * 0.5 - 1)
        gdn.dt_bias.copy_(torch.randn(gdn.hv, generator=gen).to(gdn.dt_bias))
    kernel = gdn_causal_kernel(gdn, torch.device(DEVICE))
    assert kernel is not None
    x, r, state = _gdn_inputs(gdn, b, t, dtype, gen)
    caches = []
    with torch.no_grad():
        outs = []
        for impl in (None, kernel):
            gdn.causal_kernel = impl
            cache = GDNCache(r.clone() if ring else None, state.clone())
            outs.append(gdn(x, cache, preview=False, n_prefix=0))
            caches.append(cache)
    want, got = outs
    assert want.abs().max() > 0.1  # the comparison has something to compare
    _assert_close(got, want, dtype)
    assert torch.equal(caches[0].ring, caches[1].ring)
    _assert_close(caches[1].state, caches[0].state, torch.float32 if dtype == torch.float32 else torch.bfloat16)
    assert not torch.equal(caches[1].state, state)  # the state moved


# --- the long causal GDN pass (a prefill chunk), chunked, vs the model's chunked path --------------------------


@needs_triton
@pytest.mark.parametrize(
    "spec_kw,b,t,chunk,ring,repeat,dtype",
    [
        # three chunks, the last one partial; two value heads per key head; a ring and a state
        ({"linear_key_head_dim": 16, "linear_value_head_dim": 32, "block_size": 8}, 1, 40, 16, True, False,
         torch.float32),
        # the real chunk of 64 rows, a partial second one; no ring yet; one value head per key head; two sequences
        ({"linear_num_key_heads": 2, "linear_num_value_heads": 2, "block_size": 16}, 2, 100, 64, False, False,
         torch.float32),
        # runs of one repeated row: keys repeat, the case where a Neumann product form of (I + A)^-1 cancels
        ({"linear_key_head_dim": 16, "linear_value_head_dim": 16, "block_size": 8}, 1, 64, 32, True, True,
         torch.float32),
        # bf16 activations (the runtime's dtype), value channels over two scan programs (Dv 64 > 32)
        ({"linear_key_head_dim": 32, "linear_value_head_dim": 64, "block_size": 32}, 1, 77, 32, True, False,
         torch.bfloat16),
    ],
)
def test_fused_gdn_chunked_matches_model(force_triton, spec_kw, b, t, chunk, ring, repeat, dtype) -> None:
    """The chunked kernels' output and new state are the model's (conv, norms, gates, `chunk_delta_rule`)."""
    from clover_local.runtime.kernels.gdn_chunked import fused_gdn_chunked

    gen = torch.Generator().manual_seed(t + b + chunk)
    gdn = _random_gdn(spec_kw, dtype, gen).to(DEVICE)
    with torch.no_grad():  # decays and gates in the model's range
        gdn.A_log.copy_(torch.randn(gdn.hv, generator=gen).to(gdn.A_log) * 0.5 - 1)
        gdn.dt_bias.copy_(torch.randn(gdn.hv, generator=gen).to(gdn.dt_bias))
        if repeat:  # a strong β: the corrections compound
            gdn.in_proj_b.weight.mul_(4)
    x, r, state = _gdn_inputs(gdn, b, t, dtype, gen)
    if repeat:
        x = x[:, torch.arange(t, device=x.device) // 16 * 16]
    with torch.no_grad():
        rows = gdn.in_proj_qkv(x)
        want, _, want_state = gdn.causal(x, rows, r if ring else None, state, None, False)
        got, got_state = fused_gdn_chunked(gdn, rows, r if ring else None, state, gdn.in_proj_a(x),
                                           gdn.in_proj_b(x), chunk=chunk)
    assert want.abs().max() > 0.1 and not torch.equal(want_state, state)  # something to compare
    tol = torch.float32 if dtype == torch.float32 else torch.bfloat16
    _assert_close(got, want, tol)
    _assert_close(got_state, want_state, tol)


@needs_triton
def test_causal_kernel_runs_a_prefill_chunked(force_triton, monkeypatch) -> None:
    """The runtime's causal kernel takes a block row by row and anything longer to the chunked kernels, and the
    layer's prefill with it installed gives the model's output, ring and state."""
    from clover_local.model.cache import GDNCache
    from clover_local.runtime.kernels import gdn_causal, gdn_causal_kernel

    calls = []
    chunked = gdn_causal.fused_gdn_chunked
    monkeypatch.setattr(gdn_causal, "fused_gdn_chunked", lambda *a, **k: calls.append(a[1].shape[1]) or chunked(*a, **k))
    gen = torch.Generator().manual_seed(5)
    gdn = _random_gdn({"linear_key_head_dim": 16, "linear_value_head_dim": 16, "block_size": 8}, torch.float32,
                      gen).to(DEVICE)
    kernel = gdn_causal_kernel(gdn, torch.device(DEVICE))
    assert kernel is not None
    for t in (gdn_causal.SHORT_ROWS, gdn_causal.SHORT_ROWS + 9):
        x, r, state = _gdn_inputs(gdn, 1, t, torch.float32, gen)
        caches, outs = [], []
        with torch.no_grad():
            for impl in (None, kernel):
                gdn.causal_kernel = impl
                caches.append(GDNCache(r.clone(), state.clone()))
                outs.append(gdn(x, caches[-1], preview=False, n_prefix=0))
        _assert_close(outs[1], outs[0], torch.float32)
        assert torch.equal(caches[0].ring, caches[1].ring)
        _assert_close(caches[1].state, caches[0].state, torch.float32)
    assert calls == [gdn_causal.SHORT_ROWS + 9]  # the block ran row by row, the longer pass chunked


@needs_triton
@pytest.mark.parametrize("shape,dtype", [((2, 5, 3, 32), torch.float32), ((1, 40, 4, 128), torch.bfloat16)])
def test_fused_gated_rms_norm_matches_the_model_norm(force_triton, shape, dtype) -> None:
    """A GDN layer's output norm after a causal pass, from the fp32 mix: the kernel's one launch gives the
    model's cast-then-norm-then-gate, in the gate's dtype."""
    from clover_local.model.norm import GatedRMSNorm
    from clover_local.runtime.kernels import fused_layer_ops

    gen = torch.Generator().manual_seed(shape[1])
    norm = GatedRMSNorm(shape[-1], eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(shape[-1], generator=gen) * 0.3 + 1)
    norm = norm.to(DEVICE, dtype)
    rows = int(torch.tensor(shape[:-1]).prod())
    o = _dev(torch.randn(shape, generator=gen) * 3)[0]  # the mix, fp32
    z = _dev(_x(rows, shape[-1], dtype, gen).reshape(shape) * 2)[0]
    want = norm(o.to(dtype), z)
    norm.kernel = fused_layer_ops(torch.device(DEVICE)).gated_rms_norm
    got = norm(o, z)
    assert got.dtype == dtype
    _assert_close(got, want, dtype)
    wide = torch.cat([z, z], -1)[..., : shape[-1]]  # a gate whose rows are not contiguous (a view of a wider one)
    _assert_close(norm(o, wide), want, dtype)
    # a column slice of a packed projection (in_proj_qkvz's z), split into heads: strided heads, read in place
    packed = torch.cat([z.flatten(-2), z.flatten(-2)[..., :8]], -1)
    sliced = packed[..., : shape[-2] * shape[-1]].unflatten(-1, shape[-2:])
    assert sliced.stride(-2) == shape[-1] and not sliced.is_contiguous()
    _assert_close(norm(o, sliced), want, dtype)
    with pytest.raises(ValueError, match="power of two"):
        norm.kernel(o[..., :24], z[..., :24], norm.weight[:24], 1e-6)


@needs_triton
def test_non_finite_router_input_is_one_clear_error(force_triton) -> None:
    """A row of NaN router logits (what the H200 runs of 2026-12-04 hit): the fused top-k still returns ids inside
    0…E−1 (optimistic passes index device tables with them: id E read and wrote past them), with NaN weights; a
    syncing pass stops with a CloverError that says the hidden states are not finite and how to find where,
    instead of an IndexError from the slot table; the runtime then serves the next pass."""
    from clover_local.errors import CloverError
    from clover_local.runtime.kernels import fused_layer_ops
    from clover_local.runtime.load import RuntimeOptions, load_packed_model
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    logits = torch.randn(3, 16)
    logits[1] = float("nan")
    idx, w = fused_layer_ops(torch.device(DEVICE)).route_topk(logits.to(DEVICE), 4, torch.float32)
    assert 0 <= int(idx.min()) and int(idx.max()) < 16 and torch.isnan(w[1]).all() and torch.isfinite(w[0]).all()
    model = load_packed_model(ensure_synthetic("small"), torch.device(DEVICE), torch.float32,
                              RuntimeOptions(context=256, optimistic=False))
    moe = model.layers[1].mlp
    assert moe.route_kernel is not None
    hook = moe.gate.register_forward_hook(lambda mod, inp, out: torch.full_like(out, float("nan")))
    ids = torch.randint(0, 1000, (1, 24), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    with torch.inference_mode():
        with pytest.raises(CloverError, match=r"layer 1's router got non-finite logits.*not finite.*--stages finite"):
            model(ids, model.new_cache(), rows=slice(-1, None))
        hook.remove()
        assert torch.isfinite(model(ids, model.new_cache(), rows=slice(-1, None))).all()


@needs_triton
def test_gpu_check_dense_shapes_follow_the_loader_and_pass(force_triton, monkeypatch) -> None:
    """`gpu_check.model_dense_shapes` names exactly the packed projections a load of the synthetic pack owns
    (after its merges: the H200's NaN came from a merged shape no check had), and `dense_shapes_check` passes on
    them with the configs a 132-SM GPU picks (split-K included), interpreted."""
    from clover_local.runtime import gpu_check
    from clover_local.runtime.kernels import w4a16
    from clover_local.runtime.load import RuntimeOptions, load_packed_model
    from clover_local.runtime.packed_linear import PackedLinear
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    model = load_packed_model(ensure_synthetic("small"), torch.device(DEVICE), torch.float32,
                              RuntimeOptions(context=256))
    owned = {(m.in_features, m.out_features) for m in model.modules()
             if isinstance(m, PackedLinear) and "qweight" in m._buffers}
    assert owned == set(gpu_check.model_dense_shapes("small").values())
    monkeypatch.setattr(w4a16, "_num_sms", lambda device: 132)
    assert any(w4a16.linear_config(32, n, k, 128, 8, torch.device("cpu")).split_k > 1
               for k, n in gpu_check.model_dense_shapes("small").values())
    monkeypatch.setattr(gpu_check, "_timed_ms", lambda dev, fn: 1.0 + 0.0 * (fn() is None))  # (CUDA events)
    res = gpu_check.dense_shapes_check(torch.device(DEVICE), torch.Generator().manual_seed(0), rows=(1, 32),
                                       kind="small")
    assert res["ok"], res
    assert len(res["shapes"]) == 2 * 2 * len(gpu_check.model_dense_shapes("small"))
    timed = [key for key, v in res["shapes"].items() if "ms" in v]
    assert len(timed) == len(gpu_check.model_dense_shapes("small")) and all("8-bit 32 rows" in k for k in timed)
    assert all(res["shapes"][k]["graph_us"] is None for k in timed)  # no CUDA graph here: said so, not guessed


@needs_triton
@pytest.mark.skipif(not _INTERPRETED, reason="the bounds check patches Triton's interpreter")
def test_interpreter_bounds_check_names_an_access_past_the_tensors() -> None:
    """The net every interpreted launch of the tests runs under (`interpreter_bounds`, conftest): in-bounds
    accesses and masked-off lanes pass; one element past the tensor fails with the kernel's name — the reads of
    the uneven split-K launch (2026-12-04) went that way, finite on the CPU, NaN on a GPU."""
    import triton
    import triton.language as tl

    from interpreter_bounds import OutOfBounds, checked_accesses

    @triton.jit
    def shifted_copy(x_ptr, o_ptr, n, shift, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(o_ptr + i, tl.load(x_ptr + i + shift, mask=i < n, other=0.0), mask=i < n)

    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    out = torch.zeros(8)
    with checked_accesses():
        shifted_copy[(1,)](x, out, 8, 0, BLOCK=16)  # lanes 8..15 masked off: never read
        assert torch.equal(out, x)
        shifted_copy[(1,)](x[2:], out, 6, 0, BLOCK=16)  # a view: its storage is the tensor's
        with pytest.raises(Exception, match=r"shifted_copy: load of 1 element"):
            shifted_copy[(1,)](x, out, 8, 1, BLOCK=16)
        with pytest.raises(Exception, match=r"shifted_copy: store of 2 element"):
            shifted_copy[(1,)](x, out[:6].clone(), 8, 0, BLOCK=16)
    assert issubclass(OutOfBounds, AssertionError)

    @triton.jit
    def chained(buf_ptr):  # each program reads what the one before it wrote: an order no GPU promises
        p = tl.program_id(0)
        tl.store(buf_ptr + p + 4, tl.load(buf_ptr + tl.maximum(p - 1, 0)) + 1)
        tl.store(buf_ptr + p, p * 10 + 1)

    seen = []
    for reverse in (False, True):
        buf = torch.zeros(8, dtype=torch.int32)
        with checked_accesses(reverse_programs=reverse):
            chained[(4,)](buf)
        seen.append(buf[4:].tolist())
    # first to last and last to first (in either order of the two: the conftest's own check may be reversing too)
    assert sorted(seen) == [[1, 1, 1, 1], [1, 2, 12, 22]]


@needs_triton
def test_fused_multiply_add_stays_on_under_every_triton_without_a_warning(monkeypatch) -> None:
    """clover_local sets TRITON_DEFAULT_FP_FUSION=1 unless the user set it: triton 3.9 warns onto the screen when it
    is unset and 3.10 turns fusion off, where the kernels were checked and timed with it on. A user's 0 stays."""
    import subprocess
    import sys
    import warnings

    code = "import os, clover_local; print(os.environ.get('TRITON_DEFAULT_FP_FUSION'))"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_FP_FUSION"}

    def run(extra: dict) -> str:
        return subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True,
                              check=True).stdout.strip()

    assert run({}) == "1" and run({"TRITON_DEFAULT_FP_FUSION": "0"}) == "0"
    from triton import knobs

    language = knobs.language
    if hasattr(language, "fp_fusion_enabled"):  # (triton ≥ 3.9: the knob that warns)
        monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert language.fp_fusion_enabled(None) is True


@needs_triton
@pytest.mark.skipif(not _INTERPRETED, reason="patches Triton's interpreter")
def test_interpreter_runs_without_the_overflow_checks_it_discards() -> None:
    """conftest turns off the interpreter's integer-overflow checks (`skip_discarded_overflow_checks`): a third of
    an interpreted MoE launch's time. Pinned: they are off in this run (a triton that moves the option shows here,
    not as a slower CI), and turning them off changes no result — int32 arithmetic that overflows wraps as before,
    with no error either way, because without `debug` the interpreter never looked at the check."""
    import dataclasses

    import triton
    import triton.language as tl
    from triton.runtime import interpreter as itp

    from interpreter_bounds import skip_discarded_overflow_checks

    opts = itp.interpreter_builder.options
    assert opts.sanitize_overflow is False and opts.debug is False
    assert skip_discarded_overflow_checks() is False  # already off: nothing to do

    @triton.jit
    def wrapping(x_ptr, o_ptr, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i)
        tl.store(o_ptr + i, x * 3 + x - 7)

    x = torch.tensor([2**30 + 5, -(2**30) - 3, 7, 2**31 - 1], dtype=torch.int32)
    want = x.to(torch.int64) * 4 - 7
    want = ((want + 2**31) % 2**32 - 2**31).to(torch.int32)  # two's-complement wrap
    outs = []
    for sanitize in (True, False):
        itp.interpreter_builder.options = dataclasses.replace(opts, sanitize_overflow=sanitize)
        try:
            out = torch.zeros_like(x)
            wrapping[(1,)](x, out, BLOCK=4)
            outs.append(out)
        finally:
            itp.interpreter_builder.options = opts
    assert torch.equal(outs[0], want) and torch.equal(outs[1], want)
