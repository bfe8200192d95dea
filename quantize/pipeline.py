"""`clover-local quantize`: stream a BF16 checkpoint one decoder layer at a time into a GPTQ-format pack.

Memory is bounded by one layer's weights plus the calibration activations (two streams of [samples, seq_len,
hidden]), whatever the layer count. After each layer its shard is written (atomically) and the progress and
the next layer's inputs are saved in `OUT/.clover-progress/`; the same command with `--resume` continues
there, and the finished pack is byte-identical to an uninterrupted run. The pack is marked complete only
after every file is written and hashed into the manifest.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from clover_local.checkpoint.reader import CheckpointReader, layer_states
from clover_local.errors import CloverError
from clover_local.hub.transfer import snapshot_commit
from clover_local.loader import refuse_pack, resolve_mask_token
from clover_local.model.clover import build_layer
from clover_local.model.norm import ZeroCenteredRMSNorm
from clover_local.pack.reader import PackReader
from clover_local.pack.manifest import MANIFEST_NAME, AlteredFile, Manifest, sha256_file, share_like_any_file
from clover_local.paths import is_plain_file_name
from clover_local.runtime.pack_index import read_header
from clover_local.runtime.synthetic_pack import checkpoint_index
from clover_local.text_files import parse_json
from clover_local.tokenizer import ChatTokenizer
from quantize.calibration import build_calibration, check_calib_file, resolve_calib_path
from quantize.footprint import check_room, compute_dtype, run_bytes, small_files
from quantize.gptq_format import SUPPORTED_BITS, values_per_run
from quantize.gptq import HessianAccumulator, QuantResult
from quantize.layer_quant import LayerQuantizer, LayerReport, QuantOptions, bf16_tensors, packed, quantize_weight
from quantize.profiles import MIXER_LINEARS, SHARED_LINEARS, dynamic_rules, get_profile
from quantize.quality import HeldOutStreams, QualityCheck, held_out_text

if TYPE_CHECKING:
    from clover_local.hub.remote_shards import RemoteShards

PROGRESS = ".clover-progress"
COPY_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
              "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json", "LICENSE")


@dataclass
class QuantizeSettings:
    bits: int = 4
    group_size: int = 128
    method: str = "gptq"
    profile: str = "balanced"
    sym: bool = True
    damp: float = 0.01
    samples: int = 128
    seq_len: int = 2048
    calib: str | None = None
    calib_mode: str = "diffusion"
    expert_stats: str = "routed"
    min_expert_rows: int = 16
    seed: int = 0
    batch: int = 4
    clip: bool = True
    act_order: bool = True
    expert_batch: int = 0  # 0: by device (QuantOptions.expert_batch)

    def recorded(self) -> dict:
        """The settings a pack's manifest (and quantize's summary) records: what made its weights."""
        return {"bits": self.bits, "group_size": self.group_size, "method": self.method, "profile": self.profile,
                "sym": self.sym, "clip": self.clip, "act_order": self.act_order and self.method == "gptq",
                "desc_act": False, "damp": self.damp, "min_expert_rows": self.min_expert_rows}

    def options(self) -> QuantOptions:
        return QuantOptions(self.bits, self.group_size, self.method, self.sym, self.damp, self.calib_mode,
                            self.expert_stats, self.min_expert_rows, self.batch, clip=self.clip,
                            act_order=self.act_order, expert_batch=self.expert_batch)

    def validate(self) -> None:
        if self.bits not in SUPPORTED_BITS:
            raise CloverError(f"--bits must be 3, 4 or 8, got {self.bits}")
        if self.group_size != -1 and (self.group_size < 8 or self.group_size % 8):
            raise CloverError(f"--group-size must be a multiple of 8 (or -1 for per-channel), got {self.group_size}")
        if self.method not in ("gptq", "rtn"):
            raise CloverError(f"--method must be gptq or rtn, got {self.method}")
        if self.calib_mode not in ("diffusion", "causal"):
            raise CloverError(f"--calib-mode must be diffusion or causal, got {self.calib_mode}")
        if self.expert_stats not in ("routed", "all"):
            raise CloverError(f"--expert-stats must be routed or all, got {self.expert_stats}")
        get_profile(self.profile)
        if self.calib:
            check_calib_file(self.calib)


@dataclass
class QuantizeResult:
    out: Path
    layers: list[LayerReport] = field(default_factory=list)
    seconds: float = 0.0
    source_bytes: int = 0
    pack_bytes: int = 0
    resumed_from: int = 0
    fetched_bytes: int | None = None  # bytes read from the Hub by --stream (None: a local checkpoint)
    quality: dict | None = None  # KL against the source, measured as the layers went (`measure`)


def _write_error(path: Path, exc: Exception) -> CloverError:
    """One line for a failed write. safetensors' writer raises its own error, not OSError, with the OS's reason
    only in its text ("No space left on device (os error 28)"): read the errno from either, so a full disk
    says so, and says what a rerun keeps (--resume only once a layer was saved: before that it has nothing to
    resume), instead of ending in a traceback."""
    code = getattr(exc, "errno", None)
    if code is None:
        found = re.search(r"os error (\d+)", str(exc))
        code = int(found.group(1)) if found else None
    if code == errno.ENOSPC:
        out = path.parent.parent if path.parent.name == PROGRESS else path.parent
        done = finished_layers(out)
        rerun = (f"rerun with --resume ({done} finished layer{'s' * (done != 1)} kept)" if done
                 else "run the same command again (no layer was finished yet)")
        return CloverError(f"the disk is full while writing {path.name}; free some space and {rerun}")
    reason = os.strerror(code) if code else (getattr(exc, "strerror", None) or str(exc))
    return CloverError(f"cannot write {path}: {reason}")


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
        share_like_any_file(tmp)  # safetensors writes 0600
        os.replace(tmp, path)
    except (OSError, SafetensorError) as exc:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, exc) from None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, exc) from None


def shard_name(k: int, n: int) -> str:
    return f"model-{k:05d}-of-{n:05d}.safetensors"


def refuse_resume_overwrite(resume: bool, overwrite: bool) -> None:
    """--resume keeps what --out holds and --overwrite discards it: refuse both rather than pick one silently
    (either guess loses something: finished layers, or the fresh start that was asked for)."""
    if resume and overwrite:
        raise CloverError("--resume continues the run in --out and --overwrite discards it: give one of them")


def finished_layers(out: Path) -> int:
    """How many decoder layers an interrupted run in `out` saved (0: none, or no run of ours there)."""
    try:
        return int(parse_json((out / PROGRESS / "state.json").read_text())["next_layer"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def run_source_commit(out: Path, repo_id: str) -> str | None:
    """The commit of `repo_id` an interrupted run in `out` was reading (None: no run there, or another source),
    which --resume reads again wherever the repo's main has moved since: a preview release is updated, and a run
    of hours must not then be refused (or, at 35B, first download 69 GB again)."""
    from huggingface_hub.file_download import repo_folder_name

    try:
        source = Path(parse_json((out / PROGRESS / "state.json").read_text())["fingerprint"]["source"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if source.parent.parent.name != repo_folder_name(repo_id=repo_id, repo_type="model"):
        return None
    return snapshot_commit(source)


def prepare_output(out: Path, resume: bool, overwrite: bool) -> bool:
    """Check the output folder; returns True when there is progress to resume."""
    progress = out / PROGRESS / "state.json"
    if out.exists() and not out.is_dir():
        raise CloverError(f"--out {out} is a file, not a folder")
    if (out / PROGRESS).is_dir() and not progress.exists():
        _clear_stale_progress(out)
    if out.is_dir() and any(out.iterdir()):
        if progress.exists():
            if overwrite:
                shutil.rmtree(out)
            elif not resume:
                raise CloverError(f"{out} holds an unfinished quantization; add --resume to continue it "
                                  "or --overwrite to start over")
            else:
                return True
        elif (out / MANIFEST_NAME).exists() and Manifest.load(out).complete and not overwrite:
            raise CloverError(f"{out} already holds a finished pack{': nothing to resume' if resume else ''}; "
                              "choose another --out or add --overwrite")
        elif (out / MANIFEST_NAME).exists():
            shutil.rmtree(out)  # a pack of ours (complete with --overwrite, or one that never finished)
        else:
            # never delete a folder we did not make, even with --overwrite
            raise CloverError(f"{out} is not empty and is not a clover-local pack; choose an empty folder for --out")
    elif resume:
        raise CloverError(f"nothing to resume in {out}: start without --resume")
    return False


def _clear_stale_progress(out: Path) -> None:
    """A progress folder without its state.json. With a manifest beside it, it is what a finished run was
    deleting when it stopped: the pack is done, so only the folder goes (its shards are finished work). Without
    one, a run of ours stopped before its first layer was saved (bad calibration file, unreadable shard, Ctrl-C
    in layer 0): nothing finished to keep, so clear what it left and treat the folder as fresh."""
    shutil.rmtree(out / PROGRESS)
    if (out / MANIFEST_NAME).exists():
        return
    for stale in out.glob("model-*-of-*.safetensors*"):
        stale.unlink()


def _clear_temp_files(out: Path) -> None:
    """safetensors writes through a hidden temp file of its own (`.tmpXXXXXX`) that a kill leaves behind, as
    large as a shard or a layer's inputs (gigabytes at 35B): a resume clears them. (Ours, `X.tmp`, need no
    clearing: the redone layer writes the same names again.)"""
    for folder in (out, out / PROGRESS):
        for tmp in folder.glob(".tmp??????"):
            if tmp.is_file():
                tmp.unlink(missing_ok=True)


def _make_output(out: Path) -> None:
    """Create --out and its progress folder: a path through a file, a read-only disk, no permission are one line."""
    try:
        (out / PROGRESS).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CloverError(f"cannot create --out {out}: {exc.strerror or exc}") from None


SETTING_FLAGS = {"bits": "--bits", "group_size": "--group-size", "method": "--method", "profile": "--profile",
                 "sym": "--sym/--asym", "samples": "--samples", "seq_len": "--seq-len", "calib": "--calib",
                 "calib_mode": "--calib-mode", "expert_stats": "--expert-stats", "min_expert_rows":
                 "--min-expert-rows", "seed": "--seed", "clip": "--clip/--no-clip", "act_order":
                 "--act-order/--no-act-order"}


def fingerprint_difference(saved: dict, now: dict) -> str:
    """What differs between the run saved in --out and this command, in the words of its flags (the saved
    value first): a refused --resume says which setting to put back instead of leaving the user to guess."""
    diffs = []
    old_s, new_s = saved.get("settings", {}), now["settings"]
    for key, value in new_s.items():
        if old_s.get(key, value) != value:
            was, now_ = ("default" if v is None else v for v in (old_s[key], value))
            diffs.append(f"{SETTING_FLAGS.get(key, key)} {was} (now {now_})")
    if saved.get("source") != now["source"]:
        diffs.append(f"source {saved.get('source')} (now {now['source']})")
    elif saved.get("config_sha256") != now["config_sha256"]:
        diffs.append("the source's config.json changed")
    if saved.get("calib_sha256") != now["calib_sha256"] and old_s.get("calib") == new_s.get("calib"):
        diffs.append("the calibration file's content changed")
    return "; ".join(diffs) or "its recorded inputs"


def _load_progress(out: Path, fingerprint: dict, n_layers: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """The saved state and the next layer's inputs, checked: a damaged progress folder (a field of the wrong kind
    too, a hand edit or another tool's) is one line saying what to do, not a traceback; other settings name the
    flags that differ."""
    prog_dir = out / PROGRESS
    try:
        state = _checked_state(parse_json((prog_dir / "state.json").read_text(encoding="utf-8")), n_layers)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CloverError(f"the saved progress in {out} is damaged ({PROGRESS}/state.json: {exc}); "
                          "start over with --overwrite") from None
    saved, start, hidden_name = state["fingerprint"], state["next_layer"], state["hidden"]
    if saved != fingerprint:
        raise CloverError(f"{out} holds a run with other settings or inputs: "
                          f"{fingerprint_difference(saved, fingerprint)}; resume with the same command, or "
                          "--overwrite to start over")
    try:
        hidden = load_file(str(prog_dir / hidden_name))
    except (OSError, SafetensorError) as exc:
        hidden, why = {}, str(exc)
    else:
        why = "no 'clean' tensor"
    if "clean" not in hidden:
        raise CloverError(f"the saved progress in {out} is damaged (layer {start}'s inputs, "
                          f"{PROGRESS}/{hidden_name}: {why}); start over with --overwrite")
    return state, hidden


_JSON_KIND = {dict: "object", list: "array", str: "string"}


def _checked_state(state: object, n_layers: int) -> dict:
    """state.json's fields as `_RunState` takes them (what `_RunState.save` writes), or the first that is not,
    as a KeyError / TypeError / ValueError naming it."""
    if not isinstance(state, dict):
        raise TypeError("not a JSON object")
    missing = [k for k in ("fingerprint", "next_layer", "calibration", "created", "reports") if k not in state]
    if missing:
        raise KeyError(missing[0])
    start, hidden = state["next_layer"], state.get("hidden", "hidden.safetensors")
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= n_layers:
        raise ValueError(f"next_layer is {start!r}, not a layer of this model's {n_layers}")
    if not is_plain_file_name(hidden):
        raise ValueError(f"hidden is {hidden!r}, not a file name")
    kinds = {"fingerprint": dict, "calibration": dict, "created": str, "reports": list, "shards": dict}
    wrong = next((k for k, kind in kinds.items() if k in state and not isinstance(state[k], kind)), None)
    if wrong is not None:
        raise TypeError(f"{wrong} is {json.dumps(state[wrong])[:40]}, not a JSON {_JSON_KIND[kinds[wrong]]}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in state.get("shards", {}).items()):
        raise TypeError("shards is not names and sha256 sums")
    if not all(isinstance(r, dict) for r in state["reports"]):
        raise TypeError("reports holds an entry that is not a JSON object")
    reports = [LayerReport(**r) for r in state["reports"]]  # (a key it does not know: a TypeError naming it)
    return {**state, "hidden": hidden, "reports": reports, "shards": state.get("shards", {})}


def _check_finished_shards(out: Path, done: int, n_shards: int, sums: dict[str, str]) -> None:
    """Every finished layer's shard is there, as long as its header says and, where its sha256 was recorded when it
    was written (`sums`), with those bytes, before a resume builds on them: a truncated or altered one would
    otherwise end the run in a traceback, or be hashed into a 'complete' pack."""
    for k in range(1, done + 1):
        path = out / shard_name(k, n_shards)
        if not path.is_file():
            raise CloverError(f"layer {k - 1}'s shard {path.name} is missing from {out}; its inputs are no longer "
                              "kept, so start over with --overwrite")
        try:
            read_header(path)
        except CloverError as exc:
            raise CloverError(f"{exc}: layer {k - 1} in {out} cannot be resumed from; "
                              "start over with --overwrite") from None
        if path.name in sums and sha256_file(path) != sums[path.name]:
            raise _altered(path, k - 1, out)


def _altered(path: Path, layer: int, out: Path) -> CloverError:
    return CloverError(f"layer {layer}'s shard {path.name} is not what was written (its sha256 changed: a disk or "
                       f"copy error?); its inputs are no longer kept, so start over in {out} with --overwrite")


def quantize_checkpoint(
    src: Path,
    out: Path,
    settings: QuantizeSettings,
    device: torch.device,
    *,
    resume: bool = False,
    overwrite: bool = False,
    source_label: dict | None = None,
    on_layer: Callable[[int, int, str], None] = lambda i, n, msg: None,
    stop_after_layer: int | None = None,
    remote: RemoteShards | None = None,
    measure: QualityCheck | None = None,
) -> QuantizeResult:
    """Quantize SRC into OUT. `on_layer(i, n_layers, step)` reports progress; `stop_after_layer` (tests)
    raises KeyboardInterrupt after that layer's progress is saved, as a Ctrl-C there would. With `remote`, SRC
    holds the checkpoint's small files and its shards are read from the Hub by byte range (`--stream`). With
    `measure`, the pack's KL against SRC is measured as the layers go (`result.quality`: what `compare` gives,
    without reading SRC again), unless a resumed run was started without it (then `result.quality` is None).

    In order: every check that writes nothing (the source, the calibration file, the disk's room), the run's
    start (fresh, or where its saved progress left off), the layers, then the last shard and the manifest."""
    settings.validate()
    refuse_resume_overwrite(resume, overwrite)
    refuse_pack(src, str(src), "quantize takes the BF16 checkpoint it was made from")
    t0 = time.perf_counter()
    reader = CheckpointReader(src, remote=remote)
    cfg = reader.config
    _check_source(reader, src, settings.bits)
    tokenizer = ChatTokenizer.from_folder(src)
    mask_id = resolve_mask_token(cfg, tokenizer)  # before the output folder is touched, as every check here
    # routed experts take --bits (the pack's default bits in quantization_config); the profile sets the rest
    profile = replace(get_profile(settings.profile), experts=settings.bits)
    calib_path = resolve_calib_path(settings.calib, src)
    try:  # before the output folder is touched: an unreadable file (permissions) is one clear line
        calib_sha = sha256_file(calib_path)
    except OSError as exc:
        raise CloverError(f"cannot read calibration file {calib_path}: {exc.strerror or exc}") from None
    has_progress = prepare_output(out, resume, overwrite)
    if has_progress:
        _clear_temp_files(out)  # before the disk's room is measured: gigabytes at 35B
    dtype = compute_dtype(device)
    index = checkpoint_index(src, settings.bits, settings.profile, settings.group_size, str(src))
    check_room(out, out / PROGRESS, *run_bytes(index, small_files(src), settings, dtype, measure))
    _make_output(out)
    fingerprint = {"settings": asdict(settings), "calib_sha256": calib_sha,
                   "source": str(src.resolve()), "config_sha256": sha256_file(src / "config.json")}
    if has_progress:
        run = _resumed(out, fingerprint, cfg, measure, src, device, dtype)
    else:
        run = _RunState(out, fingerprint, cfg.num_hidden_layers, 0, created=_created(),
                        **_fresh_inputs(reader, tokenizer, mask_id, settings, calib_path, measure, src, device, dtype))
    start, n_layers = run.next_layer, run.n_layers
    quantizer = LayerQuantizer(cfg, profile, settings.options(), device, dtype)
    lt = time.perf_counter()
    if start < n_layers:
        on_layer(start, n_layers, "reading")
    for i, state_i in layer_states(reader, start, n_layers):
        _quantize_layer(run, quantizer, i, state_i, lt, on_layer)
        del state_i  # the layer's source weights (≈ 1.7 GB at 35B) are not held while its outputs are written
        run.save()
        on_layer(i + 1, n_layers, "done")
        if stop_after_layer is not None and i == stop_after_layer:
            raise KeyboardInterrupt
        lt = time.perf_counter()  # the next layer's time starts with its read (a wait, where it was fetched ahead)
        if i + 1 < n_layers:
            on_layer(i + 1, n_layers, "reading")
    result = QuantizeResult(out, run.reports, resumed_from=start)
    logit_weights = _finish_pack(run, start, reader, src, settings, profile, source_label, device, on_layer)
    if run.streams is not None:
        on_layer(n_layers, n_layers, "KL")
        # not read again (with --stream, 1 GB more over the line at 35B) where _write_globals read them
        result.quality = run.streams.result(logit_weights or reader.logit_weights(),
                                            PackReader(out).logit_weights()).to_dict()
    result.seconds = time.perf_counter() - t0
    result.source_bytes = (remote.total_bytes if remote is not None
                           else sum(f.stat().st_size for f in src.glob("*.safetensors")))
    if remote is not None:
        result.fetched_bytes = remote.fetched_bytes
    result.pack_bytes = sum(f.stat().st_size for f in out.glob("*.safetensors"))
    return result


def _check_source(reader: CheckpointReader, src: Path, bits: int) -> None:
    """A checkpoint `--bits` can pack, with the block-diffusion parameters a Clover model has."""
    cfg = reader.config
    run = values_per_run(bits)
    if cfg.hidden_size % run or cfg.moe_intermediate_size % run:
        raise CloverError(f"--bits {bits} packs runs of {run} values: hidden_size {cfg.hidden_size} and "
                          f"moe_intermediate_size {cfg.moe_intermediate_size} must be multiples of {run}; use --bits 4")
    if not reader.has_preview_params:
        raise CloverError(f"{src} is not a Clover checkpoint: its GDN layers lack the block-diffusion parameters")


@dataclass
class _RunState:
    """A run between two layers: the next layer's inputs (the calibration streams and, when measuring, the
    held-out ones) and what state.json records of it, from which `--resume` goes on."""
    out: Path
    fingerprint: dict
    n_layers: int
    next_layer: int
    clean: torch.Tensor
    noisy: torch.Tensor | None
    streams: HeldOutStreams | None
    calibration: dict
    created: str
    reports: list[LayerReport] = field(default_factory=list)
    sums: dict[str, str] = field(default_factory=dict)  # each finished shard's sha256, read back as it was written

    @property
    def n_shards(self) -> int:
        return self.n_layers + 1

    def save(self) -> None:
        """The next layer's inputs go to a file named after that layer, then state.json names it: a kill between
        the two writes leaves the previous state pointing at the previous (still present) inputs."""
        hidden = {"clean": self.clean.contiguous()}
        if self.noisy is not None:
            hidden["noisy"] = self.noisy.contiguous()
        if self.streams is not None:
            hidden.update({f"{QUALITY}{k}": v.contiguous() for k, v in self.streams.hidden.items()})
        prog_dir = self.out / PROGRESS
        hidden_name = f"hidden-{self.next_layer:05d}.safetensors"
        _atomic_save(hidden, prog_dir / hidden_name)
        _write_json(prog_dir / "state.json", {
            "fingerprint": self.fingerprint, "next_layer": self.next_layer, "hidden": hidden_name,
            "calibration": self.calibration, "created": self.created, "reports": [asdict(r) for r in self.reports],
            "shards": self.sums,
        })
        for old in prog_dir.glob("hidden-*.safetensors"):
            if old.name != hidden_name:
                old.unlink()


def _resumed(out: Path, fingerprint: dict, cfg, measure: QualityCheck | None, src: Path, device: torch.device,
             dtype: torch.dtype) -> _RunState:
    """The run saved in `out`, its finished shards checked and its inputs cast to the compute dtype."""
    state, hidden = _load_progress(out, fingerprint, cfg.num_hidden_layers)
    run = _RunState(out, fingerprint, cfg.num_hidden_layers, state["next_layer"], hidden["clean"].to(dtype),
                    hidden["noisy"].to(dtype) if "noisy" in hidden else None,
                    _resumed_streams(cfg, hidden, measure, src, device), state["calibration"], state["created"],
                    state["reports"], state["shards"])
    _check_finished_shards(out, run.next_layer, run.n_shards, run.sums)
    return run


def _fresh_inputs(reader: CheckpointReader, tokenizer: ChatTokenizer, mask_id: int, settings: QuantizeSettings,
                  calib_path: Path, measure: QualityCheck | None, src: Path, device: torch.device,
                  dtype: torch.dtype) -> dict:
    """Layer 0's inputs (`_RunState`'s clean, noisy, streams, calibration): the calibration sequences' embeddings,
    and the held-out text's when measuring."""
    cfg = reader.config
    calib = build_calibration(calib_path, tokenizer, settings.samples, settings.seq_len,
                              cfg.diffusion.block_size, mask_id, settings.seed)
    table = reader.tensor("embed_tokens.weight")
    streams = None
    if measure is not None:  # the pack's table is the source's in BF16 (_write_globals)
        held, _, held_path = measure.held_out(cfg, tokenizer, src)
        streams = HeldOutStreams.start(cfg, held, mask_id, table, table.to(torch.bfloat16), device, measure.batch,
                                       held_out_text(held_path))
    return {
        "clean": table[calib.clean].to(dtype),
        "noisy": table[calib.noisy].to(dtype) if settings.calib_mode == "diffusion" else None,
        "streams": streams,
        "calibration": {"file": Path(calib.path).name, "sequences": int(calib.clean.shape[0]),
                        "seq_len": settings.seq_len, "tokens": calib.tokens, "mode": settings.calib_mode,
                        "expert_stats": settings.expert_stats, "samples_in_file": calib.n_texts,
                        # conversations the model's chat template could not render (e.g. tool turns): left out
                        **({"conversations_left_out": calib.refused} if calib.refused else {})},
    }


