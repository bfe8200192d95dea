"""The GPTQ pack layout, checked by a reader written here from the format description alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from quantize.gptq import rtn_quantize
from quantize.gptq_format import default_g_idx, dequantize, pack_weight, unpack_weight


def _bit_stream(words: np.ndarray, count: int, bits: int) -> np.ndarray:
    """Values 0 … count−1 of each column of uint32 words [W, C] read as one little-endian bit stream: value v is
    bits bits·v … bits·v + bits − 1 (across a word boundary where it falls on one)."""
    w = words.astype(np.uint64)
    following = np.vstack([w[1:], np.zeros((1, w.shape[1]), dtype=np.uint64)])
    out = np.empty((count, w.shape[1]), dtype=np.int64)
    for v in range(count):
        i, s = divmod(bits * v, 32)
        out[v] = ((w[i] | (following[i] << np.uint64(32))) >> np.uint64(s)) & np.uint64((1 << bits) - 1)
    return out


def read_gptq(tensors: dict[str, torch.Tensor], bits: int) -> np.ndarray:
    """Independent decoder (numpy, float64): qweight's columns and qzeros' rows as bit streams, lowest bits
    first, zeros stored − 1."""
    qweight = tensors["qweight"].numpy().view(np.uint32)  # [in·bits/32, out]
    qzeros = tensors["qzeros"].numpy().view(np.uint32)  # [groups, out·bits/32]
    scales = tensors["scales"].numpy().astype(np.float64)  # [groups, out]
    g_idx = tensors["g_idx"].numpy().astype(np.int64)  # [in]
    n_in, n_out = qweight.shape[0] * 32 // bits, qweight.shape[1]
    q = _bit_stream(qweight, n_in, bits)  # [in, out]
    zeros = _bit_stream(qzeros.T, n_out, bits).T + 1  # [groups, out]
    w = (q - zeros[g_idx, :]) * scales[g_idx, :]  # [in, out]
    return w.T


def _random_weight(out_features: int, in_features: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(out_features, in_features, generator=gen)
    return torch.where(w == 0, torch.full_like(w, 1e-3), w)  # never exact zeros


@pytest.mark.parametrize("bits", [3, 4, 8])
@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("sym", [True, False])
def test_independent_reader_recovers_weights_within_half_step(bits: int, group_size: int, sym: bool) -> None:
    w = _random_weight(64, 256, seed=bits * 1000 + group_size + sym)
    r = rtn_quantize(w, bits=bits, group_size=group_size, sym=sym)
    tensors = pack_weight(r.q, r.scales, r.zeros, r.g_idx, bits)

    assert tensors["qweight"].dtype == torch.int32 and tuple(tensors["qweight"].shape) == (256 * bits // 32, 64)
    assert tensors["qzeros"].dtype == torch.int32 and tuple(tensors["qzeros"].shape) == (256 // group_size,
                                                                                          64 * bits // 32)
    assert tensors["scales"].dtype == torch.float16 and tuple(tensors["scales"].shape) == (256 // group_size, 64)
    assert tensors["g_idx"].dtype == torch.int32 and tuple(tensors["g_idx"].shape) == (256,)

    w_hat = read_gptq(tensors, bits)
    step = tensors["scales"].numpy().astype(np.float64)[tensors["g_idx"].numpy(), :].T  # [out, in]
    err = np.abs(w.numpy().astype(np.float64) - w_hat)
    assert np.all(err <= step * (0.5 + 1e-4) + 1e-7), float((err / step).max())
    # The library's own decoder agrees with the independent one.
    np.testing.assert_allclose(dequantize(tensors, bits).numpy(), w_hat, rtol=1e-6, atol=1e-7)


def test_symmetric_zero_convention() -> None:
    w = _random_weight(16, 64, seed=1)
    for bits, stored in ((4, 0x77777777), (8, 0x7F7F7F7F)):
        r = rtn_quantize(w, bits=bits, group_size=32, sym=True)
        assert torch.all(r.zeros == 2 ** (bits - 1))
        qzeros = pack_weight(r.q, r.scales, r.zeros, r.g_idx, bits)["qzeros"]
        assert np.all(qzeros.numpy().view(np.uint32) == stored)


def test_bit_layout_by_hand() -> None:
    """Row 8i+j of a column sits in bits 4j..4j+3; output columns 8k+j of qzeros likewise."""
    q = torch.zeros(8, 16, dtype=torch.uint8)
    q[0, :8] = torch.arange(1, 9)  # rows 0..7 of output column 0
    q[0, 8:] = torch.arange(15, 7, -1)  # rows 8..15 of output column 0
    zeros = torch.arange(1, 9, dtype=torch.int32).view(8, 1)  # one group, output columns 0..7
    tensors = pack_weight(q, torch.ones(8, 1), zeros, torch.zeros(16, dtype=torch.int32), bits=4)
    qweight = tensors["qweight"].numpy().view(np.uint32)
    assert qweight[0, 0] == 0x87654321
    assert qweight[1, 0] == 0x89ABCDEF
    assert np.all(qweight[:, 1:] == 0)
    assert tensors["qzeros"].numpy().view(np.uint32)[0, 0] == 0x76543210  # zero − 1


def test_3bit_layout_by_hand() -> None:
    """32 rows fill three words, row r at bit 3r of their concatenation: row 10 spans words 0 and 1 (bits 30–32),
    row 21 words 1 and 2 (bits 63–65); qzeros' columns likewise."""
    q = torch.zeros(32, 32, dtype=torch.uint8)
    q[0, 10] = 0b101  # output column 0: bits 30, 32
    q[0, 21] = 0b011  # bits 63, 64
    q[0, 31] = 0b100  # bit 95
    zeros = torch.ones(32, 1, dtype=torch.int32)
    zeros[10] = 7  # stored 6 = 0b110 at bits 30–32 of qzeros' row
    tensors = pack_weight(q, torch.ones(32, 1), zeros, torch.zeros(32, dtype=torch.int32), bits=3)
    qweight = tensors["qweight"].numpy().view(np.uint32)
    assert qweight.shape == (3, 32)
    assert list(qweight[:, 0]) == [1 << 30, (1 << 0) | (1 << 31), (1 << 0) | (1 << 31)]
    assert np.all(qweight[:, 1:] == 0)
    assert list(tensors["qzeros"].numpy().view(np.uint32)[0]) == [1 << 31, 1, 0]


