"""From a MODEL argument (folder, Hub repo id or short name) to a ready model, tokenizer and decoder settings.

The one place commands go through, so every command accepts the same kinds of MODEL and fails the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from clover_local.config import CloverConfig, load_config
from clover_local.errors import CloverError
from clover_local.tokenizer import ChatTokenizer

ASSETS = Path(__file__).parent / "assets"
SHORT_NAMES = {"tiny": ASSETS / "tiny"}


def resolve_model_path(arg: str) -> Path:
    """A folder on disk, a short name of a model shipped with the package, or a Hub repo id (downloaded)."""
    path = Path(arg).expanduser()
    if path.is_dir():
        return path
    if arg in SHORT_NAMES and SHORT_NAMES[arg].is_dir():
        return SHORT_NAMES[arg]
    if path.exists():
        raise CloverError(f"{arg} is a file, not a model folder")
    parts = arg.split("/")
    if len(parts) == 2 and all(parts) and not arg.startswith((".", "/", "~")):
        try:
            from clover_local.hub.transfer import resolve_model
        except ImportError:
            raise CloverError(f"{arg} is not a local folder, and Hub downloads are not available") from None
        return resolve_model(arg)
    raise CloverError(f"model folder {arg} does not exist")


def pick_device(device: str | None) -> torch.device:
    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise CloverError(f"--device {device!r} is not a device (try cpu, cuda or cuda:0)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CloverError("--device cuda was asked for, but no CUDA GPU is available")
    return dev


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_dtype(name: str | None, device: torch.device) -> torch.dtype:
    if name in (None, "", "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise CloverError(f"--dtype {name!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


@dataclass
class Loaded:
    path: Path
    config: CloverConfig
    tokenizer: ChatTokenizer
    model: "object"  # CloverModel; typed loosely to keep torch-free imports cheap
    mask_token_id: int

    @property
    def stop_token_ids(self) -> list[int]:
        return list(dict.fromkeys(self.tokenizer.eos_token_ids + self.config.eos_token_ids))


def resolve_mask_token(config: CloverConfig, tokenizer: ChatTokenizer) -> int:
    mask = config.diffusion.mask_token_id
    if mask is None:
        mask = tokenizer.mask_token_id
    if mask is None:
        raise CloverError(
            "no mask token: set mask_token_id in generation_config.json or config.json "
            "(or ship a special token whose text contains 'mask')"
        )
    if not 0 <= int(mask) < config.vocab_size:
        raise CloverError(f"mask_token_id {mask} is outside the vocabulary of {config.vocab_size}")
    return int(mask)


def load(arg: str, device: str | None = None, dtype: str | None = None, runtime: "object | None" = None) -> Loaded:
    """Load config, tokenizer and weights (BF16 checkpoint or GPTQ pack, dequantized) for the commands.

    With `runtime` (a `clover_local.runtime.load.RuntimeOptions`), a GPTQ pack is loaded in packed form with
    its experts offloaded to host memory behind a device expert cache (`model.runtime_stats()` reports it)."""
    from clover_local.checkpoint.reader import CheckpointReader
    from clover_local.model.clover import CloverModel
    from clover_local.pack.reader import PackReader, is_pack

    path = resolve_model_path(arg)
    config = load_config(path)
    tokenizer = ChatTokenizer.from_folder(path)
    dev = pick_device(device)
    if runtime is not None:
        from clover_local.runtime.load import load_packed_model

        if not is_pack(path):
            raise CloverError(f"{arg} is not a quantized pack: the offloading runtime runs GPTQ packs; make one "
                              f"with clover-local quantize {arg} --out PACK")
        model = load_packed_model(path, dev, pick_dtype(dtype, dev), runtime)
        config = model.config
    else:
        reader = PackReader(path) if is_pack(path) else CheckpointReader(path, config)
        model = CloverModel.from_reader(reader, dev, pick_dtype(dtype, dev))
    return Loaded(path, config, tokenizer, model, resolve_mask_token(config, tokenizer))