def _quantize_layer(run: _RunState, quantizer: LayerQuantizer, i: int, state_i: dict[str, torch.Tensor], started: float,
                    on_layer: Callable[[int, int, str], None]) -> None:
    """Layer i quantized (the held-out text through it before and after, when measuring): its shard written and
    hashed, its report kept; `run` holds the next layer's inputs (`_RunState.save` writes them)."""
    n = run.n_layers
    layer = build_layer(quantizer.cfg, i, state_i, quantizer.device, quantizer.dtype)
    if run.streams is not None:
        on_layer(i, n, "held-out text, BF16")
        run.streams.advance("reference", layer)
    tensors, run.clean, run.noisy, report = quantizer.quantize(layer, run.clean, run.noisy,
                                                               on_step=lambda msg: on_layer(i, n, msg))
    if run.streams is not None:  # the layer holds its quantized weights now (dequantized in place)
        on_layer(i, n, "held-out text, quantized")
        run.streams.advance("pack", layer)
    profile = quantizer.profile
    quantized = ({name for name in MIXER_LINEARS[report.kind] if profile.mixer}
                 | (set(SHARED_LINEARS) if profile.shared else set()))
    tensors.update(bf16_tensors(f"model.layers.{i}", state_i, quantized))
    shard = run.out / shard_name(i + 1, run.n_shards)
    _atomic_save(tensors, shard)
    run.sums[shard.name] = sha256_file(shard)  # read back while still cached: a later change to it is caught
    report.seconds = round(time.perf_counter() - started, 3)
    run.reports.append(report)
    run.next_layer = i + 1


