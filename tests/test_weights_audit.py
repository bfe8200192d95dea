"""Mutation-audit additions for the weight-reading side: the name table, the BF16 checkpoint reader, the pack reader,
the manifest, the loader and the tokenizer. Each test pins a behaviour a hand-made mutant of those modules changed
without any other test noticing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from clover_local import loader
from clover_local.checkpoint.names import Target, layer_shapes, map_name
from clover_local.checkpoint.reader import CheckpointReader, layer_states
from clover_local.checkpoint.synthetic import TinySpec, random_state, tiny_config_dict, write_checkpoint
from clover_local.config import load_config, parse_config
from clover_local.errors import CloverError
from clover_local.pack.manifest import MANIFEST_NAME, Manifest, verify_pack
from clover_local.pack.reader import PackReader
from clover_local.tokenizer import ChatTokenizer, _byte_level_alphabet
from quantize.gptq import rtn_quantize
from quantize.gptq_format import dequantize, pack_weight
from runtime_pack import pack  # noqa: F401 (fixture)


# ---------------------------------------------------------------------------------------------- the name table


@pytest.mark.parametrize("prefix", ["model.", "model.language_model.", "language_model.model."])
def test_every_checkpoint_prefix_maps_to_the_same_parameter(prefix):
    """The three text-tower prefixes real checkpoints use all land on our names; the per-expert form names its
    layer, expert and part, down_proj going to the fused down parameter and gate/up to gate_up_proj."""
    assert map_name(f"{prefix}layers.12.self_attn.q_proj.weight") == Target("layers.12.self_attn.q_proj.weight")
    assert map_name(f"{prefix}embed_tokens.weight") == Target("embed_tokens.weight")
    assert map_name(f"{prefix}norm.weight") == Target("norm.weight")
    assert map_name(f"{prefix}layers.3.mlp.experts.17.up_proj.weight") == Target(
        "layers.3.mlp.experts.gate_up_proj", expert=17, part="up")
    assert map_name(f"{prefix}layers.3.mlp.experts.17.gate_proj.weight") == Target(
        "layers.3.mlp.experts.gate_up_proj", expert=17, part="gate")
    assert map_name(f"{prefix}layers.39.mlp.experts.255.down_proj.weight") == Target(
        "layers.39.mlp.experts.down_proj", expert=255, part="down")


def test_the_lm_head_and_skipped_towers_map_as_documented():
    """`lm_head.weight` (also under `language_model.`) is the head, never the embeddings; the MTP head and the
    vision tower are skipped, whatever layer names they carry; an unknown name maps nowhere."""
    assert map_name("lm_head.weight") == Target("lm_head.weight")
    assert map_name("language_model.lm_head.weight") == Target("lm_head.weight")
    for skipped in ("mtp.layers.0.mlp.experts.0.gate_proj.weight", "model.mtp.layers.0.input_layernorm.weight",
                    "model.visual.blocks.0.attn.qkv.weight", "visual.merger.mlp.0.weight", "rotary.inv_freq"):
        assert map_name(skipped) is None, skipped


# ---------------------------------------------------------------------------------------------- the BF16 checkpoint


def _ckpt(tmp_path: Path, name: str = "ckpt", **kwargs) -> Path:
    return write_checkpoint(tmp_path / name, TinySpec(), seed=11, **kwargs)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg, msg
    return msg


def test_an_index_without_a_weight_map_is_one_line(tmp_path):
    """A `model.safetensors.index.json` that is JSON but lacks `weight_map` (a hand-edited or foreign index) is a
    refusal naming the index, not a KeyError."""
    folder = _ckpt(tmp_path, shards=2)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(CloverError, match="is not a valid safetensors index") as err:
        CheckpointReader(folder)
    assert "model.safetensors.index.json" in _one_line(err)


@pytest.mark.parametrize("weight_map, words", [
    ("model-1.safetensors", "no 'weight_map' object"),
    ({"lm_head.weight": 3}, "'lm_head.weight' is in 3, not a shard file beside it"),
    ({"lm_head.weight": "../elsewhere.safetensors"}, "'../elsewhere.safetensors', not a shard file beside it"),
    ({"lm_head.weight": "/tmp/x.safetensors"}, "not a shard file beside it"),
])
def test_an_index_whose_weight_map_is_not_names_of_shards_beside_it_is_one_line(tmp_path, pack, weight_map, words):
    """One reader for checkpoints and packs (checkpoint/index.py): a weight_map of the wrong type, or naming a
    shard that is no file name, is a refusal naming the index, for a checkpoint, a pack's reader and the runtime's
    pack index alike (they were an AttributeError, or a read of a file elsewhere)."""
    import shutil

    from clover_local.runtime.pack_index import read_pack_index

    ckpt = _ckpt(tmp_path, shards=2)
    packed = Path(shutil.copytree(pack, tmp_path / "pack"))
    for folder, read in ((ckpt, CheckpointReader), (packed, PackReader), (packed, read_pack_index)):
        (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        with pytest.raises(CloverError, match="is not a valid safetensors index") as err:
            read(folder)
        assert "model.safetensors.index.json" in _one_line(err) and words in str(err.value), err.value


def test_a_folder_without_weights_says_so(tmp_path):
    """A folder with a config but no `.safetensors` file is refused up front with that reason (not later, as a
    missing tensor)."""
    folder = _ckpt(tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(CloverError, match=r"no \.safetensors weights in"):
        CheckpointReader(folder)


def test_a_shard_the_index_lists_but_the_folder_lacks_is_named_missing(tmp_path):
    """A deleted shard of a sharded checkpoint is refused when the reader opens, as missing (not as a corrupt file,
    and not only once a tensor of that shard is read)."""
    folder = _ckpt(tmp_path, shards=3)
    (folder / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(CloverError, match=r"shard model-00002-of-00003\.safetensors listed in "
                                          r"model\.safetensors\.index\.json is missing"):
        CheckpointReader(folder)


def test_a_per_expert_checkpoint_missing_one_expert_is_one_line(tmp_path):
    """Per-expert storage with one expert's up_proj absent: the layer read names the part and the expert."""
    full = _ckpt(tmp_path, fused=False)
    tensors = load_file(str(full / "model.safetensors"))
    del tensors["model.layers.2.mlp.experts.5.up_proj.weight"]
    save_file(tensors, str(full / "model.safetensors"))
    reader = CheckpointReader(full)
    with pytest.raises(CloverError, match="no up_proj for expert 5 of layers.2.mlp") as err:
        reader.layer_state(2)
    _one_line(err)
    with pytest.raises(CloverError, match="no up_proj for expert 5 of layer 2"):
        reader.expert(2, 5)
    assert set(reader.expert(2, 4)) == {"gate_proj", "up_proj", "down_proj"}


