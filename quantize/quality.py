"""How much a pack changed the model: KL divergence and top-1 agreement against its BF16 source.

Both models are streamed one decoder layer at a time over held-out text (the calibration file's held-out
split), so a 35B reference never has to fit in memory; `quantize` advances the same two streams as it quantizes
(`HeldOutStreams`), so the source is read once. Two views: the causal pass (every position predicts the next
token) and the preview pass (every block masked at a random ratio; the masked positions are scored).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from clover_local.checkpoint.reader import CheckpointReader, layer_states
from clover_local.errors import CloverError
from clover_local.loader import refuse_pack, resolve_mask_token
from clover_local.model.clover import build_layer
from clover_local.model.norm import ZeroCenteredRMSNorm
from clover_local.model.rope import Rotary
from clover_local.pack.reader import PackReader, is_pack
from clover_local.tokenizer import ChatTokenizer
from quantize.calibration import build_calibration, resolve_calib_path

if TYPE_CHECKING:
    from clover_local.hub.remote_shards import RemoteShards


@dataclass
class Quality:
    kl_causal_mean: float
    kl_causal_p99: float
    top1_causal: float
    kl_preview_mean: float
    kl_preview_p99: float
    top1_preview: float
    tokens_causal: int
    tokens_preview: int
    eval_text: str

    def to_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


# tensors every profile keeps as the source had them (in BF16): equal in a pack and the checkpoint it was made from
VERBATIM = ("input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate.weight")


def _check_same_source(pack_reader: PackReader, ref_reader: CheckpointReader, pack: Path, reference: Path) -> None:
    """The pack's verbatim tensors against the reference's, every layer, before either model is streamed: a
    checkpoint of the same shape but other weights (another fine-tune, another release) would otherwise be compared
    without a word, its large KL taken for the pack's quantization error — and found out only after the
    reference's whole pass (hours at 35B). These tensors are small (≈ 1 MiB a layer at 35B)."""
    for i in range(ref_reader.config.num_hidden_layers):
        for name in VERBATIM:
            ours, theirs = f"model.layers.{i}.{name}", f"layers.{i}.{name}"
            if ours not in pack_reader.weight_map or not ref_reader.has(theirs):
                continue
            a, b = pack_reader.tensor(ours), ref_reader.tensor(theirs)
            if not torch.equal(a.to(torch.bfloat16), b.to(torch.bfloat16)):
                raise CloverError(f"{pack} was not made from {reference}: layer {i}'s {name} differs (the pack "
                                  "keeps it unquantized); give the BF16 checkpoint the pack was made from")
    pack_reader.close()
    ref_reader.close()


def _refuse_non_pack(pack: Path) -> None:
    """Why PACK is not a pack, in words that say what to do: an unfinished quantization names --resume."""
    from quantize.pipeline import PROGRESS

    if is_pack(pack):
        return
    if (pack / PROGRESS).is_dir():
        raise CloverError(f"{pack} holds an unfinished quantization; finish it first (the same quantize command "
                          "with --resume)")
    if not (pack / "config.json").is_file():
        raise CloverError(f"{pack} is not a pack: it has no config.json")
    raise CloverError(f"{pack} is not a GPTQ pack (its config.json has no quantization_config)")


@dataclass
class QualityCheck:
    """What the KL is measured on: `samples` × `seq_len` tokens of the calibration file's held-out split."""

    samples: int = 8
    seq_len: int = 512
    calib: str | None = None
    seed: int = 1
    batch: int = 4

    @classmethod
    def during_quantize(cls, seq_len: int, calib: str | None = None) -> QualityCheck:
        """What `quantize` measures as the layers go: 4 held-out sequences of the calibration's length, at most
        512 tokens (a few minutes of a run of hours at 35B)."""
        return cls(samples=4, seq_len=min(seq_len, 512), calib=calib)

    def held_out(self, cfg, tokenizer, src: Path):
        """(the held-out token ids, the mask id, the file's path): the same for the same inputs, so a resumed run
        measures on what it started with."""
        path = resolve_calib_path(self.calib, src)
        mask_id = resolve_mask_token(cfg, tokenizer)
        data = build_calibration(path, tokenizer, self.samples, self.seq_len, cfg.diffusion.block_size, mask_id,
                                 self.seed, holdout=True)
        return data, mask_id, path