def _finish_pack(run: _RunState, start: int, reader: CheckpointReader, src: Path, settings: QuantizeSettings, profile,
                 source_label: dict | None, device: torch.device,
                 on_layer: Callable[[int, int, str], None]) -> dict[str, torch.Tensor] | None:
    """After the layers: the last shard (embeddings, final norm, LM head) and the manifest, or only the card and
    cleanup where a run stopped after the pack was hashed. Returns the source's final norm and head where they
    were read for the last shard."""
    out, n = run.out, run.n_layers
    try:
        if start == n and _hashed(out):  # stopped after the pack was hashed: only the card and cleanup left
            _tidy(out, Manifest.load(out))
            return None
        on_layer(n, n, "LM head")
        logit_weights = _write_globals(reader, out / shard_name(run.n_shards, run.n_shards), run.clean, run.noisy,
                                       profile, settings, device)
        _finish(src, out, reader, settings, profile, run.calibration, run.created, source_label, run.n_shards,
                run.sums)
        return logit_weights
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise CloverError(f"the disk is full while finishing the pack in {out}; free some space and rerun "
                              "with --resume (finished layers are kept)") from None
        raise CloverError(f"cannot finish the pack in {out}: {exc.strerror or exc}; rerun with --resume") from None


QUALITY = "quality."  # the held-out streams' tensors in a progress file