def test_a_checkpoint_mixing_fused_and_per_expert_storage_is_refused(tmp_path):
    """A layer holding both the fused gate_up_proj and per-expert gate/up tensors is ambiguous: refused rather
    than one of the two silently used."""
    spec = TinySpec()
    folder = _ckpt(tmp_path, fused=False, extra_tensors={
        "model.layers.1.mlp.experts.gate_up_proj": torch.randn(spec.num_experts, 2 * spec.moe_intermediate_size,
                                                               spec.hidden_size)})
    with pytest.raises(CloverError, match="mixes fused and per-expert tensors for layers.1.mlp.experts.gate_up_proj"):
        CheckpointReader(folder).layer_state(1)


def test_a_missing_required_tensor_is_refused_and_the_preview_extras_are_optional(tmp_path):
    """A layer lacking a required tensor is refused by name; a plain Qwen3.5 backbone (no block-diffusion extras)
    still reads, without them; where the extras are present, they are read."""
    folder = _ckpt(tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    with_extras = CheckpointReader(folder)
    state = with_extras.layer_state(0)
    assert torch.equal(state["linear_attn.conv_right_weight"], tensors["model.layers.0.linear_attn.conv_right_weight"])
    assert with_extras.has_preview_params
    plain = {k: v for k, v in tensors.items()
             if not k.endswith(("conv_right_weight", "bd_softmax_logit_scale", "bd_softmax_history_bias",
                                "bd_softmax_history_c"))}
    save_file(plain, str(folder / "model.safetensors"))
    reader = CheckpointReader(folder)
    state = reader.layer_state(0)
    assert "linear_attn.conv_right_weight" not in state and "linear_attn.in_proj_qkv.weight" in state
    assert not reader.has_preview_params
    del plain["model.layers.0.linear_attn.in_proj_z.weight"]
    save_file(plain, str(folder / "model.safetensors"))
    with pytest.raises(CloverError, match="no tensor for layers.0.linear_attn.in_proj_z.weight"):
        CheckpointReader(folder).layer_state(0)


def test_the_global_tensors_are_shape_checked(tmp_path):
    """An embedding table of another vocabulary is refused with both shapes, not loaded into a wrong-sized model."""
    spec = TinySpec()
    narrower = torch.randn(spec.vocab_size - 8, spec.hidden_size)
    folder = _ckpt(tmp_path, extra_tensors={"model.embed_tokens.weight": narrower})
    with pytest.raises(CloverError, match=rf"model\.embed_tokens\.weight has shape \[{spec.vocab_size - 8}, "
                                          rf"{spec.hidden_size}\], expected \[{spec.vocab_size}, {spec.hidden_size}\]"):
        CheckpointReader(folder).global_state()


def test_logit_weights_take_the_untied_head_not_the_embeddings(tmp_path):
    """With an untied `lm_head.weight` the logits use it (the embeddings only stand in when the head is tied)."""
    folder = _ckpt(tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    got = CheckpointReader(folder).logit_weights()
    assert torch.equal(got["lm_head.weight"], tensors["lm_head.weight"])
    assert not torch.equal(got["lm_head.weight"], tensors["model.embed_tokens.weight"])
    assert torch.equal(got["norm.weight"], tensors["model.norm.weight"])


@pytest.mark.parametrize("fused", [True, False])
def test_one_expert_reads_the_same_weights_in_either_storage(tmp_path, fused):
    """`expert(layer, e)` gives expert e's own gate, up and down rows (not a neighbour's, not gate and up swapped),
    from fused or per-expert storage alike; a fused one is sliced out without reading the whole [E, 2I, H] tensor."""
    spec = TinySpec()
    cfg = load_config(_ckpt(tmp_path, "cfg"))
    state = random_state(cfg, seed=4)
    folder = write_checkpoint(tmp_path / "ckpt", spec, fused=fused, state=state)
    reader = CheckpointReader(folder)
    if fused:
        def whole(*args):
            raise AssertionError("the whole fused tensor was read for one expert")
        reader._read = whole
    im = spec.moe_intermediate_size
    for e in (0, 3, spec.num_experts - 1):
        got = reader.expert(1, e)
        assert torch.equal(got["gate_proj"], state["layers.1.mlp.experts.gate_up_proj"][e, :im])
        assert torch.equal(got["up_proj"], state["layers.1.mlp.experts.gate_up_proj"][e, im:])
        assert torch.equal(got["down_proj"], state["layers.1.mlp.experts.down_proj"][e])


class _Recorder:
    """A reader whose layer reads and closes are logged, for `layer_states`."""

    def __init__(self):
        self.log: list[str] = []

    def layer_state(self, i):
        self.log.append(f"read {i}")
        return {"i": torch.tensor([i])}

    def close(self):
        self.log.append("close")


def test_layer_states_unmap_the_shards_after_each_layer():
    """A local checkpoint is read a layer at a time with its shards unmapped between layers, so the pages a layer
    touched do not pile up in memory across a 40-layer read; every layer start..stop-1 comes, in order."""
    reader = _Recorder()
    got = [i for i, _ in layer_states(reader, 2, 5)]
    assert got == [2, 3, 4]
    assert reader.log == ["read 2", "close", "read 3", "close", "read 4", "close"]


# ---------------------------------------------------------------------------------------------- the pack reader


GROUP = 32  # divides the tiny spec's input widths (hidden 64, expert 32)
EXTRAS = ("conv_right_weight", "bd_softmax_logit_scale", "bd_softmax_history_bias", "bd_softmax_history_c")


def _write_pack(folder: Path, spec: TinySpec, *, seed: int = 3, drop: tuple[str, ...] = (),
                quantized_head: bool = False) -> dict[str, torch.Tensor]:
    """A GPTQ-layout pack (routed experts RTN-packed at 4 bits, the rest plain fp32, two shards and an index)
    written here, without the quantize pipeline; returns what the reader must give back, by our names."""
    folder.mkdir(parents=True)
    raw = tiny_config_dict(spec)
    raw["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "sym": True}
    (folder / "config.json").write_text(json.dumps(raw))
    state = random_state(load_config(folder), seed)
    tensors: dict[str, torch.Tensor] = {}
    want: dict[str, torch.Tensor] = {}

    def quantized(module: str, w: torch.Tensor) -> torch.Tensor:
        r = rtn_quantize(w, bits=4, group_size=GROUP)
        packed = pack_weight(r.q, r.scales, r.zeros, r.g_idx, 4)
        tensors.update({f"{module}.{k}": v for k, v in packed.items()})
        return dequantize(packed, 4, torch.float32)

    im = spec.moe_intermediate_size
    for name, t in state.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = "model." + name.removesuffix("gate_up_proj")
            want[name] = torch.stack([torch.cat([quantized(f"{base}{e}.gate_proj", t[e, :im]),
                                                 quantized(f"{base}{e}.up_proj", t[e, im:])]) for e in range(len(t))])
        elif name.endswith("mlp.experts.down_proj"):
            base = "model." + name.removesuffix("down_proj")
            want[name] = torch.stack([quantized(f"{base}{e}.down_proj", t[e]) for e in range(len(t))])
        elif name == "lm_head.weight" and quantized_head:
            want[name] = quantized("lm_head", t)
        else:
            tensors[name if name == "lm_head.weight" else f"model.{name}"] = want[name] = t
    for name in drop:
        del tensors[name]
    names = sorted(tensors)
    weight_map = {}
    for s, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        shard = f"model-{s + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n].contiguous() for n in part}, str(folder / shard))
        weight_map.update({n: shard for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return want


def test_a_pack_of_more_than_ten_layers_reads_every_layer_back(tmp_path):
    """Every layer of a 12-layer pack (layer numbers of two digits, as the 40-layer release has) reads back as the
    dequantized weights written, experts assembled in order with gate before up."""
    spec = TinySpec(num_hidden_layers=12)
    want = _write_pack(tmp_path / "pack", spec)
    reader = PackReader(tmp_path / "pack")
    for i in range(spec.num_hidden_layers):
        state = reader.layer_state(i)
        assert set(state) == set(layer_shapes(reader.config, i))
        for rel, t in state.items():
            assert torch.equal(t, want[f"layers.{i}.{rel}"]), (i, rel)
    assert reader.has_preview_params
    glob = reader.global_state()
    assert torch.equal(glob["lm_head.weight"], want["lm_head.weight"])
    assert torch.equal(glob["embed_tokens.weight"], want["embed_tokens.weight"])


def test_the_pack_logit_weights_are_its_own_head(tmp_path):
    """A plain head in a pack is `lm_head.weight`, not the embeddings; a quantized one stays packed and its rows
    dequantize to the head written."""
    spec = TinySpec()
    want = _write_pack(tmp_path / "plain", spec)
    logits = PackReader(tmp_path / "plain").logit_weights()
    assert torch.equal(logits["lm_head.weight"], want["lm_head.weight"])
    assert torch.equal(logits["norm.weight"], want["norm.weight"])
    spec = TinySpec(vocab_size=104, mask_token_id=103, eos_token_id=102)  # the last slice of rows is short
    want = _write_pack(tmp_path / "quant", spec, quantized_head=True)
    head = PackReader(tmp_path / "quant").logit_weights()["lm_head.weight"]
    assert head.shape == (104, spec.hidden_size)
    assert torch.equal(torch.cat([head[0:64], head[64:96], head[96:104]]), want["lm_head.weight"])
    assert torch.equal(head[96:], want["lm_head.weight"][96:])
    with pytest.raises(IndexError, match="multiples of 32"):
        head[0:50]


@pytest.mark.parametrize("drop,needle", [
    (("model.layers.1.mlp.experts.3.up_proj.scales",), "pack is missing model.layers.1.mlp.experts.3.up_proj.scales"),
    (tuple(f"model.layers.1.mlp.experts.6.down_proj.{p}" for p in ("qweight", "qzeros", "scales", "g_idx")),
     "pack is missing model.layers.1.mlp.experts.6.down_proj"),
    (("model.layers.1.input_layernorm.weight",), "pack has no tensor for model.layers.1.input_layernorm.weight"),
])
def test_a_pack_missing_a_tensor_is_refused_by_name(tmp_path, drop, needle):
    """A pack lacking one quantized part, one expert or one plain tensor is refused in one line naming it, never
    a KeyError or a layer silently short of a weight."""
    _write_pack(tmp_path / "pack", TinySpec(), drop=drop)
    with pytest.raises(CloverError, match=needle.replace(".", r"\.")) as err:
        PackReader(tmp_path / "pack").layer_state(1)
    _one_line(err)


def test_a_pack_of_a_plain_backbone_reads_without_the_preview_extras(tmp_path):
    """The block-diffusion extras are optional in a pack too: without them a layer reads and the pack says it has
    no preview parameters."""
    spec = TinySpec()
    drop = tuple(f"model.layers.{i}.linear_attn.{x}" for i in range(spec.num_hidden_layers) if (i + 1) % 4
                 for x in EXTRAS)
    _write_pack(tmp_path / "pack", spec, drop=drop)
    reader = PackReader(tmp_path / "pack")
    state = reader.layer_state(0)
    assert "linear_attn.in_proj_qkv.weight" in state and "linear_attn.conv_right_weight" not in state
    assert not reader.has_preview_params


def test_an_incomplete_pack_folder_is_refused_in_one_line(tmp_path):
    """No index: not a complete pack; a shard the index lists but the folder lacks: named as missing, at open."""
    _write_pack(tmp_path / "pack", TinySpec())
    (tmp_path / "pack" / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CloverError, match=r"pack shard model-00002-of-00002\.safetensors is missing from"):
        PackReader(tmp_path / "pack")
    (tmp_path / "pack" / "model.safetensors.index.json").unlink()
    with pytest.raises(CloverError, match=r"has no model\.safetensors\.index\.json: not a complete pack"):
        PackReader(tmp_path / "pack")


def test_closing_a_pack_reader_unmaps_its_shards(tmp_path):
    """`close()` lets go of every shard a layer read mapped (layer-by-layer evaluation relies on it to keep memory
    flat); the next read reopens them."""
    want = _write_pack(tmp_path / "pack", TinySpec())
    reader = PackReader(tmp_path / "pack")
    reader.layer_state(0)
    assert reader._handles
    reader.close()
    assert not reader._handles
    assert torch.equal(reader.layer_state(0)["input_layernorm.weight"], want["layers.0.input_layernorm.weight"])


def test_a_config_with_a_null_quantization_config_is_not_a_pack(tmp_path):
    """`is_pack` goes by a `quantization_config` object: a BF16 config that carries the key as null is a checkpoint."""
    from clover_local.pack.reader import is_pack

    raw = tiny_config_dict(TinySpec())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "quantization_config": None}))
    assert not is_pack(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**raw, "quantization_config": {"bits": 4}}))
    assert is_pack(tmp_path)