@pytest.mark.parametrize("bits", [3, 4, 8])
@pytest.mark.parametrize("group_size", [-1, 32, 128])
def test_round_trip_exact(bits: int, group_size: int) -> None:
    w = _random_weight(32, 256, seed=7)
    r = rtn_quantize(w, bits=bits, group_size=group_size, sym=False)
    q, scales, zeros, g_idx = unpack_weight(pack_weight(r.q, r.scales, r.zeros, r.g_idx, bits), bits)
    assert torch.equal(q, r.q)
    assert torch.equal(scales, r.scales)
    assert torch.equal(zeros, r.zeros)
    assert torch.equal(g_idx, r.g_idx)


def test_round_trip_with_permuted_g_idx() -> None:
    """act-order packs carry a non-monotonic g_idx; decoding must follow it column by column."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randint(0, 16, (16, 64), generator=gen, dtype=torch.uint8)
    scales = (torch.rand(16, 4, generator=gen) + 0.01).half().float()
    zeros = torch.randint(1, 16, (16, 4), generator=gen, dtype=torch.int32)
    g_idx = default_g_idx(64, 16)[torch.randperm(64, generator=gen)]
    tensors = pack_weight(q, scales, zeros, g_idx, 4)
    q2, s2, z2, g2 = unpack_weight(tensors, 4)
    assert torch.equal(q2, q) and torch.equal(s2.float(), scales) and torch.equal(z2, zeros) and torch.equal(g2, g_idx)
    expected = (q.int() - zeros[:, g_idx.long()]).float() * scales[:, g_idx.long()]
    assert torch.equal(dequantize(tensors, 4), expected)
    np.testing.assert_allclose(read_gptq(tensors, 4), expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("bits", [3, 4, 8])
def test_a_matrix_packed_a_slice_of_rows_at_a_time_is_packed_as_whole(bits: int, monkeypatch) -> None:
    """`pack_last` goes through a large matrix (the 248K-row LM head) a bounded slice of rows at a time: slices of
    5 rows of 256 values (96 rows: the last slice 1 row) give the bytes one slice gives, and they read back."""
    import quantize.gptq_format as fmt

    r = rtn_quantize(_random_weight(96, 256, seed=bits), bits=bits, group_size=32)
    whole = pack_weight(r.q, r.scales, r.zeros, r.g_idx, bits)
    monkeypatch.setattr(fmt, "PACK_CHUNK", 5 * 256 + 5)
    sliced = pack_weight(r.q, r.scales, r.zeros, r.g_idx, bits)
    assert all(torch.equal(sliced[k], whole[k]) for k in whole)
    q, _, zeros, _ = unpack_weight(sliced, bits)
    assert torch.equal(q, r.q) and torch.equal(zeros, r.zeros)


def test_expert_shaped_pack_is_small() -> None:
    w = _random_weight(256, 512, seed=11)
    r = rtn_quantize(w, bits=4, group_size=128, sym=True)
    tensors = pack_weight(r.q, r.scales, r.zeros, r.g_idx, 4)
    packed_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
    assert packed_bytes <= 0.3 * w.numel() * 2  # BF16 is 2 bytes per weight


def test_pack_rejects_bad_input() -> None:
    w = _random_weight(16, 64, seed=5)
    r = rtn_quantize(w, bits=4, group_size=32, sym=True)
    with pytest.raises(ValueError, match="zeros"):
        pack_weight(r.q, r.scales, torch.zeros_like(r.zeros), r.g_idx, 4)  # zero 0 is not storable in v1
    with pytest.raises(ValueError, match="q values"):
        pack_weight(r.q.int() + 16, r.scales, r.zeros, r.g_idx, 4)
    with pytest.raises(ValueError, match="bits"):
        pack_weight(r.q, r.scales, r.zeros, r.g_idx, 5)
    with pytest.raises(ValueError, match="divisible"):
        pack_weight(r.q[:12], r.scales[:12], r.zeros[:12], r.g_idx, 4)
    tensors = pack_weight(r.q, r.scales, r.zeros, r.g_idx, 4)
    with pytest.raises(ValueError, match="wrong bits"):
        unpack_weight(tensors, 8)
    with pytest.raises(ValueError, match="missing"):
        unpack_weight({"qweight": tensors["qweight"]}, 4)


# --- mutation-testing additions ------------------------------------------------------------------------------


def test_pack_rejects_g_idx_naming_a_group_past_the_last() -> None:
    w = _random_weight(16, 64, seed=21)
    r = rtn_quantize(w, bits=4, group_size=32, sym=True)  # 2 groups: g_idx must lie in [0, 2)
    g_idx = r.g_idx.clone()
    g_idx[7] = 2  # exactly n_groups: one past the last group
    with pytest.raises(ValueError, match="g_idx"):
        pack_weight(r.q, r.scales, r.zeros, g_idx, 4)
    g_idx[7] = -1
    with pytest.raises(ValueError, match="g_idx"):
        pack_weight(r.q, r.scales, r.zeros, g_idx, 4)
    g_idx[7] = 1  # any column may sit in the last group
    assert torch.equal(pack_weight(r.q, r.scales, r.zeros, g_idx, 4)["g_idx"], g_idx)


def test_unpack_rejects_scales_that_do_not_match_the_groups() -> None:
    w = _random_weight(16, 64, seed=22)
    r = rtn_quantize(w, bits=4, group_size=32, sym=True)
    tensors = pack_weight(r.q, r.scales, r.zeros, r.g_idx, 4)  # scales [2 groups, 16 out]
    for bad in (tensors["scales"][:1], tensors["scales"][:, :8], torch.cat([tensors["scales"]] * 2)):
        with pytest.raises(ValueError, match="scales"):
            unpack_weight({**tensors, "scales": bad.contiguous()}, 4)


@pytest.mark.parametrize("bits", [3, 4, 8])
def test_rows_dequantized_a_slice_at_a_time_are_the_whole_matrix_rows(bits):
    """The LM head's logits are made from slices of its rows (`QuantizedRows`): whole, its dequantization passes
    through ≈ 8 GB of temporaries at 35B. Each slice equals those rows of the whole, in every layout (3-bit packs
    runs of 32 outputs across words), the last slice cut short included; a slice off the 32-row grid is refused."""
    from clover_local.pack.reader import QuantizedRows
    from quantize.gptq_format import dequantize_rows

    gen = torch.Generator().manual_seed(bits)
    out, inp, group = (224 if bits == 3 else 200), 64, 32  # 200: the last slice ends off the 32-row grid
    q = torch.randint(0, 2**bits, (out, inp), generator=gen)
    scales = torch.rand(out, inp // group, generator=gen).half() + 0.01
    zeros = torch.randint(1, 2**bits, (out, inp // group), generator=gen)
    packed = pack_weight(q, scales, zeros, default_g_idx(inp, group), bits)
    whole = dequantize(packed, bits)
    for a, b in ((0, 64), (64, 96), (160, out), (0, out)):
        assert torch.equal(dequantize_rows(packed, bits, a, b), whole[a:b])
    rows = QuantizedRows(packed)
    assert rows.shape == (out, inp) and torch.equal(rows[32:192], whole[32:192])
    with pytest.raises(IndexError):
        rows[5:40]