def _resumed_streams(cfg, hidden: dict[str, torch.Tensor], measure: QualityCheck | None, src: Path,
                     device: torch.device) -> HeldOutStreams | None:
    """The held-out streams a resumed run saved, or None where none were (a run started without measuring)."""
    saved = {k[len(QUALITY):]: v for k, v in hidden.items() if k.startswith(QUALITY)}
    if measure is None or set(saved) != set(HeldOutStreams.KEYS):
        return None
    return HeldOutStreams(cfg, saved, device, measure.batch,
                          held_out_text(resolve_calib_path(measure.calib, src)))


def _created() -> str:
    """Creation time; SOURCE_DATE_EPOCH (reproducible builds) pins it."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    ts = time.gmtime(int(epoch)) if epoch else time.gmtime()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", ts)


@torch.no_grad()
def _write_globals(reader, path: Path, clean, noisy, profile, settings: QuantizeSettings,
                   device) -> dict[str, torch.Tensor]:
    """Write the pack's last shard (embeddings, final norm, LM head); returns the source's norm and head, as
    `reader.logit_weights()` would read them."""
    cfg = reader.config
    g = reader.global_state()
    tensors = {"model.embed_tokens.weight": g["embed_tokens.weight"].to(torch.bfloat16).contiguous(),
               "model.norm.weight": g["norm.weight"].to(torch.bfloat16).contiguous()}
    head = g.get("lm_head.weight")
    if head is not None:
        bits = profile.lm_head
        if bits is None:
            tensors["lm_head.weight"] = head.to(torch.bfloat16).contiguous()
        else:
            hessian = None
            if settings.method == "gptq":
                norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
                norm.weight.copy_(g["norm.weight"].float())
                acc = HessianAccumulator(cfg.hidden_size, device=device)
                for stream in (clean, noisy):
                    if stream is None:
                        continue
                    flat = stream.reshape(-1, stream.shape[-1])
                    for s in range(0, flat.shape[0], 16384):  # bounded device memory for the final rows
                        acc.add_batch(norm(flat[s:s + 16384].float()).to(device))
                hessian = acc.H
            # rows are independent given H: quantize the 248K-row head in slices so GPTQ's fp32 working copies
            # stay small (one slice, not the whole 2 GB matrix several times over)
            parts = [quantize_weight(head[r:r + 16384].to(device), hessian, bits, settings.options())
                     for r in range(0, head.shape[0], 16384)]
            res = QuantResult(torch.cat([p.q for p in parts]), torch.cat([p.scales for p in parts]),
                              torch.cat([p.zeros for p in parts]), parts[0].g_idx, sum(p.loss for p in parts))
            tensors.update(packed("lm_head", res, bits))
    _atomic_save(tensors, path)
    return {"norm.weight": g["norm.weight"], "lm_head.weight": g["embed_tokens.weight"] if head is None else head}


def _finish(src, out, reader, settings, profile, calib_info, created, source_label, n_shards, sums) -> None:
    weight_map = {}
    total = expert_bytes = 0
    for k in range(1, n_shards + 1):
        name = shard_name(k, n_shards)
        header = read_header(out / name)  # a shard cut short since it was written: one line, not a traceback
        total += (out / name).stat().st_size
        for t, info in header.items():
            if t == "__metadata__":
                continue
            weight_map[t] = name
            if ".mlp.experts." in t:
                expert_bytes += info["data_offsets"][1] - info["data_offsets"][0]
    _write_json(out / "model.safetensors.index.json",
                {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})
    raw = json.loads((src / "config.json").read_text(encoding="utf-8"))
    raw["quantization_config"] = {
        "quant_method": "gptq", "bits": settings.bits, "group_size": settings.group_size,
        "desc_act": False, "sym": settings.sym, "checkpoint_format": "gptq", "damp_percent": settings.damp,
        "dynamic": dynamic_rules(profile, settings.bits), "clover_profile": profile.name,
    }
    _write_json(out / "config.json", raw)
    for name in COPY_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, out / name)
    manifest = Manifest(
        source=source_label or {"path": src.name},
        settings=settings.recorded(),
        calibration=calib_info,
        memory={"total_bytes": total, "expert_bytes": expert_bytes, "non_expert_bytes": total - expert_bytes},
        created=created,
    )
    # the manifest is marked complete only over the bytes each layer wrote (`sums`, read back then): a shard
    # altered since is refused, not certified. The progress goes last: a run killed before this point is still
    # resumable (the manifest skips hidden folders)
    try:
        manifest.finalize(out, expected=sums)
    except AlteredFile as exc:
        raise _altered(out / exc.name, int(exc.name.split("-")[1]) - 1, out) from None
    _tidy(out, manifest)


def _hashed(out: Path) -> bool:
    """The pack's manifest is there and complete: `_finish` got past hashing the files."""
    try:
        return (out / MANIFEST_NAME).is_file() and Manifest.load(out).complete
    except CloverError:
        return False


def _tidy(out: Path, manifest: Manifest) -> None:
    """What follows the hashing: the card, then the progress. A --resume after a kill here does only this (the
    LM head is not quantized again to hash the same pack). state.json goes first, so a kill inside the removal
    leaves either a whole progress folder or one without state beside a complete manifest (which prepare_output
    clears without touching the pack), never a state.json whose inputs are gone."""
    from clover_local.pack.card import write_card

    write_card(out, manifest=manifest)
    (out / PROGRESS / "state.json").unlink(missing_ok=True)
    shutil.rmtree(out / PROGRESS, ignore_errors=True)