class HeldOutStreams:
    """Held-out text's hidden states through the reference's decoder layers and through the pack's, side by side
    (the KL needs both at the end). `compare` advances each from its own reader; `quantize` advances both as it
    goes — the reference through a source layer before it is quantized in place, the pack through the same layer
    after — so each source layer is read once (a streamed checkpoint is not fetched a second time)."""

    KEYS = ("reference.clean", "reference.noisy", "pack.clean", "pack.noisy", "masked")

    def __init__(self, cfg, hidden: dict[str, torch.Tensor], device: torch.device, batch: int, eval_text: str):
        self.cfg, self.hidden, self.device, self.batch, self.eval_text = cfg, hidden, device, batch, eval_text
        self.dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        rotary = Rotary(cfg.rotary_dim, cfg.rope_theta)
        self.cos, self.sin = rotary.cos_sin(torch.arange(hidden["masked"].shape[1], device=device), self.dtype)

    @classmethod
    def start(cls, cfg, data, mask_id: int, ref_embed: torch.Tensor, pack_embed: torch.Tensor, device: torch.device,
              batch: int, eval_text: str) -> HeldOutStreams:
        """Both streams at the embeddings of the held-out tokens (each model's own table)."""
        hidden = {"masked": data.noisy == mask_id}
        for which, table in (("reference", ref_embed), ("pack", pack_embed)):
            hidden[f"{which}.clean"] = table[data.clean].float()
            hidden[f"{which}.noisy"] = table[data.noisy].float()
        return cls(cfg, hidden, device, batch, eval_text)

    @torch.no_grad()
    def advance(self, which: str, layer) -> None:
        """Run `which` ("reference" or "pack") through one decoder layer, a few sequences at a time."""
        clean, noisy = self.hidden[f"{which}.clean"], self.hidden[f"{which}.noisy"]
        outs_c, outs_n = [], []
        for s in range(0, clean.shape[0], self.batch):
            c, n = layer.forward_all_blocks(clean[s:s + self.batch].to(self.device, self.dtype),
                                            noisy[s:s + self.batch].to(self.device, self.dtype), self.cos, self.sin,
                                            self.cfg.diffusion.block_size)
            outs_c.append(c.float().cpu())
            outs_n.append(n.float().cpu())
        self.hidden[f"{which}.clean"], self.hidden[f"{which}.noisy"] = torch.cat(outs_c), torch.cat(outs_n)

    def result(self, ref_weights: dict, pack_weights: dict) -> Quality:
        """The figures, from each model's `logit_weights()`: its final norm and LM head (a packed head is
        dequantized a slice of rows at a time)."""
        outs = {}
        for which, g in (("reference", ref_weights), ("pack", pack_weights)):
            norm = ZeroCenteredRMSNorm(self.cfg.hidden_size, self.cfg.rms_norm_eps)
            with torch.no_grad():
                norm.weight.copy_(g["norm.weight"].float())
                outs[which] = (norm(self.hidden[f"{which}.clean"]), norm(self.hidden[f"{which}.noisy"]),
                               g["lm_head.weight"])
        (ref_c, ref_n, ref_head), (q_c, q_n, q_head) = outs["reference"], outs["pack"]
        h, masked = ref_c.shape[-1], self.hidden["masked"]
        ref_rows, q_rows = ref_c[:, :-1].reshape(-1, h), q_c[:, :-1].reshape(-1, h)
        # the causal and the preview rows in one call: each head is read (a packed one dequantized) once
        kl, top = _kl_top1(torch.cat([ref_rows, ref_n[masked]]), ref_head, torch.cat([q_rows, q_n[masked]]), q_head)
        sizes = [ref_rows.shape[0], int(masked.sum())]
        (kl_c, kl_p), (top_c, top_p) = kl.split(sizes), top.split(sizes)
        return Quality(
            kl_causal_mean=kl_c.mean().item(), kl_causal_p99=kl_c.quantile(0.99).item(),
            top1_causal=top_c.mean().item(), kl_preview_mean=kl_p.mean().item(),
            kl_preview_p99=kl_p.quantile(0.99).item(), top1_preview=top_p.mean().item(),
            tokens_causal=kl_c.numel(), tokens_preview=kl_p.numel(), eval_text=self.eval_text,
        )


