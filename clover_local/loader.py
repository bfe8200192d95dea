"""From a MODEL argument (folder, Hub repo id or short name) to a ready model, tokenizer and decoder settings.

The one place commands go through, so every command accepts the same kinds of MODEL and fails the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clover_local.config import CloverConfig, load_config
from clover_local.errors import CloverError
from clover_local.tokenizer import ChatTokenizer

if TYPE_CHECKING:  # (torch is imported where a model loads: the command line's --help and download go without it)
    import torch

    from clover_local.hub.resume import Reserve

ASSETS = Path(__file__).parent / "assets"
SHORT_NAMES = {"tiny": ASSETS / "tiny"}


def is_hub_id(arg: str) -> bool:
    """Whether MODEL names a Hub repo (`owner/name`): not a shipped short name, not a path that exists, and shaped
    like a repo id."""
    if arg in SHORT_NAMES or Path(arg).expanduser().exists() or arg.startswith((".", "/", "~")):
        return False
    from clover_local.hub.transfer import is_repo_id

    return is_repo_id(arg)


def check_model_arg(arg: str) -> None:
    """A blank MODEL refused (Path("") is the working folder: a script's unset variable must not load it)."""
    if not arg.strip():
        raise CloverError("the model is empty: give a folder, a Hub repo id (owner/name) or 'tiny'")


def resolve_model_path(arg: str, revision: str | None = None, reserve: Reserve | None = None) -> Path:
    """A folder on disk, a short name of a model shipped with the package, or a Hub repo id (downloaded; at
    `revision`, a branch, tag or commit, when given; `reserve`: what the caller writes after the download, for its
    room check)."""
    check_model_arg(arg)
    path = Path(arg).expanduser()
    if revision and (path.exists() or arg in SHORT_NAMES):
        raise CloverError(f"--revision applies to Hub repo ids, but {arg} is a local model")
    # a folder wins over a shipped name only when it holds a model: an unrelated `./tiny` in the working
    # directory must not hide the shipped tiny model
    if path.is_dir() and (arg not in SHORT_NAMES or (path / "config.json").is_file()):
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
        return resolve_model(arg, revision=revision, reserve=reserve)
    raise CloverError(f"model folder {arg} does not exist")


def _json_field(file: Path, key: str) -> dict | None:
    """`key` of a small JSON file when it is an object, else None (no file, not JSON, another type)."""
    import json

    try:
        value = json.loads(file.read_text(encoding="utf-8")).get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, dict) else None


def pack_kind(path: Path) -> str | None:
    """What quantized pack the folder is, e.g. "GPTQ INT4" (method and routed-expert bits), or None if it is none.

    Read from config.json's `quantization_config`, the mark `pack.reader.is_pack` goes by: no weight is read."""
    quant = _json_field(Path(path) / "config.json", "quantization_config")
    if quant is None:
        return None
    method = str(quant.get("quant_method") or "quantized").upper()
    bits = quant.get("bits")
    return f"{method} INT{bits}" if isinstance(bits, int) else method


def _pack_source(path: Path) -> str | None:
    """The source a pack's manifest records (a repo id or a folder name), to name in a refusal; None if unknown."""
    source = _json_field(Path(path) / "clover_manifest.json", "source")
    name = source and (source.get("repo_id") or source.get("path"))
    return str(name) if name else None


def refuse_pack(path: Path, shown: str, needs: str) -> None:
    """Raise when a quantized pack is given where a BF16 checkpoint is needed (`quantize SRC`, `eval --reference`).

    Checked before any work: a pack there would otherwise fail much later, in words about something else (its
    calibration text, its tensor names). `needs` completes the sentence: what the command takes instead."""
    kind = pack_kind(path)
    if kind is None:
        return
    source = _pack_source(path)
    raise CloverError(f"{shown} is a quantized pack ({kind}); {needs}" + (f" ({source})" if source else ""))