# ---------------------------------------------------------------------------------------------- the tokenizer


def _word_tokenizer(*added: tuple[str, bool]):
    """A word-level `tokenizers.Tokenizer` whose added tokens get ids 5, 6, ... in the order given."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", "hi", "there", "café", "x"])},
                                     unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    for content, special in added:
        tok.add_tokens([AddedToken(content, special=special)])
    return tok


def test_end_of_turn_ids_come_from_every_source_once():
    """`<|im_end|>`, `<|endoftext|>`, the config's eos (also as an AddedToken dict) and generation_config's eos list
    all end generation, each id once, in that order."""
    tok = _word_tokenizer(("<|im_end|>", True), ("<|endoftext|>", True), ("<eot>", True), ("<stop>", True))
    ids = {t: tok.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>", "<eot>", "<stop>")}
    chat = ChatTokenizer(tok, {"eos_token": {"content": "<eot>", "special": True}},
                         generation_config={"eos_token_id": [ids["<stop>"], ids["<|im_end|>"], 2]})
    assert chat.eos_token_ids == [ids["<|im_end|>"], ids["<|endoftext|>"], ids["<eot>"], ids["<stop>"], 2]
    assert ChatTokenizer(tok, {}, generation_config={"eos_token_id": 3}).eos_token_ids[-1] == 3
    assert ChatTokenizer(tok, {"pad_token": {"content": "<stop>"}}).pad_token_id == ids["<stop>"]
    assert ChatTokenizer(tok, {}).pad_token_id is None


def test_the_mask_token_is_found_in_order_of_precedence():
    """generation_config's mask_token_id wins, then the config's mask_token, then the first *special* added token
    named like a mask (a plain added token that merely contains "mask" is not one)."""
    tok = _word_tokenizer(("<mask_note>", False), ("[MASK]", True), ("<|mask2|>", True), ("<m>", True))
    special = tok.token_to_id("[MASK]")
    assert ChatTokenizer(tok, {}).mask_token_id == special
    assert ChatTokenizer(tok, {"mask_token": "<m>"}).mask_token_id == tok.token_to_id("<m>")
    assert ChatTokenizer(tok, {"mask_token": "<m>"}, generation_config={"mask_token_id": 4}).mask_token_id == 4
    assert ChatTokenizer(tok, {"mask_token": "<nowhere>"}).mask_token_id == special


def test_the_template_sees_special_tokens_kwargs_and_unescaped_json():
    """The template gets the config's eos token, the caller's extra variables, and `tojson` keeps non-ASCII text
    as it is (transformers' filter), so a tool schema in another language renders readably."""
    tok = _word_tokenizer(("<|im_end|>", True))
    template = "{{ messages[0].content }}{{ eos_token }}|{{ extra }}|{{ {'q': 'café'} | tojson }}"
    chat = ChatTokenizer(tok, {"eos_token": "<|im_end|>"}, template)
    assert chat.apply_chat_template([{"role": "user", "content": "hi"}], extra="E") == \
        'hi<|im_end|>|E|{"q": "café"}'
    chat.use_template("{{ messages | length }} messages")
    assert chat.apply_chat_template([{"role": "user", "content": "hi"}]) == "1 messages"


def test_the_default_entry_of_a_list_of_templates_is_used(tmp_path):
    """The older `chat_template` format, a list of named templates: the one named "default" is used, wherever it
    sits in the list."""
    tok = _word_tokenizer()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEFAULT"}]}))
    assert ChatTokenizer.from_folder(tmp_path).apply_chat_template([{"role": "user", "content": "x"}]) == "DEFAULT"


def test_a_tokenizer_config_that_is_not_an_object_is_one_line(tmp_path):
    """A tokenizer_config.json holding a JSON list (or a string) is refused by name, not an AttributeError later."""
    _word_tokenizer().save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text("[1, 2]")
    with pytest.raises(CloverError, match="tokenizer_config.json does not hold a JSON object"):
        ChatTokenizer.from_folder(tmp_path)


def test_the_byte_level_alphabet_is_gpt2s():
    """The byte of every byte-level character (JSON mode's token bytes) is the one GPT-2's table gives, 0xAD (the
    soft hyphen, not printable) included; an added token has no bytes."""
    from tokenizers import pre_tokenizers

    alphabet = _byte_level_alphabet()
    assert set(alphabet) == set(pre_tokenizers.ByteLevel.alphabet()) and len(alphabet) == 256
    assert sorted(alphabet.values()) == list(range(256))
    assert alphabet["Ġ"] == 0x20 and alphabet["Ń"] == 0xAD and alphabet["Ā"] == 0x00 and alphabet["é"] == 0xE9


# ---------------------------------------------------------------------------------------------- the manifest


def _finished_pack(folder: Path) -> dict:
    """A finalized pack of two random shards and a config; returns its manifest as JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(9)
    for s in (1, 2):
        save_file({f"w{s}": torch.randn(8, 16, generator=gen)}, str(folder / f"model-0000{s}-of-00002.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "clover_moe", "quantization_config": {"bits": 4}}))
    Manifest(source={"repo_id": "a/b"}, settings={"bits": 4}).finalize(folder)
    return json.loads((folder / MANIFEST_NAME).read_text())


def _rewrite(folder: Path, raw: dict) -> None:
    (folder / MANIFEST_NAME).write_text(json.dumps(raw))


@pytest.mark.parametrize("change,needle", [
    (lambda raw: raw["files"]["config.json"].update(sha256=1234), "malformed entry for 'config.json'"),
    (lambda raw: raw["files"]["config.json"].update(bytes=True), "malformed entry for 'config.json'"),
    (lambda raw: raw.update(settings=[4, 128]), "'settings' section that is not an object"),
    (lambda raw: raw.update(format_version=True), "has no valid format_version"),
    (lambda raw: raw.pop("complete"), "is not complete"),
    (lambda raw: raw.update(files={}), "lists no files"),
    (lambda raw: raw["files"].update({"sub\\..\\x.json": {"sha256": "0" * 64, "bytes": 1}}), "unsafe file name"),
])
def test_a_malformed_manifest_is_refused_in_one_line(tmp_path, change, needle):
    """Every field a check relies on is type-checked when the manifest is read (a hand-edited or foreign manifest
    is refused in one sentence, never a TypeError mid-check or a pack wrongly taken as complete), and a file name
    with Windows separators cannot point outside the pack."""
    raw = _finished_pack(tmp_path)
    verify_pack(tmp_path)
    change(raw)
    _rewrite(tmp_path, raw)
    with pytest.raises(CloverError, match=re.escape(needle)) as err:
        verify_pack(tmp_path)
    _one_line(err)


def test_a_refusal_counts_the_other_files_only_when_there_are_some(tmp_path):
    """One missing shard is named alone; two say "(and 1 more)"."""
    _finished_pack(tmp_path)
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CloverError) as err:
        verify_pack(tmp_path)
    assert str(err.value).endswith("is missing model-00002-of-00002.safetensors")
    (tmp_path / "model-00001-of-00002.safetensors").unlink()
    with pytest.raises(CloverError, match=r"missing model-00001-of-00002\.safetensors \(and 1 more\)$"):
        verify_pack(tmp_path)


# ---------------------------------------------------------------------------------------------- the loader


def test_a_model_argument_that_is_a_file_or_a_deep_path_is_refused_locally(tmp_path, monkeypatch):
    """A file given as MODEL is named as a file; `a/b/c` is no Hub repo id (those are `owner/name`), so neither
    goes to the Hub."""
    def no_hub(*args, **kwargs):
        raise AssertionError("went to the Hub")

    monkeypatch.setattr("clover_local.hub.transfer.resolve_model", no_hub)
    (tmp_path / "weights.safetensors").write_bytes(b"x" * 8)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CloverError, match="weights.safetensors is a file, not a model folder"):
        loader.resolve_model_path("weights.safetensors")
    with pytest.raises(CloverError, match="model folder owner/name/extra does not exist"):
        loader.resolve_model_path("owner/name/extra")
    assert not loader.is_hub_id("owner/name/extra") and not loader.is_hub_id("weights.safetensors")


@pytest.mark.parametrize("quant,kind", [
    ({"quant_method": "gptq", "bits": 4}, "GPTQ INT4"),
    ({"quant_method": "awq", "bits": 3}, "AWQ INT3"),
    ({"quant_method": "gptq"}, "GPTQ"),
    ({"bits": "4"}, "QUANTIZED"),
    ("gptq", None),
])
def test_pack_kind_reads_the_method_and_bits_of_the_config(tmp_path, quant, kind):
    """What a refusal calls a pack: the method in capitals and the bits when they are a number; a
    quantization_config that is not an object makes no pack."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "clover_moe", "quantization_config": quant}))
    assert loader.pack_kind(tmp_path) == kind


def test_a_pack_refusal_names_the_hub_repo_before_the_local_folder(tmp_path):
    """A manifest recording both a repo id and a local path names the repo (what a user can look up)."""
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq", "bits": 4}}))
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"source": {"repo_id": "org/model", "path": "/data/bf16"}}))
    with pytest.raises(CloverError, match=r"^P is a quantized pack \(GPTQ INT4\); needs BF16 \(org/model\)$"):
        loader.refuse_pack(tmp_path, "P", "needs BF16")