LOGIT_SLICE = 2048 * 16384  # logits held at once per model (128 MiB in float32): rows × head rows of a slice


def _kl_top1(ref_h: torch.Tensor, ref_head, q_h: torch.Tensor, q_head):
    """Per-row KL(ref ‖ q) and top-1 agreement over the 248K-wide vocabulary in one pass over slices of each
    head's rows, so that neither a head in float32 (a packed one is dequantized slice by slice: whole, ≈ 8 GB of
    temporaries at 35B) nor a rows × vocab logit matrix is ever held, and each logit is made once (the matmuls
    are the step's time: 3K rows × 248K × 2048 × 2 heads). KL = E_p[a − b] − lse(a) + lse(b) for logits a, b,
    with E_p kept as an online softmax does (sums rescaled when a row's largest logit grows; float64 sums)."""
    n = ref_h.shape[0]
    vocab = max(32, LOGIT_SLICE // max(n, 1) // 32 * 32)  # a packed head is sliced at multiples of 32 rows
    f64 = torch.float64
    best = [torch.full((n,), -math.inf), torch.full((n,), -math.inf)]  # each row's largest logit so far
    arg = [torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)]
    mass, gap = torch.zeros(n, dtype=f64), torch.zeros(n, dtype=f64)  # Σ e^(a − best), Σ e^(a − best)(a − b)
    lse_q = torch.full((n,), -math.inf, dtype=f64)
    for v in range(0, ref_head.shape[0], vocab):
        a, b = ref_h @ ref_head[v:v + vocab].float().T, q_h @ q_head[v:v + vocab].float().T
        before = best[0]
        for k, x in enumerate((a, b)):
            top, at = x.max(-1)
            higher = top > best[k]  # strictly: the first of equal maxima wins, as one argmax over all would
            best[k], arg[k] = torch.where(higher, top, best[k]), torch.where(higher, at + v, arg[k])
        scale = torch.exp((before - best[0]).to(f64))  # the sums so far, to the new largest logit (0 at first)
        w = torch.exp(a - best[0][:, None])
        lse_q = torch.logaddexp(lse_q, b.logsumexp(-1).to(f64))
        mass = mass * scale + w.sum(-1, dtype=f64)
        gap = gap * scale + (w * torch.sub(a, b, out=b)).sum(-1, dtype=f64)
    kl = gap / mass - (best[0].to(f64) + mass.log()) + lse_q
    return kl.float().clamp(min=0), (arg[0] == arg[1]).float()


def compare(
    pack: Path, reference: Path, check: QualityCheck = QualityCheck(), *, device: torch.device = torch.device("cpu"),
    on_layer: Callable[[str, int], None] = lambda which, i: None, remote: RemoteShards | None = None,
) -> Quality:
    """KL(reference ‖ pack) per token (mean and 99th percentile) and top-1 agreement, causal and preview. With
    `remote`, the reference's shards are read from the Hub by byte range (`eval --stream`)."""
    _refuse_non_pack(pack)
    refuse_pack(reference, str(reference), "the reference is the BF16 checkpoint the pack was made from")
    ref_reader = CheckpointReader(reference, remote=remote)
    pack_reader = PackReader(pack)
    if ref_reader.config.to_dict() != pack_reader.config.to_dict():
        raise CloverError(f"{pack} was not made from {reference}: their configs differ")
    _check_same_source(pack_reader, ref_reader, pack, reference)
    cfg = ref_reader.config
    data, mask_id, path = check.held_out(cfg, ChatTokenizer.from_folder(reference), reference)
    streams = HeldOutStreams.start(cfg, data, mask_id, ref_reader.tensor("embed_tokens.weight"),
                                   pack_reader.tensor("model.embed_tokens.weight"), device, check.batch,
                                   held_out_text(path))
    for which, reader in (("reference", ref_reader), ("pack", pack_reader)):
        on_layer(which, 0)
        for i, state in layer_states(reader, 0, cfg.num_hidden_layers):
            layer = build_layer(cfg, i, state, device, streams.dtype)
            del state
            streams.advance(which, layer)
            del layer
            if i + 1 < cfg.num_hidden_layers:
                on_layer(which, i + 1)
    return streams.result(ref_reader.logit_weights(), pack_reader.logit_weights())


def held_out_text(path: str | Path) -> str:
    return f"{Path(path).name} (held-out split)"