def pick_device(device: str | None) -> torch.device:
    import torch

    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise CloverError(f"--device {device!r} is not a device (try cpu, cuda or cuda:0)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CloverError("--device cuda was asked for, but no CUDA GPU is available")
    return dev


DTYPE_NAMES = ("float32", "bfloat16", "float16")  # --dtype's choices, torch's names


def pick_dtype(name: str | None, device: torch.device) -> torch.dtype:
    import torch

    if name in (None, "", "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPE_NAMES:
        raise CloverError(f"--dtype {name!r} is not one of {', '.join(DTYPE_NAMES)}")
    return getattr(torch, name)


@dataclass
class Loaded:
    path: Path
    config: CloverConfig
    tokenizer: ChatTokenizer
    model: "object"  # CloverModel; typed loosely to keep torch-free imports cheap
    mask_token_id: int
    model_context: int  # the model's own limit, before --context (config.max_context is after it)

    @property
    def stop_token_ids(self) -> list[int]:
        return list(dict.fromkeys(self.tokenizer.eos_token_ids + self.config.eos_token_ids))

    def placement(self) -> str:
        """Where the load put the model, in one line (serve's log, chat's start): through the runtime, how many
        routed experts sit on the device and what it holds there; else the whole model's device and dtype. And the
        context it was sized for."""
        from clover_local.runtime.sizes import fmt_bytes

        context = f"context {self.config.max_context:,} tokens"
        rt = self.model.runtime
        if rt is None:
            weight = next(self.model.parameters())
            return f"loaded whole on {weight.device} ({str(weight.dtype).removeprefix('torch.')}), {context}"
        total, slots = rt.plan.experts_total, min(rt.cache.n_slots, rt.plan.experts_total)
        experts = (f"all {total:,} routed experts on the device" if slots == total else
                   f"{slots:,} of {total:,} routed experts on the device ({100 * slots / total:.0f}%), the rest read "
                   "from host RAM as passes need them")
        held = fmt_bytes(rt.placed_bytes(self.model)["total"])
        return f"loaded on {rt.device} through the offloading runtime: {experts}; {held} held there, {context}"


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


AUTO = "auto"  # `load(..., runtime=AUTO)`: packs through the offloading runtime, checkpoints plainly


def warn_pack_only(path: Path, model: str, vram_budget: int | str | None, resident_routing: bool = False,
                   prefill_chunk: int | None = None) -> None:
    """One warning line when pack-only flags were given for a BF16 checkpoint: it loads as it is, so they do
    nothing, and silence would let a user believe e.g. --vram-budget capped the memory."""
    from clover_local.pack.reader import is_pack

    given = [flag for flag, value in (("--vram-budget", vram_budget is not None), ("--resident-routing",
             resident_routing), ("--prefill-chunk", prefill_chunk is not None)) if value]
    if given and not is_pack(path):
        them = "it is" if len(given) == 1 else "they are"
        print(f"warning: {', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only to packs (the "
              f"offloading runtime); {model} is a BF16 checkpoint, so {them} ignored", file=sys.stderr, flush=True)


def load(arg: str, device: str | None = None, dtype: str | None = None, runtime: "object | str | None" = None, *,
         vram_budget: int | None = None, context: int | None = None, resident_routing: bool = False,
         prefill_chunk: int | None = None, chat_template: str | None = None, revision: str | None = None,
         on_layer: Callable[[int, int], None] | None = None) -> Loaded:
    """Load config, tokenizer and weights for the commands.

    `runtime` picks how a GPTQ pack is loaded:
    - None: dequantized into a full model in `dtype` (exact reference; needs the BF16 size in memory);
    - a `clover_local.runtime.load.RuntimeOptions`: in packed form, experts offloaded to host memory behind a
      device expert cache (`model.runtime_stats()` reports it), with exactly those options; a pack is required;
    - "auto" (what chat, generate, serve and score use): the runtime for a pack, with `RuntimeOptions(vram_budget,
      context, resident_routing, prefill_chunk)`; a BF16 checkpoint loads plainly, as only a pack can be
      offloaded.
    `context`, when given, also caps prompt plus answer tokens (`config.max_context`) on the plain path.
    `chat_template`: a template's text the tokenizer renders with instead of the model's own (--chat-template).
    `revision`: a branch, tag or commit of a Hub repo id (--revision; default main).
    `on_layer(done, total)`: called as each decoder layer's weights are in place (a progress bar: a 35B pack is
    ≈ 19 GB to read)."""
    from clover_local.pack.reader import is_pack

    dev = pick_device(device)
    torch_dtype = pick_dtype(dtype, dev)
    if runtime is None or runtime == AUTO:
        _refuse_before_download(arg, dev, torch_dtype, offloaded=runtime == AUTO, revision=revision,
                                options=dict(vram_budget=vram_budget, context=context,
                                             resident_routing=resident_routing, prefill_chunk=prefill_chunk))
    path = resolve_model_path(arg, revision)
    config = load_config(path)
    config.check_context(context)
    model_context = config.max_context
    tokenizer = ChatTokenizer.from_folder(path)
    if chat_template is not None:
        tokenizer.use_template(chat_template)
    if runtime == AUTO:
        if is_pack(path):
            runtime = auto_runtime(config, vram_budget, context, resident_routing, prefill_chunk)
        else:  # a checkpoint loads as it is: say so where a pack-only flag was given
            runtime = None
            warn_pack_only(path, arg, vram_budget, resident_routing, prefill_chunk)
    elif isinstance(runtime, str):
        raise ValueError(f"runtime must be None, {AUTO!r} or RuntimeOptions, not {runtime!r}")
    if runtime is not None:
        model = _load_offloaded(arg, path, dev, torch_dtype, runtime, on_layer)
        config = model.config
    else:
        model = _load_plain(arg, path, config, dev, torch_dtype, on_layer)
        if context is not None:
            config.max_position_embeddings = min(config.max_position_embeddings, context)
    return Loaded(path, config, tokenizer, model, resolve_mask_token(config, tokenizer), model_context)


def auto_runtime(config: CloverConfig, vram_budget: int | None, context: int | None, resident_routing: bool = False,
                 prefill_chunk: int | None = None):
    """The runtime options of `runtime="auto"`: a KV cache no longer than the model can use."""
    from clover_local.runtime.load import RuntimeOptions
    from clover_local.runtime.placement import DEFAULT_CONTEXT, DEFAULT_PREFILL_CHUNK

    ctx = min(context if context is not None else DEFAULT_CONTEXT, config.max_context)
    return RuntimeOptions(vram_budget=vram_budget, context=ctx, resident_routing=resident_routing,
                          prefill_chunk=prefill_chunk or DEFAULT_PREFILL_CHUNK)


def _load_offloaded(arg: str, path: Path, dev: torch.device, dtype: torch.dtype, options,
                    on_layer: Callable[[int, int], None] | None = None):
    from clover_local.pack.reader import is_pack
    from clover_local.runtime.load import load_packed_model

    if not is_pack(path):
        raise CloverError(f"{arg} is not a quantized pack: the offloading runtime runs GPTQ packs; make one "
                          f"with clover-local quantize {arg} --out PACK")
    return load_packed_model(path, dev, dtype, options, on_layer=on_layer)


def _load_plain(arg: str, path: Path, config: CloverConfig, dev: torch.device, dtype: torch.dtype,
                on_layer: Callable[[int, int], None] | None = None):
    """A BF16 checkpoint as is, or a pack dequantized into a full model."""
    from clover_local.checkpoint.reader import CheckpointReader
    from clover_local.model.clover import CloverModel
    from clover_local.pack.reader import PackReader, is_pack

    _refuse_whole_load(arg, path, config, dev, dtype)
    reader = PackReader(path) if is_pack(path) else CheckpointReader(path, config)
    return CloverModel.from_reader(reader, dev, dtype, on_layer)


def _refuse_whole_load(arg: str, path: Path, config: CloverConfig, dev: torch.device, dtype: torch.dtype) -> None:
    """A checkpoint loads whole onto one device: the 35B release takes 64.6 GiB at bfloat16, which no 16 GB card
    or 32 GB machine holds. Refused from the config before a byte is read (else: a CUDA out-of-memory minutes into
    the read, or the kernel's OOM killer), with the way that fits: a pack, run offloaded. Only what the weights
    alone need is compared, so nothing that could load is refused."""
    from clover_local.pack.reader import is_pack

    message = _whole_load_refusal(arg, config, is_pack(path), dev, dtype)
    if message:
        raise CloverError(message)


def _whole_load_refusal(arg: str, config: CloverConfig, pack: bool, dev: torch.device, dtype: torch.dtype) -> str:
    """Why `config`'s weights cannot load whole on `dev` in `dtype`, and what to do instead; "" when they fit (or
    the free memory is unknown)."""
    from clover_local.model.clover import CloverModel
    from clover_local.runtime.sizes import device_free_bytes, fmt_bytes, host_available_bytes

    free = device_free_bytes(dev) if dev.type == "cuda" else host_available_bytes()
    need = CloverModel.weight_bytes(config, dtype) if free is not None else 0
    if free is None or need <= free:
        return ""
    where = (f"{dev} has {fmt_bytes(free)} free" if dev.type == "cuda"
             else f"this machine has {fmt_bytes(free)} of memory available")
    if pack:
        fix = "leave out --no-offload: the pack then runs offloaded, its experts in host memory"
    else:
        fix = f"quantize it (clover-local quantize {arg} --out PACK) and run the pack: it runs offloaded"
    dtype_name = str(dtype).removeprefix("torch.")
    return f"{arg} needs {fmt_bytes(need)} to load whole in {dtype_name}, and {where}; {fix}"


def _refuse_before_download(arg: str, dev: torch.device, dtype: torch.dtype, offloaded: bool,
                            options: dict | None = None, revision: str | None = None) -> None:
    """The same refusals for a Hub repo id before any weight is fetched: `chat` of the 69 GB BF16 release, or of a
    19 GB pack whose plan cannot fit this machine, would otherwise download it all, then refuse. A checkpoint (or
    a pack loaded whole) is judged from its file list and config.json; a pack run offloaded by its plan, from the
    shards' headers (`plan`'s Hub path), unless the cache already holds it all (the load's own plan then says
    the same from the local files). Whatever stops this look (offline, unreachable, no such repo, a gated one)
    leaves the answer to the download, which says it properly; the listing goes first because it fails at once
    where the Hub cannot be reached (a file's HEAD retries for ≈ 20 s)."""
    if not is_hub_id(arg):
        return
    try:
        from huggingface_hub import HfApi, hf_hub_download

        from clover_local import __version__
        from clover_local.hub.transfer import offline_mode
        from clover_local.pack import MANIFEST_NAME

        if offline_mode():
            return
        api = HfApi(library_name="clover-local", library_version=__version__)
        info = api.repo_info(arg, repo_type="model", revision=revision)
        names = {s.rfilename for s in info.siblings or []}
        pack = MANIFEST_NAME in names
        if "config.json" not in names:
            return
        if pack and offloaded:
            if not _in_cache(arg, info.sha):
                _refuse_pack_plan(arg, info.sha, dev, dtype, options or {})
            return
        config = load_config(Path(hf_hub_download(arg, "config.json", revision=info.sha)).parent)
    except _RefusedFromHeaders:
        raise
    except Exception:  # noqa: BLE001 - the download that follows meets the same problem and reports it
        return
    message = _whole_load_refusal(arg, config, pack, dev, dtype)
    if message:
        raise CloverError(f"{message} (nothing was downloaded but its config.json)")


class _RefusedFromHeaders(CloverError):
    """A Hub pack's plan refused before its download (every other problem of the look is left to the download)."""


def _in_cache(repo_id: str, commit: str) -> bool:
    """Whether the Hub cache holds `repo_id`'s snapshot at `commit` whole (a pack downloaded before)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    from clover_local.hub.transfer import holds_model

    snapshot = (Path(constants.HF_HUB_CACHE).expanduser() / repo_folder_name(repo_id=repo_id, repo_type="model")
                / "snapshots" / commit)
    return holds_model(snapshot)


def _refuse_pack_plan(arg: str, commit: str, dev: torch.device, dtype: torch.dtype, options: dict) -> None:
    """The pack's plan for this machine, from the Hub's headers: its refusal (budget too small for the non-expert
    weights, host RAM too small for the experts), before the download, with the setting to change."""
    from clover_local.hub.remote_index import remote_pack_index
    from clover_local.runtime.load import plan_for

    remote = remote_pack_index(arg, commit)
    if remote is None or remote.checkpoint:
        return
    try:
        plan_for(remote.index, dev, dtype, auto_runtime(remote.index.config, **options)).check()
    except CloverError as exc:
        raise _RefusedFromHeaders(f"{exc} (nothing was downloaded: the plan was made from the Hub's headers)") \
            from None