def _config(**generation):
    return parse_config(tiny_config_dict(TinySpec(vocab_size=100, mask_token_id=None, eos_token_id=7)), generation)


def test_the_mask_token_is_the_configs_and_inside_the_vocabulary():
    """The config's (generation_config's) mask id wins over the tokenizer's guess; an id equal to the vocabulary
    size is already outside it."""
    tok = ChatTokenizer(_word_tokenizer(("[MASK]", True)), {})
    assert loader.resolve_mask_token(_config(mask_token_id=42), tok) == 42
    assert loader.resolve_mask_token(_config(), tok) == tok.token_to_id("[MASK]")
    assert loader.resolve_mask_token(_config(mask_token_id=99), tok) == 99
    with pytest.raises(CloverError, match="mask_token_id 100 is outside the vocabulary of 100"):
        loader.resolve_mask_token(_config(mask_token_id=100), tok)


def test_generation_stops_on_the_configs_eos_ids_too():
    """The stop ids are the tokenizer's and the config's, each once."""
    tok = ChatTokenizer(_word_tokenizer(("<|im_end|>", True)), {})
    im_end = tok.token_to_id("<|im_end|>")
    done = loader.Loaded(Path("."), _config(eos_token_id=[im_end, 61]), tok, None, 1, 100)
    assert done.stop_token_ids == [im_end, 61, 7]


