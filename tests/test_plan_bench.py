"""`clover-local plan` (placement from headers alone, refusals) and `clover-local bench --synthetic small`."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from clover_local.config import load_config
from clover_local.errors import CloverError
from clover_local.runtime.bench import bench_context
from clover_local.runtime.placement import expected_distinct, make_plan
from clover_local.runtime.sizes import GIB, MIB, parse_size
from conftest import read_json, run_cli
from runtime_pack import N_EXPERTS, N_LAYERS, TOP_K, pack  # noqa: F401 (fixture)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def test_sizes_and_expected_distinct():
    assert parse_size("16GB") == parse_size("16GiB") == parse_size("16") == 16 * GIB
    assert parse_size("900MB") == 900 * MIB and parse_size("1.5G") == int(1.5 * GIB) and parse_size("512B") == 512
    assert parse_size("0", allow_zero=True) == parse_size("0MB", allow_zero=True) == 0  # --park-prompts 0: off
    with pytest.raises(CloverError, match="--vram"):
        parse_size("lots", "--vram")
    # 32 rows × top 8 of 256, uniform: ≈163 distinct experts per layer
    assert expected_distinct(256, 8, 32) == pytest.approx(256 * (1 - (248 / 256) ** 32)) == pytest.approx(163.3, abs=0.1)
    g = torch.Generator().manual_seed(0)
    draws = [len(set(torch.rand(32, 256, generator=g).topk(8).indices.flatten().tolist())) for _ in range(200)]
    assert sum(draws) / len(draws) == pytest.approx(expected_distinct(256, 8, 32), rel=0.02)


def test_plan_json_from_headers(pack, capsys):
    assert run_cli(["plan", pack, "--vram", "1GB", "--ram", "8GB", "--context", "4096", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["fits"] and p["refusal"] is None
    assert p["experts_total"] == N_EXPERTS * N_LAYERS == p["slots"]  # 1 GiB holds every tiny expert
    assert p["host_expert_bytes"] == 0  # all resident: no host copy
    assert p["distinct_per_layer"] == pytest.approx(expected_distinct(N_EXPERTS, TOP_K, 8))
    kinds = {line["what"] for line in p["lines"]}
    assert {"attention", "GDN", "shared experts", "routers", "lm_head", "KV cache", "GDN states", "expert slots",
            "routed experts", "embeddings"} <= kinds
    emb = [line for line in p["lines"] if line["what"] == "embeddings"][0]
    assert emb["where"] == "host"
    kv = [line for line in p["lines"] if line["what"] == "KV cache"][0]
    cfg = read_json(pack / "config.json")
    assert kv["bytes"] == 1 * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 4096 * 2  # 1 attention layer, bf16
    assert run_cli(["plan", pack, "--vram", "1GB", "--ram", "8GB"]) == 0
    assert "expert slots" in capsys.readouterr().out


def test_plan_refusals(pack, tmp_path, capsys):
    assert run_cli(["plan", pack, "--vram", "256KB", "--ram", "8GB"]) == 2
    line = one_line_error(capsys)
    assert "--vram" in line and "too small" in line and "raise --vram to at least" in line
    # the least amount a refusal names is enough (rounded up, not to the nearest: 3 digits of 1.0004 GiB is 1 GiB)
    least = re.search(r"raise --vram to at least (\S+) (\S+)", line)
    assert run_cli(["plan", pack, "--vram", "".join(least.groups()), "--ram", "8GB"]) == 0, line
    capsys.readouterr()
    # experts partly on the host, and a --ram too small for them
    from clover_local.runtime.pack_index import read_pack_index

    info = read_pack_index(pack)
    base = make_plan(info, 1 * GIB, None, 4096)
    vram = base.device_fixed + base.workspace + 12 * base.slab_bytes
    assert run_cli(["plan", pack, "--vram", f"{vram}B", "--ram", "300MB", "--context", "4096"]) == 2
    line = one_line_error(capsys)
    assert "not enough host RAM" in line and "--ram" in line
    least = re.search(r"use a machine with at least (\S+) (\S+)", line)
    assert run_cli(["plan", pack, "--vram", f"{vram}B", "--ram", "".join(least.groups()), "--context", "4096"]) == 0
    capsys.readouterr()
    # a pack missing one expert tensor
    bad = tmp_path / "bad"
    shutil.copytree(pack, bad)
    index = read_json(bad / "model.safetensors.index.json")
    gone = "model.layers.2.mlp.experts.5.down_proj.scales"
    from safetensors.torch import load_file, save_file

    shard = bad / index["weight_map"].pop(gone)
    tensors = load_file(str(shard))
    del tensors[gone]
    save_file(tensors, str(shard), metadata={"format": "pt"})
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    assert run_cli(["plan", bad, "--vram", "1GB"]) == 2
    line = one_line_error(capsys)
    assert "missing model.layers.2.mlp.experts.5.down_proj.scales" in line


def test_plan_names_a_shard_missing_from_the_pack(pack, tmp_path, capsys):
    bad = tmp_path / "bad"
    shutil.copytree(pack, bad)
    gone = sorted(bad.glob("model-*.safetensors"))[0]
    gone.unlink()
    assert run_cli(["plan", bad, "--vram", "1GB"]) == 2
    assert f"pack shard {gone.name} is missing from {bad}" in one_line_error(capsys)


@pytest.mark.parametrize("bits", [4, 3, 8])
def test_plan_of_a_checkpoint_is_the_plan_of_the_pack_quantize_makes_of_it(bits, tmp_path_factory, tokenizer_dir,
                                                                           capsys):
    """`plan CHECKPOINT` said "not a quantized pack": it now plans the pack `quantize [--bits 3]` would make, from
    the config alone — the same plan, byte for byte, as the pack quantize made of that checkpoint."""
    from runtime_pack import tiny_pack

    made = tiny_pack(tmp_path_factory, tokenizer_dir, bits)
    src = made.parent / "src"
    args = ["--vram", "1GB", "--ram", "8GB", "--context", "4096", "--json"]
    assert run_cli(["plan", str(made), *args]) == 0
    want = json.loads(capsys.readouterr().out)
    assert run_cli(["plan", str(src), *args, *(["--bits", str(bits)] if bits != 4 else [])]) == 0
    got = json.loads(capsys.readouterr().out)
    planned = got.pop("planned_as_pack")
    assert got == {**want, "model": str(src)}
    assert planned["bits"] == bits and planned["profile"] == "balanced"
    assert planned["pack_bytes"] == sum(p.stat().st_size for p in made.glob("*.safetensors")) - sum(
        8 + int.from_bytes(p.read_bytes()[:8], "little") for p in made.glob("*.safetensors"))  # the tensors' bytes
    assert planned["command"] == f"clover-local quantize {src} --out PACK" + (f" --bits {bits}" if bits != 4 else "")
    # what quantize writes while it runs, by the figures of its own disk check: the pack with its headers (at least
    # the shards it made, at most an entry of 200 bytes a tensor more), and twice the file --resume starts from at
    # its default calibration on a GPU (128 × 2048 tokens, clean and noisy, bf16; the KL's 4 × 512 held-out tokens,
    # four float32 streams)
    hidden = load_config(src).hidden_size
    inputs = 128 * 2048 * 2 * hidden * 2 + 4 * 512 * 4 * hidden * 4
    assert planned["resume_input_bytes"] == inputs
    shards = list(made.glob("*.safetensors"))
    on_disk = sum(p.stat().st_size for p in shards)
    tensors = sum(len(json.loads(p.read_bytes()[8:8 + int.from_bytes(p.read_bytes()[:8], "little")])) - 1
                  for p in shards)
    assert on_disk <= planned["disk_bytes"] - 2 * inputs <= on_disk + 200 * tensors
    assert run_cli(["plan", str(src), "--vram", "1GB", "--ram", "8GB"]) == 0
    assert "on --out's disk" in " ".join(capsys.readouterr().out.split())
    # --bits / --profile choose a checkpoint's pack: refused for a pack, out of range, or unknown
    assert run_cli(["plan", str(made), "--vram", "1GB", "--bits", "3"]) == 2
    assert "--bits applies to a BF16 checkpoint" in one_line_error(capsys)
    assert run_cli(["plan", str(src), "--vram", "1GB", "--bits", "5"]) == 2
    assert "--bits must be 3, 4 or 8" in one_line_error(capsys)
    assert run_cli(["plan", str(src), "--vram", "1GB", "--profile", "nope"]) == 2
    assert "unknown profile 'nope'" in one_line_error(capsys)


def test_plan_synthetic_real_shapes(capsys, monkeypatch):
    """The real Clover shapes, from the synthetic pack's description (nothing written)."""
    from clover_local.runtime.synthetic_pack import synthetic_index

    info = synthetic_index("full")
    p = make_plan(info, 16 * GIB, 32 * GIB, 32768)
    assert p.fits and p.slab_bytes == 1_634_304 and p.experts_total == 10_240
    assert 0.6 < p.resident_fraction < 0.95
    assert p.block_set == pytest.approx(40 * 163.3, rel=1e-3)
    # a block's later pass: the set fits the slots; the 3 rows it reveals route anew, 8 experts a layer each, and
    # those not on the device cross once (cache_sim at 8,860 slots: 3.95 ms; this rule 4.23 ms there)
    assert p.slots > p.block_set
    assert p.pcie_later_pass == pytest.approx(3 * 8 * 40 * (1 - p.slots / 10_240) * 1_634_304, rel=1e-6)
    assert p.host_expert_bytes == 8 * 2**31  # 16.74 GB of experts pinned in 2 GiB chunks of 5 layers (expert_store)
    # a 512-row prefill chunk needs ≈ every expert: it copies those beyond the slots (cache_sim's bound)
    assert p.prefill_chunk == 512
    assert p.pcie_prefill_chunk == pytest.approx((10_240 - p.slots) * 1_634_304, rel=1e-3)
    # experts run on the CPU are kept converted: host RAM for them, not device memory; past --ram it refuses
    cpu = make_plan(info, 16 * GIB, 32 * GIB, 32768, cpu_cache=2 * GIB)
    assert cpu.host_bytes == p.host_bytes + 2 * GIB and cpu.slots == p.slots
    assert any(line.what == "CPU-run experts" and line.bytes == 2 * GIB for line in cpu.lines)
    tight = make_plan(info, 16 * GIB, p.host_bytes + GIB, 32768, cpu_cache=2 * GIB)
    assert not tight.fits and "converted for the CPU" in tight.refusal
    # serve's parked prompts (--park-prompts) are host RAM too: counted, named when they do not fit
    parked = make_plan(info, 16 * GIB, 32 * GIB, 32768, parked=2 * GIB)
    assert parked.host_bytes == p.host_bytes + 2 * GIB and parked.slots == p.slots
    assert any(line.what == "parked prompts" and line.bytes == 2 * GIB for line in parked.lines)
    tight = make_plan(info, 16 * GIB, p.host_bytes + GIB, 32768, parked=2 * GIB)
    assert not tight.fits and "2 GiB of parked prompts" in tight.refusal and "lower --park-prompts" in tight.refusal
    small = make_plan(info, 2 * GIB, 32 * GIB, 32768)
    assert not small.fits and "--vram" in small.refusal
    assert run_cli(["plan", "synthetic:small", "--vram", "1GB", "--ram", "8GB", "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone["experts_total"] == 64
    assert run_cli(["plan", "synthetic:small", "--vram", "1GB", "--ram", "8GB", "--park-prompts", "1GB", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["host_bytes"] == alone["host_bytes"] + GIB
    # --prefill-chunk: a longer chunk's activations take slots; per prompt token it copies fewer experts
    plans = []
    for rows in (512, 2048):
        assert run_cli(["plan", "synthetic:full", "--vram", "16GB", "--ram", "32GB", "--prefill-chunk", str(rows),
                        "--json"]) == 0
        plans.append(json.loads(capsys.readouterr().out))
    short, long = plans
    assert short["slots"] == p.slots and long["prefill_chunk"] == 2048 and long["slots"] < short["slots"]
    assert long["workspace"] > short["workspace"]
    assert long["pcie_prefill_chunk"] / 2048 < short["pcie_prefill_chunk"] / 512
    assert run_cli(["plan", "synthetic:full", "--vram", "16GB", "--prefill-chunk", "0"]) == 2
    assert one_line_error(capsys) == "error: --prefill-chunk must be at least 1, got 0"
    # CLOVER_PREFILL_SPAN (what the runtime runs) is what plan prices: one chunk a pass holds less workspace
    monkeypatch.setenv("CLOVER_PREFILL_SPAN", "512")
    assert run_cli(["plan", "synthetic:full", "--vram", "16GB", "--ram", "32GB", "--json"]) == 0
    one_chunk = json.loads(capsys.readouterr().out)
    assert one_chunk["prefill_span"] == 512 and short["prefill_span"] == 4096
    assert one_chunk["workspace"] < short["workspace"] and one_chunk["slots"] > short["slots"]
    monkeypatch.setenv("CLOVER_PREFILL_SPAN", "lots")
    assert run_cli(["plan", "synthetic:full", "--vram", "16GB"]) == 2
    assert "CLOVER_PREFILL_SPAN must be a whole number" in one_line_error(capsys)


def test_a_cache_root_that_is_a_file_is_one_line_for_the_synthetic_pack(tmp_path, monkeypatch, capsys):
    """CLOVER_LOCAL_CACHE naming a file: writing the synthetic pack was a NotADirectoryError traceback."""
    afile = tmp_path / "not-a-folder"
    afile.write_text("x", encoding="utf-8")
    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(afile))
    assert run_cli(["bench", "--synthetic", "small", "--passes", "1", "--device", "cpu"]) == 2
    line = one_line_error(capsys)
    assert "cannot make the synthetic pack's folder" in line and "Not a directory" in line
    assert "set CLOVER_LOCAL_CACHE to a folder you can write" in line


def test_bench_synthetic_small_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    args = ["bench", "--synthetic", "small", "--prefix", "64", "--passes", "3", "--device", "cpu", "--json"]
    assert run_cli(args) == 0
    out, err = capsys.readouterr()
    r = json.loads(out)
    # written once: where it is kept and how to free it, said on stderr (stdout stays one JSON object)
    assert "`clover-local cache rm synthetic/small-v1` frees it" in err
    for key in ("ms_per_pass", "ms_per_pass_first", "tokens_per_s", "tokens_per_pass", "hit_rate", "pcie_gbps",
                "pcie_bytes", "device_bytes_per_pass", "roofline_ms", "roofline_ratio", "projection_5070ti",
                "components", "memory", "device_name", "date"):
        assert key in r, key
    assert r["tokens_per_pass"] == 3.0 and r["tokens_per_pass_source"].startswith("assumed")
    assert r["tokens_per_s"] == pytest.approx(3.0 * 1e3 / r["ms_per_pass"], rel=1e-2)
    assert r["ms_per_call"] >= r["ms_per_pass"]  # each call holds its pass, then the LM head and the booking
    assert r["slots"] == r["experts_total"] == 64 and r["hit_rate"] == 1.0
    c = r["cache"]  # the counters' identity, as a reader of the JSON checks it
    assert c["misses"] == c["copied"] - c["repair_unused"] + c["cpu_runs"] + c["host_reads"]
    assert abs(r["memory"]["plan_error"]) < 0.05
    comps = {c["component"] for c in r["components"]}
    assert {"routed experts", "GDN core", "attention core", "lm_head"} <= comps
    assert r["projection_5070ti"]["ms_per_pass"] > 0
    commits = r["commits"]["each"]  # no CUDA graphs on a CPU: two eager commits, all experts resident
    assert len(commits) == 2 and all(c["ms"] > 0 and not c["graphed"] and c["misses"] == 0 for c in commits)
    assert r["commits"]["graphs"]["enabled"] is False and r["next_block"]["commit_ms"] == commits[1]["ms"]
    mg = r["merged"]  # three commits merged with the next block's first preview: eager, all resident
    assert [m["misses"] for m in mg["each"]] == [0, 0, 0] and not any(m["graphed"] for m in mg["each"])
    assert mg["ms"] == mg["each"][-1]["ms"] > 0 and mg["separate_ms"] > 0 and not mg["replayed"]
    assert 0 < mg["uses_vs_separate"][0] <= mg["uses_vs_separate"][1]  # one pass reads their union
    assert mg["block_ms"] > mg["ms"] and mg["tokens_per_s"] > 0
    assert (tmp_path / "cache" / "synthetic" / "small-v1" / ".complete").is_file()
    pf = r["prefill"]  # the prefix's prefill, timed and split (no warm-up on a CPU: nothing compiles)
    assert pf["chunks"] == 1 and pf["warmup_ms"] is None and pf["tokens_per_s"] > 0
    assert pf["cache"] == {"misses": 0, "copied": 0, "prefetched": 0, "prefetch_wasted": 0, "bytes_h2d": 0}
    assert {"routed experts", "GDN core", "attention core"} <= {c["component"] for c in pf["components"]}
    assert 0 < sum(c["ms"] for c in pf["components"]) <= r["prefill_ms"]

    # a budget that holds 24 of the 64 experts with 32-row prefill chunks: offloaded, and the block's later
    # passes still hit; the 64-token prefix is prefilled in two chunks
    from clover_local.runtime.synthetic_pack import synthetic_index

    info = synthetic_index("small")
    base = make_plan(info, GIB, None, bench_context(64, 32), torch.float32, prefill_chunk=32)
    budget = base.device_fixed + base.workspace + 24 * base.slab_bytes
    assert run_cli(args[:-1] + ["--vram-budget", f"{budget}B", "--prefill-chunk", "32", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["slots"] == 24 and r["memory"]["host_experts"] == 64 * base.slab_bytes
    assert r["prefill"]["chunks"] == 2
    assert r["misses_first_pass"] > 0 and r["pcie_bytes"] > 0
    c = r["prefill"]["cache"]  # the slots start warm (24 experts): the prefill copies only what it lacks
    assert c["bytes_h2d"] == (c["copied"] + c["prefetched"]) * base.slab_bytes and c["misses"] == c["copied"]
    assert c["copied"] + c["prefetched"] <= 64 * 2  # each chunk copies at most the experts it lacks
    assert abs(r["memory"]["plan_error"]) < 0.05


def test_bench_uniform_routing_and_graph_profile_pairing(tmp_path, monkeypatch):
    """`--routing uniform` gives every block row random experts (more distinct experts than the model's own
    routing of a random model, never fewer than top-k); the graph profile pairs with the eager one call by call."""
    from clover_local.runtime import bench
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    folder = ensure_synthetic("small")
    kw = dict(label="s", synthetic=True, vram_budget=None, prefix=32, passes=3, device=torch.device("cpu"),
              dtype=torch.float32)
    model_r = bench.run_bench(folder, **kw)
    uniform = bench.run_bench(folder, routing="uniform", **kw)
    assert uniform["routing"] == "uniform"
    assert uniform["distinct_experts_per_pass"] > model_r["distinct_experts_per_pass"]
    assert model_r["graph_profile"] == "no CUDA graphs here" and model_r["projection_5070ti_graph_components"] is None
    with pytest.raises(CloverError, match="--routing"):
        bench.run_bench(folder, routing="random", **kw)
    reveal = bench.run_bench(folder, routing="uniform-reveal", **kw)
    assert reveal["routing"] == "uniform-reveal" and reveal["repairs_per_steady_pass"] == 0  # no graphs on CPU
    assert reveal["synced_steady_passes"] == 0  # every expert resident: nothing to miss

    # revealed rows get new experts, the others keep theirs, in the same tensors (a graph reads them)
    model_u = bench.load_packed_model(folder, torch.device("cpu"), torch.float32, bench.RuntimeOptions(context=128))
    routing = bench.UniformRouting(model_u, 32)
    before = routing.idx
    ptrs = [r.data_ptr() for r in routing.ranks]
    routing.redraw_rows(slice(3, 6), seed=7)
    assert [r.data_ptr() for r in routing.ranks] == ptrs
    assert all(torch.equal(a[:3], b[:3]) and torch.equal(a[6:], b[6:]) for a, b in zip(routing.idx, before))
    assert any(not torch.equal(a[3:6], b[3:6]) for a, b in zip(routing.idx, before))
    # a merged pass: its commit rows keep the block's experts, its preview rows get the next block's, which the
    # next block's passes then keep
    block = routing.idx
    routing.redraw_merged(seed=8)
    assert [r.data_ptr() for r in routing.ranks] == ptrs
    for m, old, new, k in zip(routing.merged, block, routing.idx, routing.top_k):
        top = m.topk(k, -1).indices
        assert torch.equal(top[:32], old) and torch.equal(top[32:], new) and not torch.equal(new, old)
    routing.close()

    # pairing: the same calls' times as a "graph" profile give graph_ms equal to ms and the same projection
    from clover_local.runtime.load import RuntimeOptions, load_packed_model

    model = load_packed_model(folder, torch.device("cpu"), torch.float32, RuntimeOptions(context=128))
    prof = bench.ComponentProfiler(model, model.runtime, torch.device("cpu"), 0)
    with torch.inference_mode():
        model(torch.tensor([[1, 2, 3, 4]]), model.new_cache())
    prof.close()
    own = prof.own_seconds()
    rows, projected, projected_graph = prof.components(1e11, own)
    assert projected_graph == pytest.approx(projected)
    assert all(r["graph_ms"] == pytest.approx(r["ms"], abs=1e-3) for r in rows)
    assert prof.components(1e11, own[:-1])[2] is None  # different calls: never paired
    assert sum(r["calls"] for r in rows if r["component"] == "rest (norms, residuals)") == 4  # one per layer


def test_component_profile_splits_a_call_into_its_launchers_segments(tmp_path, monkeypatch):
    """Marks from a kernel launcher (`segments.segment`) inside a hooked call become child rows "<call>: <name>"
    with their share of the call's bytes; the call's row keeps its own time and the bytes left; the bytes in all
    add up to the call's; a mark outside any hooked call, or with no profiler listening, does nothing."""
    from clover_local.runtime import bench, offload, segments
    from clover_local.runtime.load import RuntimeOptions, load_packed_model
    from clover_local.runtime.synthetic_pack import ensure_synthetic

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    model = load_packed_model(ensure_synthetic("small"), torch.device("cpu"), torch.float32,
                              RuntimeOptions(context=128))
    model.runtime.optimistic = False  # the syncing path, as bench's profiled pass: bytes from per-layer counters
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])

    def profile() -> dict[str, dict]:
        prof = bench.ComponentProfiler(model, model.runtime, torch.device("cpu"), 0)
        try:
            segments.segment("outside")  # no hooked call on the stack: ignored
            with torch.inference_mode():
                model(ids, model.new_cache())
        finally:
            prof.close()
        assert not any(f.category.endswith("outside") for f in prof.frames)
        return {r["component"]: r for r in prof.components(1e11)[0]}

    plain = profile()
    real = offload.moe_w4a16

    def named(*args, **kw):
        segments.segment("align")
        segments.segment("gate/up", 0.75)
        segments.segment("down", 0.25)
        out = real(*args, **kw)
        segments.segment("sum")
        return out

    monkeypatch.setattr(offload, "moe_w4a16", named)  # the syncing path's call
    split = profile()
    parts = [f"routed experts: {n}" for n in ("align", "gate/up", "down", "sum")]
    assert set(parts) <= set(split) and not set(parts) & set(plain)
    assert all(split[p]["calls"] == N_LAYERS_SMALL for p in parts)  # one call a layer
    whole = plain["routed experts"]["bytes"]
    assert whole > 0 and sum(split[p]["bytes"] for p in ["routed experts", *parts]) == whole
    assert split["routed experts: gate/up"]["bytes"] == pytest.approx(0.75 * whole, abs=N_LAYERS_SMALL)
    assert split["routed experts: down"]["bytes"] == pytest.approx(0.25 * whole, abs=N_LAYERS_SMALL)
    assert split["routed experts: align"]["bytes"] == split["routed experts: sum"]["bytes"] == 0
    assert split["routed experts"]["bytes"] <= N_LAYERS_SMALL  # rounding only
    assert all(r["ms"] >= 0 for r in split.values())
    assert {"router and combine", "shared expert", "rest (norms, residuals)"} <= set(split)
    # one listener at a time: a profiler left unclosed (an exception between its start and its try) is replaced by
    # the next one, and closing the old one later does not silence the new; after close, marks go nowhere
    leaked = bench.ComponentProfiler(model, model.runtime, torch.device("cpu"), 0)
    prof = bench.ComponentProfiler(model, model.runtime, torch.device("cpu"), 0)
    leaked.close()
    assert segments._sink == prof._segment
    prof.close()
    prof.close()
    assert segments._sink is None
    segments.segment("nobody")


N_LAYERS_SMALL = 4  # the synthetic small pack's layers


def test_bench_reports_host_reads(tmp_path, monkeypatch):
    """Offloaded (24 of 64 experts), uniform-reveal routing: with host reads the steady passes' misses are read
    in place (none rerun, none synced); with --no-host-reads the report says they are off."""
    from clover_local.runtime import bench
    from clover_local.runtime.synthetic_pack import ensure_synthetic, synthetic_index

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    folder = ensure_synthetic("small")
    base = make_plan(synthetic_index("small"), GIB, None, bench_context(32, 32), torch.float32)
    budget = base.device_fixed + base.workspace + 24 * base.slab_bytes
    kw = dict(label="s", synthetic=True, vram_budget=budget, prefix=32, passes=4, device=torch.device("cpu"),
              dtype=torch.float32, routing="uniform-reveal")
    on = bench.run_bench(folder, host_reads=True, **kw)
    assert on["slots"] == 24 and on["host_reads"]["on"] and on["host_reads"]["error"] is None
    assert on["host_reads_per_steady_pass"] > 0 and on["repairs_per_steady_pass"] == 0
    assert on["synced_steady_passes"] == 0
    # reading through (the default with host reads; here, at 24 of 64 slots, a block pins every resident expert,
    # so no slot is offered: `test_host_reads` shows the copies themselves)
    assert on["host_reads"]["read_through_on"]
    assert on["host_reads"]["read_through_per_steady_pass"] <= on["host_reads_per_steady_pass"]
    plain = bench.run_bench(folder, host_reads=True, read_through=False, **kw)
    assert not plain["host_reads"]["read_through_on"] and plain["host_reads"]["read_through_per_steady_pass"] == 0
    off = bench.run_bench(folder, host_reads=False, **kw)
    assert off["host_reads"] == {"on": False, "error": "off (--no-host-reads)", "first_pass": 0,
                                 "read_through_on": False, "read_through_error": "no host reads",
                                 "read_through_first_pass": 0,
                                 "read_through_per_steady_pass": 0.0}
    assert off["host_reads_per_steady_pass"] == 0
    assert not off["resident_routing"] and off["substituted_per_steady_pass"] == 0
    # resident routing: the rerouted rows choose among resident experts, so the steady passes miss nothing (at
    # 52 slots every layer keeps top-k experts to choose from after the block's first pass; at 24 or 48 one
    # does not, and chooses freely)
    kw["vram_budget"] = base.device_fixed + base.workspace + 52 * base.slab_bytes
    rr = bench.run_bench(folder, host_reads=False, resident_routing=True, **kw)
    assert rr["resident_routing"] and rr["substituted_per_steady_pass"] > 0
    assert rr["misses_per_steady_pass"] == 0 and rr["repairs_per_steady_pass"] == 0


def test_bench_variants_on_one_load_report_what_separate_loads_do(tmp_path, monkeypatch):
    """`run_variants` (gpu_check's routings stage: four routing variants on one 35B load) starts each variant
    from the state a load leaves: every counter, miss and host read of each variant equals a fresh load's."""
    from clover_local.runtime import bench
    from clover_local.runtime.synthetic_pack import ensure_synthetic, synthetic_index

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    folder = ensure_synthetic("small")
    base = make_plan(synthetic_index("small"), GIB, None, bench_context(32, 32), torch.float32)
    kw = dict(label="s", synthetic=True, vram_budget=base.device_fixed + base.workspace + 52 * base.slab_bytes,
              prefix=32, passes=4, device=torch.device("cpu"), dtype=torch.float32)
    variants = {"reveal": dict(routing="uniform-reveal", host_reads=True),
                "repair": dict(routing="uniform-reveal", host_reads=False),
                "resident": dict(routing="uniform-reveal", host_reads=False, resident_routing=True),
                "model": dict(prefetch=False)}
    got = bench.run_variants(folder, variants, **kw)
    assert list(got) == list(variants)
    keys = ("slots", "misses_first_pass", "misses_per_steady_pass", "host_reads_per_steady_pass", "host_reads",
            "resident_routing", "substituted_per_steady_pass", "distinct_experts_per_pass", "pcie_bytes", "cache",
            "optimistic", "hit_rate", "hit_rate_first_pass")
    for name, options in variants.items():
        fresh = bench.run_bench(folder, **kw, **options)
        assert {k: got[name][k] for k in keys} == {k: fresh[k] for k in keys}, name
        assert [c["misses"] for c in got[name]["commits"]["each"]] == [c["misses"] for c in fresh["commits"]["each"]]
        assert got[name]["load_s"] > 0 and got[name]["variant"] == name
    assert got["reveal"]["host_reads_per_steady_pass"] > 0 and got["resident"]["substituted_per_steady_pass"] > 0


def test_gpu_check_routings_stage_writes_each_variants_bench_json(tmp_path, monkeypatch):
    """gpu_check's routings stage writes the bench JSONs of gpu_session.sh's routing stages (and one more:
    reveal without read-through), which docs/gpu_summary.py reads as it reads theirs."""
    import subprocess
    import sys

    from clover_local.runtime import gpu_check

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "routings"
    out.mkdir()
    r = gpu_check.stage_routings(torch.device("cpu"), out, kind="small", prefix=32, passes=3)
    assert r["ok"] and set(gpu_check.ROUTING_VARIANTS) <= set(r)
    for name, options in gpu_check.ROUTING_VARIANTS.items():
        data = json.loads((out / f"{name}.json").read_text())
        assert data["routing"] == options["routing"] and data["variant"] == name and data["ms_per_pass"] > 0
    summary = subprocess.run([sys.executable, "docs/gpu_summary.py", str(tmp_path)], capture_output=True, text=True,
                             cwd=Path(__file__).parents[1])
    assert summary.returncode == 0 and summary.stdout.count("(bench, ") == len(gpu_check.ROUTING_VARIANTS), \
        summary.stdout


def test_gpu_check_finite_stage_names_the_first_non_finite_module(tmp_path, monkeypatch):
    """gpu_check's finite stage on the small synthetic pack: every pass finite, every variant run and finite;
    with one GDN layer's output projection made to return NaN from the second pass on, the stage names that
    module as the first non-finite output of that pass (not a module after it), the passes before it finite,
    and the partial JSON gpu_summary reads."""
    import subprocess
    import sys

    from clover_local.runtime import gpu_check
    from clover_local.runtime.packed_linear import PackedLinear

    monkeypatch.setenv("CLOVER_LOCAL_CACHE", str(tmp_path / "cache"))
    r = gpu_check.stage_finite(torch.device("cpu"), kind="small", prompt=40, variants=True)
    variants = ("default", "unfused", "unpacked", "unswapped", "swapped", "syncing")
    assert r["ok"] and r["finite_variants"] == list(variants), r
    assert all(p["outputs"] > 0 and p["non_finite"] == 0 and len(p["layer_max"]) == N_LAYERS
               for v in variants for p in r[v].values())
    calls = {"n": 0}
    real = PackedLinear.forward

    def poisoned(self, x):
        y = real(self, x)
        if self.out_features == y.shape[-1] and getattr(self, "poison", False):
            calls["n"] += 1
            if calls["n"] > 1:
                return y.fill_(float("nan"))
        return y

    from clover_local.runtime.load import load_packed_model

    orig_load = load_packed_model

    def load_and_mark(*a, **k):
        model = orig_load(*a, **k)
        model.layers[1].linear_attn.out_proj.poison = True
        return model

    monkeypatch.setattr(PackedLinear, "forward", poisoned)
    monkeypatch.setattr("clover_local.runtime.load.load_packed_model", load_and_mark)
    out = tmp_path / "finite"
    out.mkdir()
    r = gpu_check.stage_finite(torch.device("cpu"), kind="small", prompt=40, variants=False, out_dir=out)
    d = r["default"]
    assert not r["ok"] and d["prompt"]["non_finite"] == 0, r
    assert d["preview"]["first_non_finite"] == "layers.1.linear_attn.out_proj" and d["preview"]["non_finite"] > 1
    summary = subprocess.run([sys.executable, "docs/gpu_summary.py", str(out)], capture_output=True, text=True,
                             cwd=Path(__file__).parents[1])
    assert "first layers.1.linear_attn.out_proj" in summary.stdout, summary.stdout


def test_bench_bad_input(capsys):
    assert run_cli(["bench"]) == 2
    assert "--synthetic" in one_line_error(capsys)
    assert run_cli(["bench", "--synthetic", "small", "--prefill-chunk", "-1"]) == 2
    assert one_line_error(capsys) == "error: --prefill-chunk must be at least 1, got -1"
    assert run_cli(["bench", "--synthetic", "huge"]) == 2
    assert "full, small" in one_line_error(capsys)


@pytest.fixture(scope="module")
def full_index():
    """The real Clover shapes' PackIndex (synthetic, nothing written), made once for the tests below."""
    from clover_local.runtime.synthetic_pack import synthetic_index

    return synthetic_index("full")


@pytest.mark.parametrize("kind", ["small", "full"])
def test_plan_refuses_one_slot_short_of_a_layers_experts_and_fits_at_exactly_that(kind, request):
    """The fewest slots a budget may leave is `min_slots` (one layer's experts a pass can need at once): a
    --vram whose slots come out one short is refused, naming that count; one slab more and it fits with exactly
    min_slots slots."""
    from clover_local.runtime.synthetic_pack import synthetic_index

    info = request.getfixturevalue("full_index") if kind == "full" else synthetic_index(kind)
    base = make_plan(info, 64 * GIB, None, 4096)
    fixed, slab, need = base.device_fixed + base.workspace, base.slab_bytes, base.min_slots
    # a 32-row pass routes 32 × top_k choices a layer: enough to reach every expert (8 × 32 ≥ 256, 4 × 32 ≥ 16)
    assert need == info.config.num_experts < base.experts_total
    short = make_plan(info, fixed + need * slab - 1, None, 4096)
    assert not short.fits and short.slots == need - 1
    assert f"needs at least {need}" in short.refusal
    with pytest.raises(CloverError):
        short.check()
    exact = make_plan(info, fixed + need * slab, None, 4096)
    assert exact.fits and exact.refusal is None and exact.slots == need
    assert exact.device_peak == fixed + need * slab


def test_a_prefill_pass_takes_at_least_one_chunk_however_short_the_span():
    """`prefill_rows`: a span shorter than the prefill chunk still takes a whole chunk a pass (never fewer rows
    than a chunk), and never more than the context; the plan prices what the runtime will run."""
    from clover_local.runtime.placement import prefill_rows
    from clover_local.runtime.synthetic_pack import synthetic_index

    assert prefill_rows(512, 128, 32768) == 512
    assert prefill_rows(512, 4096, 32768) == 4096
    assert prefill_rows(512, 4096, 2048) == 2048
    info = synthetic_index("small")
    plan = lambda span: make_plan(info, GIB, None, 4096, prefill_chunk=512, prefill_span=span, slots=20)  # noqa: E731
    p, one_chunk, longer = plan(128), plan(512), plan(2048)  # 20 of 64 experts: a prefill copies the rest
    assert p.prefill_chunk == p.prefill_span == one_chunk.prefill_span == 512
    assert p.workspace == one_chunk.workspace and p.pcie_prefill_chunk == one_chunk.pcie_prefill_chunk
    assert longer.prefill_span == 2048 and longer.workspace > p.workspace


def test_the_model_card_says_what_each_gpu_size_holds(pack, monkeypatch):
    """The card tells a person browsing the Hub what their card holds before downloading: `plan` of the pack at
    8 / 12 / 16 / 24 GiB with 32 GiB of RAM (here the tiny pack, then the 35B shapes through the synthetic full
    pack's index)."""
    import clover_local.runtime.pack_index as pack_index
    from clover_local.pack.card import card_for_pack, placement_rows
    from clover_local.runtime.synthetic_pack import synthetic_index

    text = str(card_for_pack(pack))
    assert "## Will it run on my GPU?" in text
    assert f"| 16 GiB | {N_EXPERTS * N_LAYERS} of {N_EXPERTS * N_LAYERS} (100%) | none | none |" in text
    full = synthetic_index("full")
    monkeypatch.setattr(pack_index, "read_pack_index", lambda folder: full)
    rows = {r["vram_gib"]: r for r in placement_rows(pack)}
    want = make_plan(full, 16 * GIB, 32 * GIB)
    assert rows[16]["slots"] == want.slots == 8428 and rows[24]["slots"] == 10240
    assert rows[8]["slots"] < rows[12]["slots"] < rows[16]["slots"]
    assert rows[16]["pcie_first_bytes"] == int(want.pcie_first_pass) > rows[16]["pcie_later_bytes"] > 0
    text = str(card_for_pack(pack))
    assert "| 16 GiB | 8,428 of 10,240 (82%) | 1.8 GiB | 264.8 MiB (≈ 6 ms at 50 GB/s) |" in text
    assert "| 24 GiB | 10,240 of 10,240 (100%) | none | none |" in text
