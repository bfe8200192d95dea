"""Room a `quantize` run needs on --out's disk, known before its first layer (and, for a Hub SRC it downloads,
before the download): a 35B run takes hours, and a disk that fills at layer 38 costs them (the run resumes, but only
once the space is found). What it writes: the pack (≈ 20 GB at 35B, from config.json alone, as `plan` of a BF16
checkpoint computes it, byte for byte) and, while it runs, the next layer's calibration inputs that `--resume`
starts from — a file the size of the calibration streams, two at once for a moment (the new one is written before
the old one goes)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from clover_local.config import CloverConfig
from clover_local.errors import CloverError
from clover_local.hub.resume import DISK_MARGIN
from clover_local.paths import nearest_existing

if TYPE_CHECKING:
    from clover_local.runtime.pack_index import PackIndex
    from quantize.pipeline import QuantizeSettings
    from quantize.quality import QualityCheck

ENTRY_BYTES = 200  # a tensor's entry in its shard's header and in the index (≈ 110 + 90 bytes on the tiny pack)
GB = 1e9


def compute_dtype(device: torch.device) -> torch.dtype:
    """What a layer is computed in, and the calibration streams held (and saved for --resume) in: on a GPU every
    value they take is a bf16 result, so bf16 holds them exactly in half the memory (2 GiB, not 4, at the
    default)."""
    return torch.float32 if device.type == "cpu" else torch.bfloat16


def pack_bytes(index: PackIndex, small_files: int = 0) -> int:
    """The pack's bytes: its tensors (the index `plan` computes from config.json), their entries in the shards'
    headers and the index, and the small files copied beside them (tokenizer, chat template)."""
    return sum(t.nbytes for t in index.tensors.values()) + ENTRY_BYTES * len(index.tensors) + small_files


def small_files(src: Path) -> int:
    """The bytes of SRC's files other than weights: what the pack copies of them, at most."""
    return sum(f.stat().st_size for f in src.iterdir() if f.is_file() and f.suffix != ".safetensors")


def progress_bytes(cfg: CloverConfig, sequences: int, seq_len: int, streams: int, dtype: torch.dtype,
                   held_out_tokens: int = 0) -> int:
    """One file of a layer's calibration inputs: `streams` (clean, and noisy in diffusion mode) of sequences ×
    seq_len rows in the compute dtype, and the held-out text's four float32 streams where quality is measured."""
    row = cfg.hidden_size
    return (sequences * seq_len * streams * row * torch.finfo(dtype).bits // 8
            + held_out_tokens * 4 * row * 4)


def run_bytes(index: PackIndex, small: int, settings: QuantizeSettings, dtype: torch.dtype,
              measure: QualityCheck | None) -> tuple[int, int]:
    """(the pack's bytes, one --resume input file's) for a run of `settings` whose pack is `index` (as `plan`
    computes it from the checkpoint's config.json) with `small` bytes of files copied beside its weights."""
    streams = 2 if settings.calib_mode == "diffusion" else 1
    held_out = measure.samples * measure.seq_len if measure is not None else 0
    return (pack_bytes(index, small),
            progress_bytes(index.config, settings.samples, settings.seq_len, streams, dtype, held_out))


def peak_written(pack: int, progress: int) -> int:
    """What a run has written in --out at its fullest: the pack and two input files (the new one is written before
    the old one goes)."""
    return pack + 2 * progress


def still_needed(out: Path, progress_dir: Path, pack: int, progress: int) -> int:
    """Bytes the run will still add to --out: the pack and two input files, less what --out already holds of them
    (finished shards, the saved inputs of a run being resumed, a write a kill cut short: its layer writes it again
    in the same place)."""
    held = [*out.glob("model-*-of-*.safetensors"), *out.glob("*.tmp"), *progress_dir.glob("hidden-*.safetensors"),
            *progress_dir.glob("*.tmp")]
    return max(peak_written(pack, progress) - sum(f.stat().st_size for f in held), 0)


def check_room(out: Path, progress_dir: Path, pack: int, progress: int) -> int:
    """Refuse a run whose rest --out's disk cannot take, in one line that says what to change; else return that
    rest (`still_needed`)."""
    need = still_needed(out, progress_dir, pack, progress)
    free = shutil.disk_usage(nearest_existing(out)).free
    if need + DISK_MARGIN <= free:
        return need
    raise CloverError(
        f"quantizing into {out} needs ≈ {need / GB:.1f} GB more on its disk (the pack ≈ {pack / GB:.1f} GB; the "
        f"calibration inputs --resume starts from, ≈ {2 * progress / GB:.1f} GB while it runs), which has "
        f"{free / GB:.1f} GB free: free some space or choose --out on another disk (fewer --samples or a shorter "
        f"--seq-len make the inputs smaller)")
