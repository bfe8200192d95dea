"""chat, generate and serve run a GPTQ pack through the offloading runtime by default: the same greedy tokens as
the dequantizing path (`--no-offload`), budget and flag errors as one `error:` line, `/stats` reading the
runtime's counters; and a turn that runs out of memory mid-answer leaves the chat going, its conversation as it
was before that turn. (Serve's side of that is in test_serve.py.)"""

from __future__ import annotations

import io
import json
import sys

import pytest
import torch

from clover_local.generate.block_diffusion import BlockDiffusionDecoder
from clover_local.generate.events import BlockCommitted
from clover_local.loader import AUTO, load
from runtime_pack import N_EXPERTS, N_LAYERS, pack  # noqa: F401 (fixture)
from tests.conftest import run_cli

GEN = ["--device", "cpu", "--dtype", "float32"]


@pytest.fixture
def placed(monkeypatch) -> list:
    """Every model `load_packed_model` builds (so a test can tell the runtime was used, and with what)."""
    import clover_local.runtime.load as runtime_load

    models: list = []
    real = runtime_load.load_packed_model

    def spy(*args, **kwargs):
        models.append(real(*args, **kwargs))
        return models[-1]

    monkeypatch.setattr(runtime_load, "load_packed_model", spy)
    return models


def one_error_line(capsys, code: int) -> str:
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def generate_json(capsys, pack, *extra: str) -> dict:
    args = ["generate", pack, "-p", "add 12+30", "--no-think", "--max-new-tokens", "12", "--json", *GEN, *extra]
    assert run_cli(args) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------------------------------------- loading


def test_load_auto_picks_the_runtime_for_packs_only(pack, make_checkpoint):
    rt = load(str(pack), "cpu", "float32", runtime=AUTO, context=64)
    assert rt.model.runtime is not None and rt.config.max_context == 64
    assert all(k.shape[2] == 64 for k, _ in rt.model.runtime.kv.values())  # the KV arena is sized by --context
    assert load(str(pack), "cpu", "float32").model.runtime is None  # None: the dequantizing path, as before
    plain = load(str(make_checkpoint()), "cpu", "float32", runtime=AUTO, context=100)
    assert plain.model.runtime is None and plain.config.max_context == 100


