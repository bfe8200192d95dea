"""Bad input gets one clear line on stderr and a non-zero exit, never a traceback; and the happy path of
`generate` prints what it promises."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli


class Terminal(io.StringIO):
    """Standard input as a terminal: with no text flag, nothing is piped in to read."""

    def isatty(self) -> bool:
        return True


GEN = ["--device", "cpu", "--dtype", "float32"]


def expect_error(capsys, args, *needles: str) -> str:
    """Run the CLI in-process; it must fail with exactly one `error: …` line on stderr naming every needle."""
    code = run_cli(args)
    out, err = capsys.readouterr()
    assert code != 0, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def generate_args(folder, *extra):
    return ["generate", folder, "-p", "Hello world", "--raw", "--max-new-tokens", "6", *GEN, *extra]


# ---------------------------------------------------------------------------------------------- the model folder


def test_missing_folder(tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    expect_error(capsys, generate_args(missing), str(missing))
    expect_error(capsys, ["score", missing, "--text", "hi there"], str(missing))


@pytest.mark.parametrize("args, says", [
    (["generate", "", "-p", "hi"], "the model is empty"),
    (["score", " ", "--text", "hi"], "the model is empty"),
    (["plan", "", "--vram", "16GB"], "the model is empty"),
    (["serve", "", "--port", "0"], "the model is empty"),  # (a log's "loading  …" line came first)
    (["quantize", "", "--out", "pack"], "the model is empty"),
    (["quantize", "tiny", "--out", ""], "--out is empty: give it a folder name"),
    (["generate", "tiny", "-f", ""], "--file is empty: give it a file name"),
    (["generate", "tiny", "--prompts", ""], "--prompts is empty"),
    (["generate", "tiny", "-p", "hi", "--json-schema", ""], "--json-schema is empty"),
    (["generate", "tiny", "-p", "hi", "--chat-template", ""], "--chat-template is empty"),
    (["score", "tiny", "--file", ""], "--file is empty"),
    (["chat", "tiny", "--load", ""], "--load is empty"),
    (["download", "a/b", "--dir", ""], "--dir is empty: give it a folder name"),
    (["upload", "", "--repo-id", "a/b"], "PACK is empty: give it a folder name"),
])
def test_an_empty_model_or_path_is_refused_by_name_not_read_as_the_working_folder(tmp_path, monkeypatch, capsys,
                                                                                   args, says):
    """A script's unset variable (`--out "$OUT"`): click reads "" as the path ".", so a model folder in the working
    folder was loaded, `quantize --out ""` wrote its pack there, `-f ""` said "cannot read .: Is a directory"."""
    import shutil

    from clover_local.loader import SHORT_NAMES

    work = tmp_path / "work"
    shutil.copytree(SHORT_NAMES["tiny"], work)  # a model, where "" would find one
    if args[:2] == ["quantize", "tiny"]:
        shutil.rmtree(work)
        work.mkdir()  # an empty folder: the pack's home, were "" taken as "."
    monkeypatch.chdir(work)
    before = sorted(p.name for p in work.iterdir())
    expect_error(capsys, args, says)
    assert sorted(p.name for p in work.iterdir()) == before


@pytest.mark.parametrize("host", ["", "  "])
def test_an_empty_serve_host_or_key_is_refused_not_every_interface_or_no_key(capsys, host):
    """`serve --host "$HOST"` with HOST unset: the socket reads "" as every interface, so the server opened up to
    the network (with only a warning naming an empty address); loopback stays the default. `--api-key "$KEY"` the
    same way asked for no key at all."""
    expect_error(capsys, ["serve", "tiny", "--host", host, "--port", "0"],
                 "--host is empty: give the address to listen on (127.0.0.1, the default")
    expect_error(capsys, ["serve", "tiny", "--api-key", host, "--port", "0"],  # (the server asked for no key)
                 "--api-key (or CLOVER_LOCAL_API_KEY) is empty: give the key clients must send")
    expect_error(capsys, ["serve", "tiny", "--model-name", host, "--port", "0"],  # (a blank id in /v1/models)
                 "--model-name is empty: give the id clients should see")
    for key in ("clé", "tab\tkey", " padded"):  # (curl's UTF-8 'clé' got a 401; Python's Latin-1 one a 200)
        expect_error(capsys, ["serve", "tiny", "--api-key", key, "--port", "0"],
                     "--api-key must be printable ASCII with no spaces at its ends")


@pytest.mark.parametrize("size", ["inf", "nan", "1e400", "0"])
def test_serve_max_request_mb_past_a_number_is_one_line(capsys, size):
    """inf and nan (and 1e400, read as inf) were an OverflowError / ValueError traceback turning MB into bytes."""
    expect_error(capsys, ["serve", "tiny", "--max-request-mb", size, "--port", "0"],
                 "--max-request-mb must be a number of MB above 0, got ")


def test_download_into_a_file_or_under_one_is_one_line(tmp_path, capsys):
    """--dir naming a file (click's own check, lost when --dir took a path type of ours) or a folder under one."""
    afile = tmp_path / "notes.txt"
    afile.write_text("keep", encoding="utf-8")
    expect_error(capsys, ["download", "a/b", "--dir", str(afile)], f"{afile} is a file; give --dir a folder")
    expect_error(capsys, ["download", "a/b", "--dir", str(afile / "sub")], "cannot make the folder", "Not a directory")
    assert afile.read_text(encoding="utf-8") == "keep"


def test_sharded_checkpoint_missing_shard(make_checkpoint, capsys):
    folder = make_checkpoint(shards=3)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[1]
    (folder / shard).unlink()
    expect_error(capsys, generate_args(folder), shard)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_shard(make_checkpoint, capsys):
    folder = make_checkpoint()
    _truncate(folder / "model.safetensors")
    expect_error(capsys, generate_args(folder), "model.safetensors")


def test_truncated_shard_in_a_sharded_checkpoint(make_checkpoint, capsys):
    folder = make_checkpoint(shards=2)
    shard = "model-00002-of-00002.safetensors"
    _truncate(folder / shard)
    expect_error(capsys, ["score", folder, "--text", "Hello world", *GEN], shard)


def test_wrong_tensor_shape_names_the_tensor(make_checkpoint, capsys):
    name = "model.layers.1.linear_attn.in_proj_z.weight"
    folder = make_checkpoint(extra_tensors={name: torch.randn(7, 64)})
    line = expect_error(capsys, generate_args(folder), name, "[7, 64]")
    assert "[64, 64]" in line  # and the expected shape


def test_unknown_model_type(make_checkpoint, capsys):
    folder = make_checkpoint()
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "llama"
    (folder / "config.json").write_text(json.dumps(cfg))
    expect_error(capsys, generate_args(folder), "model_type", "llama")


@pytest.mark.parametrize("field, value, words", [
    ("hidden_size", None, "hidden_size must be a whole number of at least 1, got None"),
    ("num_hidden_layers", "4", "num_hidden_layers must be a whole number"),
    ("num_experts", 2.5, "num_experts must be a whole number"),
    ("vocab_size", 0, "vocab_size must be a whole number of at least 1, got 0"),
    ("num_key_value_heads", 3, "num_attention_heads (4) must be a multiple of num_key_value_heads (3)"),
    ("num_experts_per_tok", 99, "num_experts_per_tok (99) is more than num_experts"),
    ("rms_norm_eps", -1, "rms_norm_eps must be a finite number above 0, got -1"),
    ("threshold", 1.5, "threshold must be in (0, 1], got 1.5"),
    ("block_size", [], "block_size must be a whole number"),
    ("mask_token_id", "x", "mask_token_id must be a whole number of at least 0"),
    ("layer_types", 4, "layer_types must be a list"),
    ("rope_parameters", ["x"], "rope_parameters must be an object"),
    # (2**40 layers filled the RAM with their list, 2**40 experts with plan's table: just past the cap here)
    ("num_hidden_layers", 1_001, "num_hidden_layers 1,001 is past any model's (at most 1,000 here)"),
    ("num_experts", 4_097, "num_experts 4,097 is past any model's (at most 4,096 here)"),
    ("model_type", [], "model_type [] is not a Clover model"),
])
def test_a_config_field_of_the_wrong_kind_is_named(make_checkpoint, capsys, field, value, words):
    """config.json's fields are checked as read: a null, text, fraction or out-of-range count is one line naming
    the field and the file that set it (generation_config.json's diffusion fields come first); it was a traceback
    from int(), the tensor constructor or a modulo by zero, in plan too."""
    folder = make_checkpoint()
    name = "generation_config.json" if field in ("block_size", "mask_token_id") else "config.json"  # (read first)
    cfg = json.loads((folder / name).read_text())
    cfg[field] = value
    (folder / name).write_text(json.dumps(cfg))
    expect_error(capsys, generate_args(folder), f"error: {name}: {words}")
    if field in ("hidden_size", "num_experts"):
        expect_error(capsys, ["plan", str(folder), "--vram", "16GB"], f"error: config.json: {words}")


def test_invalid_json_config(make_checkpoint, capsys):
    folder = make_checkpoint()
    text = (folder / "config.json").read_text()
    (folder / "config.json").write_text(text[: len(text) // 2])
    expect_error(capsys, generate_args(folder), "config.json", "JSON")


def test_prompt_over_context_limit(make_checkpoint, capsys):
    from clover_local.tokenizer import ChatTokenizer

    folder = make_checkpoint()
    cfg = json.loads((folder / "config.json").read_text())
    cfg["max_position_embeddings"] = 24
    (folder / "config.json").write_text(json.dumps(cfg))
    prompt = "Hello world, the quick brown fox"
    n = len(ChatTokenizer.from_folder(folder).encode(prompt))
    assert n < 24
    expect_error(
        capsys, ["generate", folder, "-p", prompt, "--raw", "--max-new-tokens", "30", *GEN], str(n), "30", "24"
    )


# ---------------------------------------------------------------------------------------------- flags


def test_score_takes_one_of_text_file_and_standard_input(make_checkpoint, tmp_path, capsys, monkeypatch):
    """--text, --file, or (neither) the text piped in: the same scores from each; neither on a terminal, or both
    flags, is one error line."""
    folder = make_checkpoint()
    f = tmp_path / "t.txt"
    f.write_text("Hello world", encoding="utf-8")
    scores = []
    for args in (["--text", "Hello world"], ["--file", f], []):
        monkeypatch.setattr("sys.stdin", io.StringIO("Hello world"))
        assert run_cli(["score", folder, *args, "--json", *GEN]) == 0
        scores.append(json.loads(capsys.readouterr().out))
    assert scores[0]["token_ids"] and scores[0] == scores[1] == scores[2]

    monkeypatch.setattr("sys.stdin", Terminal("never read"))
    expect_error(capsys, ["score", folder, *GEN], "--text", "--file")
    expect_error(capsys, ["score", folder, "--text", "Hello", "--file", f, *GEN], "--text", "--file")
    line = expect_error(capsys, ["score", folder, "--file", tmp_path / "missing.txt", *GEN], "missing.txt")
    assert line.endswith("missing.txt: No such file or directory"), line  # the reason once, not Python's repr
    expect_error(capsys, ["score", folder, "--file", tmp_path, *GEN], "Is a directory")
    latin = tmp_path / "latin-1.txt"
    latin.write_bytes("café au lait".encode("latin-1"))
    expect_error(capsys, ["score", folder, "--file", latin, *GEN], "not UTF-8 text (byte 0xe9 at offset 3)",
                 "save it as UTF-8")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(latin.read_bytes()), encoding="utf-8"))
    expect_error(capsys, ["score", folder, *GEN], "cannot read standard input: not UTF-8 text (byte 0xe9 at offset 3)")


def test_generate_reads_its_prompt_from_a_file_or_stdin(make_checkpoint, tmp_path, capsys, monkeypatch):
    """`generate -f FILE` (and `-f -`: standard input, or neither flag with the text piped in) answers as `-p`
    with the file's text; with `-p` too, as `-p` with the file's text and then the question; neither, on a terminal,
    says how to give it, and a file that cannot be read is one error line."""
    folder = make_checkpoint(seed=4)
    f = tmp_path / "q.txt"
    f.write_text("reverse a b c\nand then d é", encoding="utf-8")
    args = ["generate", folder, "--raw", "--max-new-tokens", "9", "--json", *GEN]
    assert run_cli(args + ["-p", f.read_text(encoding="utf-8")]) == 0
    want = json.loads(capsys.readouterr().out)["token_ids"]
    assert run_cli(args + ["-f", str(f)]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == want
    monkeypatch.setattr("sys.stdin", io.StringIO(f.read_text(encoding="utf-8")))
    assert run_cli(args + ["-f", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == want
    monkeypatch.setattr("sys.stdin", io.StringIO(f.read_text(encoding="utf-8") + "\n"))  # `cat q.txt | …`
    assert run_cli(args) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == want

    monkeypatch.setattr("sys.stdin", Terminal("never read"))
    expect_error(capsys, ["generate", folder, *GEN], "give --prompt TEXT or --file F, or pipe")
    # both: the file (a document), then the question about it
    assert run_cli(args + ["-p", f"{f.read_text(encoding='utf-8')}\n\nwhat is it?"]) == 0
    both = json.loads(capsys.readouterr().out)["token_ids"]
    assert run_cli(args + ["-f", str(f), "-p", "what is it?"]) == 0
    assert json.loads(capsys.readouterr().out)["token_ids"] == both
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    expect_error(capsys, ["generate", folder, "-f", empty, "-p", "what is it?", *GEN],
                 f"{empty} is empty: nothing for --prompt to ask about")
    expect_error(capsys, ["generate", folder, "-f", f, "-p", " ", *GEN], "the question is empty (--prompt)")
    expect_error(capsys, ["generate", folder, "-f", tmp_path / "missing.txt", *GEN], "missing.txt")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe not utf-8 \x80")
    expect_error(capsys, ["generate", folder, "-f", tmp_path / "bad.txt", *GEN], "bad.txt")


@pytest.mark.parametrize(
    "flag,value",
    [("--threshold", "2"), ("--threshold", "-0.5"), ("--threshold", "0"), ("--temperature", "-1"), ("--top-p", "1.5"),
     ("--presence-penalty", "2.5"), ("--frequency-penalty", "-3"), ("--repetition-penalty", "0")],
)
def test_out_of_range_flags(make_checkpoint, capsys, flag, value):
    folder = make_checkpoint()
    expect_error(capsys, generate_args(folder, flag, value), flag, value)


def test_decoding_ranges_agree_on_the_command_line_in_set_and_in_requests():
    """Each decoding setting takes the same values as a flag (chat's and generate's one check), chat's /set and a
    request field (where the wire formats do not keep their own range: the temperature's is OpenAI's 2)."""
    from clover_local.chat.conversation import ChatSettings, set_value
    from clover_local.commands._sampling_options import check_decoding
    from clover_local.errors import CloverError
    from clover_local.generate.ranges import DECODE_RANGES
    from clover_local.serve.protocol import ApiError, parse_chat_request

    flags = dict(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, threshold=None, reveal_factor=0.0)
    for name, r in DECODE_RANGES.items():
        for value in (r.low, r.low - 0.5, r.high, r.high + 0.5, (r.low + r.high) / 2):
            want = r.allows(value)
            try:
                check_decoding(**{**flags, name: value})
                flag_ok = True
            except CloverError as e:
                flag_ok = False
                assert f"--{name.replace('_', '-')} must be in {r}" in str(e)
            try:
                set_value(ChatSettings(), name, str(value))
                set_ok = True
            except CloverError:
                set_ok = False
            assert (flag_ok, set_ok) == (want, want), (name, value)
            if name == "temperature":
                continue
            try:
                parse_chat_request(json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                               name: value}).encode())
                field_ok = True
            except ApiError:
                field_ok = False
            assert field_ok == want, (name, value)


def test_max_new_tokens_zero(make_checkpoint, capsys):
    folder = make_checkpoint()
    expect_error(capsys, ["generate", folder, "-p", "hi", "--raw", "--max-new-tokens", "0", *GEN], "--max-new-tokens")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_gpu(make_checkpoint, capsys):
    folder = make_checkpoint()
    args = ["generate", folder, "-p", "hi", "--raw", "--device", "cuda", "--dtype", "float32"]
    expect_error(capsys, args, "cuda")


def test_bad_dtype_and_device(make_checkpoint, capsys):
    folder = make_checkpoint()
    expect_error(capsys, ["generate", folder, "-p", "hi", "--raw", "--device", "cpu", "--dtype", "int3"], "int3")
    expect_error(capsys, ["generate", folder, "-p", "hi", "--raw", "--device", "tpu9", "--dtype", "float32"], "tpu9")


# ---------------------------------------------------------------------------------------------- a real terminal


def test_real_process_prints_one_line_no_traceback(make_checkpoint):
    folder = make_checkpoint()
    _truncate(folder / "model.safetensors")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(
        [sys.executable, "-m", "clover_local", "generate", str(folder), "-p", "hi", "--raw", *GEN],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "model.safetensors" in lines[0], proc.stderr
    assert proc.stdout == ""


# ---------------------------------------------------------------------------------------------- happy path


def test_generate_json_and_text(make_checkpoint, capsys):
    folder = make_checkpoint(seed=4)
    assert run_cli(generate_args(folder, "--max-new-tokens", "11", "--json")) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    lines = out.strip().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert set(obj) == {"text", "reasoning", "token_ids", "stats", "stopped"}
    assert obj["reasoning"] == "" and obj["stopped"] is False  # --raw: nothing split off
    assert set(obj["stats"]) == {"tokens", "passes", "tokens_per_pass", "seconds", "tokens_per_second"}
    assert len(obj["token_ids"]) <= 11 and obj["stats"]["tokens"] == len(obj["token_ids"])
    assert obj["stats"]["passes"] >= 1
    assert obj["stats"]["tokens_per_pass"] == pytest.approx(obj["stats"]["tokens"] / obj["stats"]["passes"], abs=1e-4)
    assert isinstance(obj["text"], str)

    from clover_local.tokenizer import ChatTokenizer

    assert obj["text"] == ChatTokenizer.from_folder(folder).decode(obj["token_ids"])

    # without --json: the same (greedy) text streamed on stdout, the stats line on stderr
    assert run_cli(generate_args(folder, "--max-new-tokens", "11")) == 0
    out2, err2 = capsys.readouterr()
    assert out2 == obj["text"] + "\n"
    assert "tokens" in err2 and "passes" in err2 and "Traceback" not in err2


def test_generate_with_chat_template_and_sampling(make_checkpoint, capsys):
    folder = make_checkpoint(seed=6)
    args = ["generate", folder, "-p", "add 12+30", "--no-think", "--max-new-tokens", "9", "--temperature", "1",
            "--top-p", "0", "--seed", "3", "--json", *GEN]
    assert run_cli(args) == 0  # top-p 0 is in the accepted range (DECODE_RANGES): it keeps the top token
    obj = json.loads(capsys.readouterr().out)
    assert 1 <= len(obj["token_ids"]) <= 9


def test_command_list_gives_each_command_one_sentence(capsys, monkeypatch):
    """`clover-local --help` on a wide terminal: every command's summary fits its own line (a docstring's first
    paragraph wrapped in the source used to break mid-sentence in the list)."""
    monkeypatch.setenv("COLUMNS", "250")
    assert run_cli(["--help"]) == 0
    out = capsys.readouterr().out
    panel = out[out.index("Commands"):].splitlines()[1:]
    rows = [line.strip("│ ").rstrip() for line in panel if line.startswith("│")]
    names = ["bench", "chat", "demo", "generate", "download", "upload", "plan", "quantize", "eval", "score", "serve",
             "tune", "cache", "doctor"]
    assert sorted(r.split()[0] for r in rows) == sorted(names), rows  # one line per command, nothing else
    assert all(r.endswith(".") for r in rows), rows


def test_shipped_name_is_not_hidden_by_an_unrelated_local_folder(tmp_path, monkeypatch):
    from clover_local.loader import SHORT_NAMES, resolve_model_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()  # e.g. a user's own folder of notes
    assert resolve_model_path("tiny") == SHORT_NAMES["tiny"]
    (tmp_path / "tiny" / "config.json").write_text("{}")  # a model folder of that name is what was meant
    assert resolve_model_path("tiny") == Path("tiny")
    assert resolve_model_path(str(tmp_path / "tiny")) == tmp_path / "tiny"


def test_a_revision_names_a_hub_commit_not_a_local_model(make_checkpoint, tmp_path, capsys):
    """`--revision` pins a Hub repo; given a folder or a shipped name it is one line, before anything is read."""
    folder = make_checkpoint()
    for src in (folder, "tiny"):
        expect_error(capsys, ["quantize", src, "--out", tmp_path / "out", "--revision", "v2"],
                     "--revision applies to Hub repo ids", str(src))
        assert not (tmp_path / "out").exists()
    expect_error(capsys, ["eval", folder, "--reference", "tiny", "--revision", "v2"], "--revision applies to Hub")


@pytest.mark.parametrize("command", [["chat", "tiny"], ["demo"]], ids=["chat", "demo"])
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "11"])
def test_pace_outside_zero_to_ten_seconds_is_refused(capsys, command, value):
    """--pace is seconds a pass stays on screen: nan and inf were taken (demo took anything from 0 up) and ended
    in time.sleep's traceback at the first pass on a terminal; chat and demo refuse the same values, before
    anything loads."""
    expect_error(capsys, [*command, "--pace", value], "--pace", "between 0 and 10 seconds", value)