def test_the_runtime_context_is_capped_by_the_model():
    """`runtime="auto"` never sizes a KV cache past what the model can use, whatever --context asks."""
    cfg = _config()
    cfg.max_position_embeddings = 96
    assert loader.auto_runtime(cfg, None, 4096).context == 96
    assert loader.auto_runtime(cfg, None, 64).context == 64
    assert loader.auto_runtime(cfg, None, None).context == 96


def test_the_release_shapes_are_those_the_model_card_lists():
    """The shape table at the 35B release's config (docs/clover-model.md, "Checkpoint tensors"): the synthetic
    checkpoints are written from this same table, so only fixed numbers catch a wrong row."""
    from clover_local.checkpoint.names import global_shapes
    from clover_local.checkpoint.synthetic import REAL_SPEC

    cfg = parse_config(tiny_config_dict(REAL_SPEC))
    gdn, attn = layer_shapes(cfg, 0), layer_shapes(cfg, 3)
    assert {k: v for k, v in gdn.items() if k.startswith("linear_attn.")} == {
        "linear_attn.in_proj_qkv.weight": (8192, 2048), "linear_attn.in_proj_z.weight": (4096, 2048),
        "linear_attn.in_proj_b.weight": (32, 2048), "linear_attn.in_proj_a.weight": (32, 2048),
        "linear_attn.conv1d.weight": (8192, 1, 4), "linear_attn.dt_bias": (32,), "linear_attn.A_log": (32,),
        "linear_attn.norm.weight": (128,), "linear_attn.out_proj.weight": (2048, 4096),
        "linear_attn.conv_right_weight": (8192, 3), "linear_attn.bd_softmax_logit_scale": (32,),
        "linear_attn.bd_softmax_history_bias": (32,), "linear_attn.bd_softmax_history_c": (32,)}
    assert {k: v for k, v in attn.items() if k.startswith("self_attn.")} == {
        "self_attn.q_proj.weight": (8192, 2048), "self_attn.k_proj.weight": (512, 2048),
        "self_attn.v_proj.weight": (512, 2048), "self_attn.o_proj.weight": (2048, 4096),
        "self_attn.q_norm.weight": (256,), "self_attn.k_norm.weight": (256,)}
    for shapes in (gdn, attn):
        assert {k: v for k, v in shapes.items() if k.startswith(("mlp.", "input_", "post_"))} == {
            "input_layernorm.weight": (2048,), "post_attention_layernorm.weight": (2048,),
            "mlp.gate.weight": (256, 2048), "mlp.experts.gate_up_proj": (256, 1024, 2048),
            "mlp.experts.down_proj": (256, 2048, 512), "mlp.shared_expert.gate_proj.weight": (512, 2048),
            "mlp.shared_expert.up_proj.weight": (512, 2048), "mlp.shared_expert.down_proj.weight": (2048, 512),
            "mlp.shared_expert_gate.weight": (1, 2048)}
    assert [cfg.is_attention(i) for i in range(8)] == [False, False, False, True] * 2
    assert global_shapes(cfg) == {"embed_tokens.weight": (248320, 2048), "norm.weight": (2048,),
                                  "lm_head.weight": (248320, 2048)}


