"""What the commands say when given the wrong thing (a pack where a BF16 checkpoint belongs, nothing at all, an
empty folder, a folder for a file, contradicting flags, a truncated shard), what a retry hint repeats, what
`bench` claims from CPU timings and how its table reads at 80 columns, and the `python -m` entry points' errors:
each a single `error:` line and a non-zero exit, before any work is done."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console

from clover_local.errors import CloverError
from conftest import run_cli
from runtime_pack import N_LAYERS, pack  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[1]


def one_error_line(capsys) -> str:
    """The run's stderr must be exactly one `error: …` line (no traceback, no usage block)."""
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _no_work(monkeypatch) -> None:
    """Make quantizing and measuring fail loudly: a refusal must come before either starts."""
    import quantize.pipeline
    import quantize.quality

    def forbidden(*_a, **_k):
        raise AssertionError("the command started working before refusing its input")

    monkeypatch.setattr(quantize.pipeline, "quantize_checkpoint", forbidden)
    monkeypatch.setattr(quantize.quality, "compare", forbidden)


# ------------------------------------------------------------------------------ 1. a pack where BF16 is needed


def test_quantize_and_eval_refuse_a_pack_as_their_bf16_source(pack, make_checkpoint, tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    out = tmp_path / "q1"
    assert run_cli(["quantize", pack, "--out", out]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {pack} is a quantized pack (GPTQ INT4); quantize takes the BF16 checkpoint "
                           "it was made from"), line
    assert not out.exists()  # refused before the output folder was touched

    other = make_checkpoint("other")  # a valid BF16 checkpoint as the pack argument does not matter here
    for args in (["eval", pack, "--reference", pack], ["eval", other, "--reference", pack]):
        assert run_cli(args) == 2
        line = one_error_line(capsys)
        assert line.startswith(f"error: --reference {pack} is a quantized pack (GPTQ INT4); eval compares"), line
        assert "BF16 checkpoint it was made from" in line and "chat template" not in line


def test_the_library_functions_refuse_a_pack_too(pack, tmp_path):
    from quantize.pipeline import QuantizeSettings, quantize_checkpoint
    from quantize.quality import compare

    with pytest.raises(CloverError, match=r"is a quantized pack \(GPTQ INT4\); quantize takes the BF16"):
        quantize_checkpoint(pack, tmp_path / "q", QuantizeSettings(samples=2, seq_len=32), torch.device("cpu"))
    assert not (tmp_path / "q").exists()
    with pytest.raises(CloverError, match=r"is a quantized pack \(GPTQ INT4\); the reference is the BF16"):
        compare(pack, pack)


def test_a_pack_names_its_source_when_its_manifest_has_one(pack, tmp_path):
    from clover_local.loader import pack_kind, refuse_pack

    copy = tmp_path / "p"
    shutil.copytree(pack, copy)
    manifest = json.loads((copy / "clover_manifest.json").read_text())
    manifest["source"] = {"repo_id": "Diffuspace/Clover-35B-A3B-Preview"}
    (copy / "clover_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CloverError) as err:
        refuse_pack(copy, "P", "needs BF16")
    assert str(err.value) == "P is a quantized pack (GPTQ INT4); needs BF16 (Diffuspace/Clover-35B-A3B-Preview)"
    assert pack_kind(tmp_path) is None  # no config.json: not a pack (the command's own check says what is missing)


# ------------------------------------------------------------------------------ 2. bench: neither vs both


def test_bench_says_nothing_was_given_apart_from_both(pack, capsys):
    assert run_cli(["bench"]) == 2
    line = one_error_line(capsys)
    assert "nothing to bench" in line and "not both" not in line and "--synthetic" in line
    assert run_cli(["bench", pack, "--synthetic", "small"]) == 2
    assert "not both" in one_error_line(capsys)


# ------------------------------------------------------------------------------ 3. plan on an empty folder


def test_plan_on_an_empty_folder_names_the_missing_config(tmp_path, capsys):
    empty = tmp_path / "emptydir"
    empty.mkdir()
    assert run_cli(["plan", empty, "--vram", "16GB"]) == 2
    assert one_error_line(capsys) == f"error: {empty / 'config.json'} is missing"


def test_plan_on_a_bf16_checkpoint_plans_the_pack_and_names_the_quantize_command(make_checkpoint, capsys):
    """It said "not a quantized pack": now the pack quantize would make. This checkpoint's 64-wide inputs do not
    take quantize's default groups of 128, which plan says as quantize would, naming --group-size."""
    ckpt = make_checkpoint()
    assert run_cli(["plan", ckpt, "--vram", "16GB", "--ram", "8GB"]) == 2
    line = one_error_line(capsys)
    assert "--group-size 128 does not divide an input width of 64" in line
    assert run_cli(["plan", ckpt, "--vram", "16GB", "--ram", "8GB", "--group-size", "32"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "is a BF16 checkpoint" in out and f"clover-local quantize {ckpt} --out PACK --group-size 32" in out
    assert "fits" in out


# ------------------------------------------------------------------------------ 4. --calib is a folder


def test_calibration_path_that_is_a_folder_is_called_one(pack, make_checkpoint, tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    folder = tmp_path / "emptydir"
    folder.mkdir()
    assert run_cli(["quantize", "tiny", "--out", tmp_path / "q1", "--calib", folder]) == 2
    assert one_error_line(capsys) == (f"error: calibration file {folder} is a directory; give a .jsonl (messages or "
                                      "text) or .txt file")
    assert run_cli(["eval", pack, "--reference", make_checkpoint(), "--calib", folder]) == 2
    assert "is a directory" in one_error_line(capsys)
    missing = tmp_path / "nope.jsonl"
    assert run_cli(["quantize", "tiny", "--out", tmp_path / "q1", "--calib", missing]) == 2
    assert one_error_line(capsys) == f"error: calibration file {missing} does not exist"
    assert not (tmp_path / "q1").exists()


# ------------------------------------------------------------------------------ 5. the download retry hint


def _offline_hub(monkeypatch, tmp_path) -> None:
    """An empty, isolated Hub cache and a Hub that cannot be reached (huggingface_hub's own error chain)."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_SECRETtoken0123456789")

    def unreachable(**kwargs):
        try:
            raise ConnectionError("[Errno 111] Connection refused")
        except ConnectionError as exc:
            raise LocalEntryNotFoundError("cannot find the files in the local cache") from exc

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)


def test_download_retry_hint_repeats_dir_and_revision(tmp_path, capsys, monkeypatch):
    _offline_hub(monkeypatch, tmp_path)
    dl = tmp_path / "dl 1"
    assert run_cli(["download", "someone/x", "--dir", dl, "--revision", "v2"]) == 2
    line = one_error_line(capsys)
    assert f"run `clover-local download someone/x --dir '{dl}' --revision v2` again" in line, line
    assert "hf_SECRET" not in line
    assert not dl.exists()  # the failed first try made the folder and leaves nothing behind
    assert run_cli(["download", "someone/x"]) == 2  # nothing to repeat: the plain command
    assert "run `clover-local download someone/x` again" in one_error_line(capsys)
    assert run_cli(["download", "someone/x", "--revision", " "]) == 2  # a blank revision is main's: not repeated
    assert "run `clover-local download someone/x` again" in one_error_line(capsys)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline mode: its own sentence, the same command
    assert run_cli(["download", "someone/x", "--dir", dl]) == 2
    line = one_error_line(capsys)
    assert "HF_HUB_OFFLINE=1" in line and f"run `clover-local download someone/x --dir '{dl}'` once" in line


def test_a_blank_revision_is_the_default_branch(capsys, monkeypatch):
    """`--revision ""` (a script's unset variable) is what no --revision is: a local model runs, and chat's header
    and what /save records name the model alone (they said `tiny@`)."""
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\n"))
    assert run_cli(["chat", "tiny", "--revision", "", "--no-think", "--max-tokens", "2", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "· tiny ·" in err and "tiny@" not in err, err


def test_interrupted_download_says_how_to_resume_into_the_same_dir(tmp_path, capsys, monkeypatch):
    import huggingface_hub

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(huggingface_hub, "snapshot_download", interrupted)
    assert run_cli(["download", "someone/x", "--dir", tmp_path / "dl1"]) == 130
    line = one_error_line(capsys)
    assert f"run `clover-local download someone/x --dir {tmp_path / 'dl1'}` again to resume" in line, line
    # a folder the user made, or one holding a partial file for the retry, is kept
    kept = tmp_path / "mine"
    kept.mkdir()
    assert run_cli(["download", "someone/x", "--dir", kept]) == 130 and kept.is_dir()
    partial = tmp_path / "dl2"

    def part_then_interrupted(**kwargs):
        (Path(kwargs["local_dir"]) / ".cache").mkdir()
        (Path(kwargs["local_dir"]) / "model-00001.safetensors.incomplete").write_bytes(b"x" * 10)
        raise KeyboardInterrupt

    monkeypatch.setattr(huggingface_hub, "snapshot_download", part_then_interrupted)
    assert run_cli(["download", "someone/x", "--dir", partial]) == 130
    assert (partial / "model-00001.safetensors.incomplete").is_file()
    capsys.readouterr()


def test_running_out_of_memory_where_a_command_has_no_line_for_it_is_one_line(capsys, monkeypatch):
    """`bench` outside its passes (here: making its synthetic pack, and the run) says nothing of memory itself: the
    entry point's last resort gives the one line (what ran out, the size asked for, what to change), exit 2. A
    RuntimeError that is not an allocator's stays a traceback: a bug, not the user's to fix."""
    import clover_local.commands._model_options as model_options
    import clover_local.runtime.bench as runtime_bench

    def host_refused(*_a, **_k):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 3221225472 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(model_options, "pack_or_synthetic", host_refused)
    assert run_cli(["bench", "--synthetic", "small"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: ran out of host RAM (asked for 3 GiB more); close other programs"), line

    monkeypatch.setattr(model_options, "pack_or_synthetic", lambda *a, **k: ("pack", "synthetic small"))
    monkeypatch.setattr(runtime_bench, "run_bench", lambda *a, **k: (_ for _ in ()).throw(
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                               "15.47 GiB of which 1.02 GiB is free.")))
    assert run_cli(["bench", "--synthetic", "small"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: ran out of GPU memory (asked for 2.00 GiB more); close other programs that use "
                           "the GPU"), line

    monkeypatch.setattr(runtime_bench, "run_bench", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        run_cli(["bench", "--synthetic", "small"])


def test_clover_traceback_shows_where_a_one_line_error_came_from(capsys, monkeypatch):
    """CLOVER_TRACEBACK=1 (a bug report, a GPU session's log): the traceback above the same one `error:` line."""
    assert run_cli(["plan", "tiny", "--vram", "0"]) == 2
    line = one_error_line(capsys)
    monkeypatch.setenv("CLOVER_TRACEBACK", "1")
    assert run_cli(["plan", "tiny", "--vram", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "Traceback (most recent call last):" and "parse_size" in "\n".join(err) and err[-1] == line


# ------------------------------------------------------------------------------ 6. --resume with --overwrite


def test_resume_and_overwrite_together_are_refused_and_nothing_is_deleted(tmp_path, capsys):
    from quantize.pipeline import QuantizeSettings, quantize_checkpoint

    out = tmp_path / "q1"  # an interrupted run's folder: --overwrite would delete it, --resume continue it
    (out / ".clover-progress").mkdir(parents=True)
    (out / ".clover-progress" / "state.json").write_text("{}")
    (out / "model-00001-of-00005.safetensors").write_bytes(b"finished layer")
    assert run_cli(["quantize", "tiny", "--out", out, "--resume", "--overwrite"]) == 2
    line = one_error_line(capsys)
    assert "--resume" in line and "--overwrite" in line and "one of them" in line
    with pytest.raises(CloverError, match="give one of them"):  # the library function refuses the same way
        quantize_checkpoint(Path("unused"), out, QuantizeSettings(), torch.device("cpu"), resume=True,
                            overwrite=True)
    assert (out / "model-00001-of-00005.safetensors").read_bytes() == b"finished layer"


# ------------------------------------------------------------------------------ 7. bench on a CPU, at 80 columns


def _bench_json(pack, capsys) -> dict:
    assert run_cli(["bench", pack, "--prefix", "16", "--passes", "2", "--device", "cpu", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_bench_prints_no_5070ti_figure_from_cpu_timings_and_fits_80_columns(pack, capsys, monkeypatch):
    from clover_local.commands.bench import _print

    r = _bench_json(pack, capsys)
    # --json keeps the figure, and says what timed it
    assert r["projection_5070ti"]["ms_per_pass"] > 0 and r["projection_5070ti"]["timed_on"] == "cpu"
    assert r["device"] == "cpu"
    # a pack with its tokenizer: tokens per pass measured, by the threshold and by the factor rule
    assert r["tokens_per_pass_source"].startswith("measured") and r["tokens_per_pass_factor_rule"] > 0
    monkeypatch.setenv("COLUMNS", "80")
    _print(r)
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert "RTX 5070 Ti projection: needs GPU timings (this run timed the CPU)" in lines
    assert f"{r['projection_5070ti']['ms_per_pass']:.2f} ms per pass" not in text
    assert "proj." not in text  # no projected column from CPU times either
    assert "by the factor rule" in text
    assert max(len(line) for line in lines) <= 80
    table = [line for line in lines if line.startswith("│")]
    names = [c["component"] for c in r["components"]]
    for name in names:  # every component on one line, whole
        assert sum(name in line for line in table) == 1, name
    assert len(table) == len(names)  # and no wrapped continuation lines

    # the same report as if a GPU had timed it: the figure and the projected column are back
    gpu = dict(r, device="cuda")
    _print(gpu)
    text = capsys.readouterr().out
    assert f"RTX 5070 Ti projection: {r['projection_5070ti']['ms_per_pass']:.2f} ms per pass" in text
    assert "proj." in text and max(len(line) for line in text.splitlines()) <= 80


def test_bench_component_table_drops_columns_only_when_narrow():
    """A GPU report with graph times and long segment names: whole at 120 columns; at 80 the least telling
    columns go, names stay on one line."""
    from clover_local.commands.bench import _component_table

    names = ["routed experts: gate/up", "attention projections: split-K sum", "rest (norms, residuals)", "lm_head"]
    rows = [{"component": n, "calls": 40, "ms": 12.345, "graph_ms": 3.21, "bytes": 1_234_567_890,
             "floor_ms": 0.123, "floor_ms_5070ti": 1.234, "projected_ms_5070ti": 12.3,
             "projected_ms_5070ti_graph": 3.456} for n in names]
    r = {"device": "cuda", "components": rows, "projection_5070ti_graph_components": {"ms_per_pass": 1.0}}

    def render(width: int) -> list[str]:
        c = Console(width=width, record=True, file=open("/dev/null", "w"))
        c.print(_component_table(r, c))
        return c.export_text().splitlines()

    wide = render(120)
    assert any("1.15 GiB" in line and "0.123" in line for line in wide)  # bytes and this device's floor kept
    narrow = render(80)
    assert max(len(line.rstrip()) for line in narrow) <= 80
    body = [line for line in narrow if line.startswith("│")]
    assert len(body) == len(names) and all(any(n in line for line in body) for n in names)
    assert all("3.456" in line and "3.210" in line for line in body)  # the projection and graph ms stay
    assert not any("GiB" in line for line in narrow)  # bytes went


# ------------------------------------------------------------------------------ 8. python -m entry points


def test_tiny_evaluate_on_a_missing_folder_is_one_line(tmp_path):
    missing = tmp_path / "nonexistent"
    proc = subprocess.run([sys.executable, "-m", "clover_local.tiny.evaluate", str(missing)], capture_output=True,
                          text=True, cwd=REPO)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: model folder {missing} does not exist"]


def test_tiny_evaluate_slots_error_is_one_line_too(tmp_path, capsys, monkeypatch):
    from clover_local.tiny import evaluate

    monkeypatch.setattr(sys, "argv", ["evaluate", str(tmp_path / "gone"), "--slots", "4"])
    with pytest.raises(SystemExit) as exc:
        evaluate.main()
    assert exc.value.code == 2
    assert one_error_line(capsys) == f"error: model folder {tmp_path / 'gone'} does not exist"


@pytest.mark.parametrize("flags, line", [
    (["--threshold", "0"], "error: --threshold must be in (0, 1], got 0"),
    (["--temperature", "1", "--top-p", "2"], "error: --top-p must be in [0, 1], got 2"),
    (["--reveal-factor", "-1"], "error: --reveal-factor must be in [0, 100], got -1"),
])
def test_tiny_evaluate_holds_its_decoding_flags_to_chats_ranges(tmp_path, capsys, monkeypatch, flags, line):
    """An out-of-range decoding flag is one line, before the model loads (the folder named does not exist)."""
    from clover_local.tiny import evaluate

    monkeypatch.setattr(sys, "argv", ["evaluate", str(tmp_path / "gone"), *flags])
    with pytest.raises(SystemExit) as exc:
        evaluate.main()
    assert exc.value.code == 2 and one_error_line(capsys) == line


def test_train_and_bench_scale_refuse_bad_paths_before_working(tmp_path, monkeypatch):
    from clover_local.tiny import train
    from quantize import bench_scale

    a_file = tmp_path / "afile"
    a_file.write_text("x")

    def forbidden(*_a, **_k):
        raise AssertionError("started before checking its paths")

    monkeypatch.setattr(train, "train", forbidden)
    monkeypatch.setattr(bench_scale, "_make", forbidden)
    cases = [
        (train.main, ["train", "--out", str(a_file)], f"error: --out {a_file} is a file, not a folder"),
        (train.main, ["train", "--out", str(tmp_path / "t"), "--init", str(tmp_path / "none")],
         f"error: --init {tmp_path / 'none'} is not a tiny checkpoint folder: it has no model.safetensors"),
        (bench_scale.main, ["bench_scale", "--work", str(a_file)], f"error: --work {a_file} is a file, not a folder"),
        (bench_scale.main, ["bench_scale", "--work", str(a_file / "sub")],
         f"error: cannot create --work {a_file / 'sub'}"),
    ]
    for main, argv, message in cases:
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exc:
            main()
        assert isinstance(exc.value.code, str) and exc.value.code.startswith(message), exc.value.code
        assert "\n" not in exc.value.code


# ------------------------------------------------------------------------------ 9. eval's bar, plan's words, shards


def test_eval_progress_knows_its_total(pack, monkeypatch):
    import quantize.quality
    from clover_local.commands.quantize import _measure
    from quantize.quality import QualityCheck

    class Done:
        def to_dict(self) -> dict:
            return {}

    def fake_compare(pack_, ref_, *, on_layer, **_k):
        for which in ("reference", "pack"):
            for i in range(N_LAYERS):
                on_layer(which, i)
        return Done()

    monkeypatch.setattr(quantize.quality, "compare", fake_compare)
    console = Console(record=True, force_terminal=True, width=120, file=open("/dev/null", "w"))
    _measure(pack, pack, console, QualityCheck(), torch.device("cpu"), "what to change")
    text = console.export_text()
    assert f"{2 * N_LAYERS}/{2 * N_LAYERS}" in text and "/?" not in text


def test_plan_counts_layers_in_words_that_agree(pack):
    from clover_local.runtime.pack_index import read_pack_index
    from clover_local.runtime.placement import make_plan
    from clover_local.runtime.sizes import GIB

    info = read_pack_index(pack)
    n_attn = sum(info.config.is_attention(i) for i in range(info.config.num_hidden_layers))
    assert n_attn == 1  # the tiny pack: one attention layer, three GDN layers
    notes = {line.what: line.note for line in make_plan(info, GIB, None, 4096).lines}
    assert notes["KV cache"].startswith("1 attention layer × 4096 tokens")
    assert notes["GDN states"].startswith("3 layers,")


def test_plan_refuses_a_truncated_shard_from_its_size(pack, tmp_path, capsys):
    bad = tmp_path / "trunc"
    shutil.copytree(pack, bad)
    index = json.loads((bad / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[1]
    path = bad / shard
    size = path.stat().st_size
    with open(path, "r+b") as f:  # the header stays whole: only the data is cut off
        f.truncate(size - 100)
    assert run_cli(["plan", bad, "--vram", "16GB"]) == 2
    line = one_error_line(capsys)
    assert line == (f"error: pack shard {shard} is corrupt or truncated ({size - 100:,} bytes; its header describes "
                    f"{size:,})")
    assert run_cli(["plan", pack, "--vram", "16GB"]) == 0  # the whole pack still plans
    assert "fits" in capsys.readouterr().out


def test_calibration_leaves_out_conversations_the_template_cannot_render(tmp_path):
    """The shipped calibration set has tool turns; a chat template without a tool role (the tiny model's, or a
    user's own checkpoint's) refuses them. Those conversations are left out and counted, the rest calibrate;
    only a file the template renders none of is an error, naming the template's reason."""
    from clover_local.errors import CloverError
    from clover_local.tokenizer import ChatTokenizer
    from quantize.calibration import build_calibration, default_calib_path, read_samples

    tok = ChatTokenizer.from_folder(Path(__file__).parents[1] / "clover_local" / "assets" / "tiny")
    refused: list[str] = []
    texts = read_samples(default_calib_path(), tok, refused)
    records = [json.loads(line) for line in default_calib_path().read_text(encoding="utf-8").splitlines()
               if line.strip()]
    with_tool = sum(any(m["role"] == "tool" for m in r["messages"]) for r in records)
    assert len(refused) == with_tool > 0 and len(texts) == len(records) - with_tool
    assert all("tool" in reason for reason in refused)
    calib = build_calibration(default_calib_path(), tok, samples=2, seq_len=64, block_size=16, mask_id=0, seed=0)
    assert calib.refused == with_tool and calib.clean.shape == (2, 64)

    only_tools = tmp_path / "tools.jsonl"
    only_tools.write_text("".join(json.dumps(r) + "\n" for r in records
                                  if any(m["role"] == "tool" for m in r["messages"])), encoding="utf-8")
    with pytest.raises(CloverError, match="renders none of the .* conversations .*Unknown message role: tool"):
        read_samples(only_tools, tok)


def test_a_model_too_large_to_load_whole_is_refused_before_reading(monkeypatch, capsys, pack) -> None:
    """A BF16 checkpoint (or a pack with --no-offload) loads whole onto one device: at 35B that is 64.6 GiB at
    bfloat16, which ran a 16 GB card out of memory minutes into the read (or the OOM killer ended it). Refused up
    front, from the config, with the way that fits; what does fit still loads."""
    import clover_local.runtime.sizes as sizes
    from clover_local.checkpoint.synthetic import REAL_SPEC, tiny_config_dict
    from clover_local.config import parse_config
    from clover_local.model.clover import CloverModel

    assert CloverModel.weight_bytes(parse_config(tiny_config_dict(REAL_SPEC), {}), torch.bfloat16) == 69_322_701_696
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: 4 << 20)
    assert run_cli(["generate", "tiny", "-p", "hi", "--device", "cpu", "--dtype", "float32"]) == 2
    line = one_error_line(capsys)
    assert "tiny needs 14.6 MiB to load whole in float32, and this machine has 4 MiB of memory available" in line
    assert "clover-local quantize tiny --out PACK" in line, line
    assert run_cli(["generate", str(pack), "-p", "hi", "--device", "cpu", "--no-offload"]) == 2
    assert "leave out --no-offload" in one_error_line(capsys)
    monkeypatch.setattr(sizes, "host_available_bytes", lambda: 16 << 20)  # the tiny model's 14.6 MiB fit
    assert run_cli(["generate", "tiny", "-p", "hi", "--device", "cpu", "--dtype", "float32", "--max-tokens", "4"]) == 0