def test_the_load_line_says_where_the_experts_are(pack):
    """serve's log starts with where the load put the model: through the runtime, how many routed experts the
    device holds (all, or a share with the rest read from host RAM) and the bytes placed there; else the device and
    dtype of the whole model. The figures are the runtime's own."""
    import re

    from clover_local.runtime.sizes import fmt_bytes

    whole = load(str(pack), "cpu", "float32", runtime=AUTO, context=64)
    held = fmt_bytes(whole.model.runtime.placed_bytes(whole.model)["total"])
    assert whole.placement() == (f"loaded on cpu through the offloading runtime: all {N_EXPERTS * N_LAYERS} routed "
                                 f"experts on the device; {held} held there, context 64 tokens")
    rt = whole.model.runtime
    fixed = rt.plan.device_fixed + rt.plan.workspace
    part = load(str(pack), "cpu", "float32", runtime=AUTO, context=64,
                vram_budget=fixed + (N_EXPERTS * N_LAYERS // 2) * rt.plan.slab_bytes)
    slots = part.model.runtime.cache.n_slots
    assert 0 < slots < N_EXPERTS * N_LAYERS
    m = re.fullmatch(r"loaded on cpu through the offloading runtime: (\d+) of (\d+) routed experts on the device "
                     r"\((\d+)%\), the rest read from host RAM as passes need them; .+ held there, context 64 tokens",
                     part.placement())
    assert m and int(m[1]) == slots and int(m[2]) == N_EXPERTS * N_LAYERS, part.placement()
    plain = load(str(pack), "cpu", "float32", context=64)  # dequantized into a full model (--no-offload)
    assert plain.placement() == "loaded whole on cpu (float32), context 64 tokens"


def test_a_load_shows_its_layers_as_they_come_in(pack, monkeypatch):
    """`load_shown` (chat, generate, score, serve on a terminal) draws a bar of the decoder layers loaded, fed by
    the loader after each layer — through the runtime, the dequantizing path and a BF16 checkpoint alike — and
    draws nothing without a console (scripts, --json, logs), nor for a Hub repo id before its first layer (the
    download draws its own bars)."""
    from rich.console import Console

    from clover_local.commands._model_options import load_shown

    for model, runtime in ((str(pack), AUTO), (str(pack), None), ("tiny", AUTO)):
        seen: list[tuple[int, int]] = []
        loaded = load(model, "cpu", "float32", runtime=runtime, on_layer=lambda done, total: seen.append((done, total)))
        n = loaded.config.num_hidden_layers
        assert seen == [(i, n) for i in range(1, n + 1)], (model, runtime, seen)
        buf = io.StringIO()
        load_shown(model, "cpu", "float32", Console(file=buf, force_terminal=True, width=100), runtime=runtime)
        drawn = buf.getvalue()
        assert "loading" in drawn and f"{n}/{n}" in drawn and "layers" in drawn, drawn
    assert load_shown("tiny", "cpu", "float32", None).model is not None

    import clover_local.loader as loader
    from clover_local.errors import CloverError

    def fails(*args, **kwargs):
        raise CloverError("stopped before any layer")

    monkeypatch.setattr(loader, "load", fails)
    for model, drawn in (("someone/clover-35b-int4", False), ("tiny", True)):
        buf = io.StringIO()
        with pytest.raises(CloverError):
            load_shown(model, "cpu", "float32", Console(file=buf, force_terminal=True, width=100))
        assert bool(buf.getvalue().strip()) == drawn, (model, buf.getvalue())


def budget_for(pack, slots: int, context: int, **rows: int) -> str:
    """A --vram-budget that leaves room for `slots` expert slots (fewer than the pack's experts: offloading);
    `rows`: the plan's prefill_chunk / prefill_span when not the defaults."""
    from clover_local.runtime.pack_index import read_pack_index
    from clover_local.runtime.placement import make_plan

    plan = make_plan(read_pack_index(pack), 1 << 30, 8 << 30, context, torch.float32, **rows)
    return f"{plan.device_fixed + plan.workspace + slots * plan.slab_bytes + 1024}B"


def test_generate_through_the_runtime_matches_no_offload(pack, placed, capsys):
    offloaded = generate_json(capsys, pack, "--vram-budget", budget_for(pack, 12, 256), "--context", "256")
    assert len(placed) == 1
    runtime = placed[0].runtime
    assert runtime.context == 256 and runtime.cache.n_slots < N_EXPERTS * N_LAYERS  # really offloaded
    assert placed[0].runtime_stats()["misses"] > 0
    dequantized = generate_json(capsys, pack, "--no-offload")
    assert len(placed) == 1  # --no-offload never touched the runtime
    assert offloaded["token_ids"] and offloaded["token_ids"] == dequantized["token_ids"]
    assert offloaded["text"] == dequantized["text"]
    # --resident-routing reaches the runtime: its later passes choose among resident experts (never missing; 26
    # slots: a layer keeps k experts after a first pass merged with a commit, test_resident_routing.py)
    generate_json(capsys, pack, "--vram-budget", budget_for(pack, 26, 256), "--context", "256", "--resident-routing")
    rt = placed[-1].runtime
    assert rt.resident_routing and rt.restricted_passes > 0
    assert all(r.misses == 0 for r in rt.records if r.kind == "preview" and r.pass_in_block > 0)
    # --prefill-chunk reaches the runtime: each layer takes the prompt that many rows at a time, same answer
    chunked = generate_json(capsys, pack, "--vram-budget", budget_for(pack, 12, 256), "--context", "256",
                            "--prefill-chunk", "8")
    rt = placed[-1].runtime
    assert rt.prefill_chunk == 8 and chunked["token_ids"] == offloaded["token_ids"]


def test_score_through_the_runtime_matches_no_offload(pack, placed, capsys, monkeypatch):
    """`score` of a pack runs through the runtime too, in its prefill passes (each layer over a pass's rows a
    chunk at a time) and LM-head slices smaller than the text, and gives the dequantizing path's
    log-probabilities (which reads the text in CHUNK-row passes)."""
    import clover_local.generate.scoring as scoring

    monkeypatch.setattr(scoring, "CHUNK", 16)
    monkeypatch.setattr(scoring, "HEAD_ROWS", 6)
    monkeypatch.setenv("CLOVER_PREFILL_SPAN", "24")
    text = "add 12+30 and then reverse a b c d e, sort 5 12 3, count items cat dog fig owl bee ant"
    base = ["score", pack, "--text", text, "--json", *GEN]
    budget = budget_for(pack, 12, 128, prefill_chunk=8, prefill_span=24)
    assert run_cli(base + ["--vram-budget", budget, "--context", "128", "--prefill-chunk", "8"]) == 0
    offloaded = json.loads(capsys.readouterr().out)
    assert len(placed) == 1 and placed[0].runtime_stats()["misses"] > 0
    rt = placed[0].runtime
    n = len(offloaded["token_ids"])
    assert (rt.prefill_chunk, rt.prefill_span) == (8, 24) and n - 1 > 2 * rt.prefill_span
    # the text in 24-row passes (the last one shorter), not in 8-row chunk passes
    assert [r.rows for r in rt.records if r.kind == "prefill"] == [min(24, n - 1 - s) for s in range(0, n - 1, 24)]
    assert run_cli(base + ["--no-offload"]) == 0
    dequantized = json.loads(capsys.readouterr().out)
    assert len(placed) == 1
    assert offloaded["token_ids"] == dequantized["token_ids"] and len(offloaded["logprobs"]) == n - 1
    assert torch.allclose(torch.tensor(offloaded["logprobs"]), torch.tensor(dequantized["logprobs"]), atol=1e-4)
    line = one_error_line(capsys, run_cli(base + ["--context", str(n - 1)]))
    assert f"the text has {n} tokens" in line and "--context" in line


def test_generate_and_score_out_of_memory_is_one_line_naming_what_holds_less(pack, tmp_path, monkeypatch, capsys):
    """Out of memory outside the runtime's passes (which say so themselves): a model loaded whole (`--no-offload`,
    a BF16 checkpoint) on a long prompt. generate and score end in one line with the prompt's size and what to
    change — the runtime's flags only where the runtime runs; with --prompts the next prompt is still answered."""
    import clover_local.generate.scoring as scoring

    real, calls = BlockDiffusionDecoder.generate, []

    def first_runs_out(self, prompt_ids, settings, **options):
        calls.append(len(prompt_ids))
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        yield from real(self, prompt_ids, settings, **options)

    monkeypatch.setattr(BlockDiffusionDecoder, "generate", first_runs_out)
    base = ["generate", pack, "--raw", "--max-new-tokens", "4", *GEN]
    line = one_error_line(capsys, run_cli(base + ["-p", "add 12+30", "--no-offload"]))
    assert f"ran out of memory answering this prompt ({calls[0]} tokens)" in line and "--max-new-tokens" in line
    assert "--vram-budget" not in line, line  # loaded whole: the runtime's flags change nothing
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("add 12+30\nreverse a b c\n")
    calls.clear()
    code = run_cli(base + ["--prompts", str(prompts), "--vram-budget", budget_for(pack, 12, 128), "--context", "128"])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in out + err and "1 of 2 prompts not answered" in err, err
    first, second = (json.loads(x) for x in out.strip().splitlines())
    assert "ran out of memory" in first["error"] and "--vram-budget or --context" in first["error"], first
    assert "error" not in second and second["token_ids"] and len(calls) == 2

    def runs_out(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(scoring, "score_ids", runs_out)
    score = ["score", pack, "--text", "add 12+30 and then reverse a b c", *GEN]
    line = one_error_line(capsys, run_cli(score + ["--vram-budget", budget_for(pack, 12, 128), "--context", "128"]))
    assert "ran out of memory scoring" in line and "--prefill-chunk, --vram-budget or --context" in line, line
    line = one_error_line(capsys, run_cli(score + ["--no-offload"]))
    assert "ran out of memory scoring" in line and line.endswith("score a shorter text"), line


def test_load_errors_are_one_line(pack, capsys):
    base = ["generate", pack, "-p", "hi", "--raw", "--max-new-tokens", "4", *GEN]
    line = one_error_line(capsys, run_cli(base + ["--vram-budget", "64KB"]))
    assert "--vram-budget" in line and "too small" in line
    line = one_error_line(capsys, run_cli(base + ["--vram-budget", "lots"]))
    assert "--vram-budget 'lots' is not a size" in line
    line = one_error_line(capsys, run_cli(base + ["--no-offload", "--vram-budget", "8GB"]))
    assert "--no-offload" in line
    line = one_error_line(capsys, run_cli(base + ["--no-offload", "--resident-routing"]))
    assert "--resident-routing" in line and "--no-offload" in line
    line = one_error_line(capsys, run_cli(base + ["--no-offload", "--prefill-chunk", "64"]))
    assert "--prefill-chunk" in line and "--no-offload" in line
    line = one_error_line(capsys, run_cli(base + ["--prefill-chunk", "0"]))
    assert "--prefill-chunk must be at least 1" in line
    line = one_error_line(capsys, run_cli(base + ["--context", "1"]))
    assert "--context must be at least 2" in line
    for command in (["chat", pack], ["serve", pack, "--port", "0"]):
        code = run_cli(command + [*GEN, "--vram-budget", "64KB"])
        out, err = capsys.readouterr()
        assert code == 2 and "Traceback" not in out + err
        errors = [x for x in err.splitlines() if x.startswith("error: ")]
        assert len(errors) == 1 and "too small" in errors[0], err


def test_help_teaches_the_options(capsys):
    for command in ("chat", "generate", "serve"):
        assert run_cli([command, "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        for needle in ("--vram-budget", "--no-offload", "--context", "GPTQ", "expert"):
            assert needle in text, (command, needle)


# ---------------------------------------------------------------------------------------------- chat


def chat(monkeypatch, capsys, model, lines: str, *extra: str) -> tuple[int, str, str]:
    """`clover-local chat` in-process, in its piped (plain) mode."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    code = run_cli(["chat", model, *GEN, "--max-tokens", "6", "--no-think", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_chat_stats_read_the_runtime(pack, monkeypatch, capsys):
    code, out, err = chat(monkeypatch, capsys, pack, "hello\n/stats all\n", "--vram-budget",
                          budget_for(pack, 12, 128), "--context", "128")
    assert code == 0 and "Traceback" not in err
    assert "context used:" in err and "of 128" in err
    hit = [x for x in err.splitlines() if x.startswith("expert cache hit rate:")]
    assert hit and hit[0].rstrip().endswith("%"), err  # a figure, not "—"
    assert "  misses:" in err and "  slots:" in err


def test_chat_survives_out_of_memory_mid_answer(make_checkpoint, tmp_path, monkeypatch, capsys):
    real = BlockDiffusionDecoder.generate
    prompts: list[list[int]] = []

    def flaky(self, prompt_ids, settings, **options):  # options: the chat's prompt-cache reuse, passed on
        """The first answer commits a block, then the allocator gives up."""
        prompts.append(list(prompt_ids))
        for event in real(self, prompt_ids, settings, **options):
            yield event
            if len(prompts) == 1 and isinstance(event, BlockCommitted):
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(BlockDiffusionDecoder, "generate", flaky)
    saved = tmp_path / "after.json"
    code, out, err = chat(monkeypatch, capsys, str(make_checkpoint(seed=3)),
                          f"first message\nsecond message\n/save {saved}\n")
    assert code == 0 and "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and "ran out of memory" in errors[0] and "--vram-budget" in errors[0], err
    assert "as it was before this message" in errors[0]
    assert len(prompts) == 2  # the chat went on to the next message
    messages = json.loads(saved.read_text())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"] == "second message"  # the failed turn left no trace


def test_a_failed_host_allocation_is_out_of_memory_too(pack, monkeypatch, capsys):
    """torch's CPU allocator says host RAM ran out with a plain RuntimeError (on Windows, where RAM runs out this
    way rather than by the OOM killer, and here for an allocation past the address space: a real one, below).
    chat, generate and score take it as running out of host RAM: the chat goes on, the others end in one line; so
    does loading a pack whose host memory the plan counted on and did not get."""
    real, calls = BlockDiffusionDecoder.generate, []

    def first_allocates_too_much(self, prompt_ids, settings, **options):
        calls.append(len(prompt_ids))
        if len(calls) == 1:
            torch.empty(1 << 62, dtype=torch.uint8)  # 4 EiB: refused by any allocator
        yield from real(self, prompt_ids, settings, **options)

    monkeypatch.setattr(BlockDiffusionDecoder, "generate", first_allocates_too_much)
    code, out, err = chat(monkeypatch, capsys, pack, "first message\nsecond message\n", "--no-offload")
    assert code == 0 and "Traceback" not in err, err
    errors = [x for x in err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and "ran out of host RAM during this answer" in errors[0], err
    assert len(calls) == 2  # the chat went on to the second message
    calls.clear()
    line = one_error_line(capsys, run_cli(["generate", pack, "-p", "hi", "--raw", "--max-new-tokens", "4",
                                           "--no-offload", *GEN]))
    assert "ran out of host RAM answering this prompt" in line, line
    import clover_local.generate.scoring as scoring

    monkeypatch.setattr(scoring, "score_ids", lambda *args, **kwargs: torch.empty(1 << 62, dtype=torch.uint8))
    line = one_error_line(capsys, run_cli(["score", pack, "--text", "add 12+30 please", "--no-offload", *GEN]))
    assert "ran out of host RAM scoring" in line, line
    import clover_local.runtime.load as runtime_load

    def refused(*args, **kwargs):  # RAM the plan counted on, gone by the time the pack loads
        torch.empty(1 << 62, dtype=torch.uint8)

    monkeypatch.setattr(runtime_load, "_build", refused)
    line = one_error_line(capsys, run_cli(["generate", pack, "-p", "hi", "--max-new-tokens", "4", *GEN]))
    assert "host RAM ran out while loading the pack (the plan counts" in line and "free memory" in line, line