def test_a_pack_loaded_whole_holds_its_dequantized_weights(tmp_path, tokenizer_dir):
    """`load(pack)` without the runtime (`--no-offload`, the reference path) reads the pack through the pack
    reader: the model holds the dequantized experts, not a refusal about tensor names."""
    import shutil

    from tests.conftest import tokenizer_spec

    want = _write_pack(tmp_path / "pack", tokenizer_spec(tokenizer_dir))
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, tmp_path / "pack" / f.name)
    params = dict(loader.load(str(tmp_path / "pack"), "cpu", "float32").model.named_parameters())
    for name in ("layers.1.mlp.experts.gate_up_proj", "layers.3.mlp.experts.down_proj", "lm_head.weight"):
        assert torch.equal(params[name], want[name]), name


def test_load_applies_the_context_cap_and_the_chat_template(make_checkpoint):
    """--context caps the model's context on the plain path (prompt plus answer are checked against it), one past
    the model's own limit is refused, and --chat-template replaces the model's own template."""
    folder = make_checkpoint(seed=2)
    loaded = loader.load(str(folder), "cpu", "float32", context=48, chat_template="{{ messages[0].content }}!")
    assert loaded.config.max_context == 48 and loaded.model_context > 48
    assert loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == "hi!"
    with pytest.raises(CloverError, match=r"--context 200,000 is above this model's context of 131,072 tokens"):
        loader.load(str(folder), "cpu", "float32", context=200_000)


