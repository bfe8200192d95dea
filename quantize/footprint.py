"""Room a `quantize` run needs on --out's disk, known before its first layer: a 35B run takes hours, and a disk that
fills at layer 38 costs them (the run resumes, but only once the space is found). What it writes: the pack (≈ 20 GB
at 35B, from config.json alone, as `plan` of a BF16 checkpoint computes it, byte for byte) and, while it runs, the
next layer's calibration inputs that `--resume` starts from — a file the size of the calibration streams, two at
once for a moment (the new one is written before the old one goes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from clover_local.config import CloverConfig
from clover_local.errors import CloverError

MARGIN = 1024**3  # left free: the manifest, the card, logs, the system's own needs
ENTRY_BYTES = 200  # a tensor's entry in its shard's header and in the index (≈ 110 + 90 bytes on the tiny pack)
GB = 1e9


def pack_bytes(src: Path, bits: int, profile: str, group_size: int) -> int:
    """The pack's bytes: its tensors as `plan` computes them from SRC's config.json, their entries in the shards'
    headers and the index, and the small files copied from SRC (tokenizer, chat template)."""
    from clover_local.runtime.synthetic_pack import checkpoint_index

    index = checkpoint_index(src, bits, profile, group_size, str(src))
    small = sum(f.stat().st_size for f in src.iterdir() if f.is_file() and f.suffix != ".safetensors")
    return sum(t.nbytes for t in index.tensors.values()) + ENTRY_BYTES * len(index.tensors) + small


def progress_bytes(cfg: CloverConfig, sequences: int, seq_len: int, streams: int, dtype: torch.dtype,
                   held_out_tokens: int = 0) -> int:
    """One file of a layer's calibration inputs: `streams` (clean, and noisy in diffusion mode) of sequences ×
    seq_len rows in the compute dtype, and the held-out text's four float32 streams where quality is measured."""
    row = cfg.hidden_size
    return (sequences * seq_len * streams * row * torch.finfo(dtype).bits // 8
            + held_out_tokens * 4 * row * 4)


def check_room(out: Path, progress_dir: Path, pack: int, progress: int) -> None:
    """Refuse, before the first layer is read, a run whose rest --out's disk cannot take. What --out already holds
    of it (finished shards, the saved inputs of a run being resumed, a write a kill cut short: its layer writes it
    again in the same place) is counted as written."""
    held = [*out.glob("model-*-of-*.safetensors"), *out.glob("*.tmp"), *progress_dir.glob("hidden-*.safetensors"),
            *progress_dir.glob("*.tmp")]
    need = max(pack + 2 * progress - sum(f.stat().st_size for f in held), 0)
    base = out
    while not base.exists() and base != base.parent:
        base = base.parent
    free = shutil.disk_usage(base).free
    if need + MARGIN <= free:
        return
    raise CloverError(
        f"quantizing into {out} needs ≈ {need / GB:.1f} GB more on its disk (the pack ≈ {pack / GB:.1f} GB; the "
        f"calibration inputs --resume starts from, ≈ {2 * progress / GB:.1f} GB while it runs), which has "
        f"{free / GB:.1f} GB free: free some space or choose --out on another disk (fewer --samples or a shorter "
        f"--seq-len make the inputs smaller)")