class _StreamedReader:
    """A streamed checkpoint's reader (`remote` set): layer 2's read fails, as a dropped connection would."""

    def __init__(self):
        import threading
        from types import SimpleNamespace

        self.remote = SimpleNamespace(stop=threading.Event())

    def layer_state(self, i):
        if i == 2:
            raise CloverError("layer 2's fetch failed")
        return {"i": torch.tensor([i])}


def test_a_streamed_layer_read_ahead_that_fails_reaches_the_caller():
    """The layer fetched ahead on a thread hands its failure to the caller when that layer's turn comes (not a
    None state, not a silent stop); layers before it come first; the fetch still in flight is told to stop."""
    reader = _StreamedReader()
    got = []
    with pytest.raises(CloverError, match="layer 2's fetch failed"):
        for i, state in layer_states(reader, 0, 4):
            got.append((i, int(state["i"])))
    assert got == [(0, 0), (1, 1)]


def test_a_streamed_checkpoint_whose_repo_lacks_a_listed_shard_is_refused(tmp_path):
    """`quantize --stream`: a shard the index lists but the Hub repo does not hold is named with the repo, before
    any byte range is fetched."""
    from types import SimpleNamespace

    folder = _ckpt(tmp_path, shards=2)
    shard = "model-00002-of-00002.safetensors"
    remote = SimpleNamespace(sizes={"model-00001-of-00002.safetensors": 10}, repo_id="org/bf16",
                             open=lambda name: pytest.fail("opened a shard"))
    with pytest.raises(CloverError, match=rf"shard {shard} listed in model\.safetensors\.index\.json is missing "
                                          r"from org/bf16"):
        CheckpointReader(folder, remote=remote)


def test_the_automatic_dtype_is_float32_on_the_cpu_and_bfloat16_on_a_gpu():
    """--dtype auto (or none): bfloat16 only where it is fast, on CUDA; the CPU computes in float32."""
    for name in (None, "", "auto"):
        assert loader.pick_dtype(name, torch.device("cpu")) == torch.float32
        assert loader.pick_dtype(name, torch.device("cuda")) == torch.bfloat16
    assert loader.pick_dtype("float16", torch.device("cpu")) == torch.float16


def test_the_offloading_runtime_refuses_a_bf16_checkpoint_with_the_way_to_a_pack(make_checkpoint):
    """Asking for the runtime (RuntimeOptions) on a BF16 checkpoint is refused up front, saying how to make a pack
    (only packs are offloaded), before any weight is read."""
    from clover_local.runtime.load import RuntimeOptions

    folder = make_checkpoint(seed=1)
    with pytest.raises(CloverError, match=r"is not a quantized pack: .* clover-local quantize .* --out PACK"):
        loader.load(str(folder), "cpu", "float32", runtime=RuntimeOptions(context=64))
