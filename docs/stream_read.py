"""One real-size decoder layer read from disk and read by byte range from a Hub (`quantize --stream`'s reader):
seconds and peak RSS of each (a benchmark, not a test; BENCHMARKS.md "Reading a checkpoint from the Hub").

    PYTHONPATH=. python docs/stream_read.py --work /tmp/clover-stream [--json]
    PYTHONPATH=. python docs/stream_read.py --work /tmp/clover-stream --quantize   # whole runs, 2 layers

Writes a synthetic BF16 checkpoint with the real shapes and one GDN layer (1.65 GB of layer weights, 1.0 GB each
of embeddings and LM head; reused when present), serves it from tests/hub_standin.py in a process of its own on
127.0.0.1, and reads layer 0 in a fresh process per form: from the local shards, and streamed with 8 parts in
flight and with 1. On loopback the figures are the reader's own ceiling (Python, HTTP, one copy into the
tensor's buffer), not a home line's: they say whether the reader could be what a run waits for. Peak RSS says
whether a streamed layer is held once (its bytes) or twice.

With --quantize: `clover-local quantize` of quantize/bench_scale.py's real-size 2-layer checkpoint (one GDN, one
attention layer), from the folder and with --stream from the stand-in, each in a fresh interpreter: wall time and
peak RSS (the streamed run holds the next layer while it quantizes this one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO = "bench/clover-real-1"


def _make(work: Path) -> Path:
    from clover_local.checkpoint.synthetic import REAL_SPEC, write_streaming_checkpoint

    folder = work / "real-1"
    if not (folder / "model.safetensors.index.json").exists():
        write_streaming_checkpoint(folder, REAL_SPEC, ["linear_attention"])
    return folder


def _serve(folder: Path, url_file: Path) -> None:
    """The stand-in Hub holding `folder` as REPO, until killed (shards mapped, not read into this process)."""
    import mmap

    sys.path.insert(0, str(ROOT / "tests"))
    from hub_standin import HubStandin

    def content(p: Path):
        if p.suffix != ".safetensors":
            return p.read_bytes()
        with open(p, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    hub = HubStandin(max_requests=1_000_000, max_seconds=7200).start()
    hub.add_repo(REPO, {p.name: content(p) for p in folder.iterdir() if p.is_file()})
    url_file.write_text(hub.url)
    while True:
        time.sleep(60)


def _rss_gb() -> float:
    """This process's peak RSS (VmHWM: per process image; ru_maxrss would carry the parent's peak over exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def _read(form: str, folder: Path) -> dict:
    """Layer 0's tensors, each touched (a local shard is mapped: its pages are read when used)."""
    import torch

    from clover_local.checkpoint.reader import CheckpointReader
    from clover_local.hub import remote_shards

    rss0 = _rss_gb()
    t0 = time.perf_counter()
    if form == "local":
        reader, remote = CheckpointReader(folder), None
    else:
        remote_shards.PARALLEL = int(form.split("-")[1])
        small, remote = remote_shards.open_remote_checkpoint(REPO)
        for shard in remote.sizes:
            remote.open(shard)  # the headers, once a run: not this layer's cost
        reader = CheckpointReader(small, remote=remote)
        t0 = time.perf_counter()
    state = reader.layer_state(0)
    for t in state.values():  # a byte of every page
        t.reshape(-1).view(torch.uint8)[::4096].sum()
    total = sum(t.numel() * t.element_size() for t in state.values())
    seconds = time.perf_counter() - t0
    return {"form": form, "layer_bytes": int(total), "seconds": round(seconds, 2),
            "gb_per_s": round(total / seconds / 1e9, 3), "peak_rss_gb": round(_rss_gb(), 2),
            "rss_before_gb": round(rss0, 2), "requests": remote.requests if remote else 0}


def _quantize(work: Path, env: dict) -> list[dict]:
    """bench_scale's 2-layer run from the folder, then with --stream, each in an interpreter of its own."""
    from quantize.bench_scale import _make as make_real

    folder = make_real(work, 2)
    calib = ["--calib", str(folder / "calibration.jsonl")]  # a Hub read takes the model's files only
    rows = []
    for form, src, extra, run_env in (("local", str(folder), calib, {**os.environ, "OMP_NUM_THREADS": "1"}),
                                      ("stream", REPO, ["--stream", *calib], env)):
        code = ("import json; from quantize.bench_scale import _run; "
                f"print(json.dumps(_run({src!r}, __import__('pathlib').Path({str(work / ('pack-' + form))!r}), "
                f"'cpu', {extra!r})))")
        out = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr.strip().splitlines()[-1])
        row = json.loads(out.stdout)
        rows.append({"form": form, "wall_s": row["wall_s"], "peak_rss_gib": row["peak_rss_gib"],
                     "seconds_per_layer": [layer["seconds"] for layer in row["layers"]]})
    shards = sorted(p.name for p in (work / "pack-local").glob("*.safetensors"))
    rows[-1]["same_pack"] = all((work / "pack-local" / n).read_bytes() == (work / "pack-stream" / n).read_bytes()
                                for n in shards)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/clover-stream"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quantize", action="store_true", help="whole quantize runs of 2 real-size layers instead")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--serve-folder", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--read", help=argparse.SUPPRESS)
    args = ap.parse_args()
    folder = args.work / "real-1"
    if args.serve:
        return _serve(args.serve_folder or folder, args.serve)
    if args.read:
        print(json.dumps(_read(args.read, folder)))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    if args.quantize:
        from quantize.bench_scale import _make as make_real

        folder = make_real(args.work, 2)
    else:
        _make(args.work)
    url_file = args.work / "url"
    url_file.unlink(missing_ok=True)
    served = ["--serve-folder", str(folder)] if args.quantize else []
    server = subprocess.Popen([sys.executable, __file__, "--work", str(args.work), "--serve", str(url_file), *served])
    try:
        while not url_file.exists():
            time.sleep(0.5)
        url = url_file.read_text()
        env = {**os.environ, "HF_ENDPOINT": url, "HF_HOME": str(args.work / "hf_home"), "OMP_NUM_THREADS": "1"}
        if args.quantize:
            rows = _quantize(args.work, env)
            print(json.dumps({"machine": f"{platform.machine()}, {os.cpu_count()} cores", "quantize": rows}))
            return
        rows = []
        for form in ("local", "stream-8", "stream-1"):
            out = subprocess.run([sys.executable, __file__, "--work", str(args.work), "--read", form], env=env,
                                 capture_output=True, text=True, check=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        server.kill()
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "rows": rows}
    if args.json:
        print(json.dumps(result))
        return
    print(f"layer 0 ({rows[0]['layer_bytes'] / 1e9:.2f} GB), {result['machine']}")
    for r in rows:
        print(f"  {r['form']:9s} {r['seconds']:6.2f} s  {r['gb_per_s']:.2f} GB/s  peak RSS {r['peak_rss_gb']:.2f} GB "
              f"(before {r['rss_before_gb']:.2f})  {r['requests']} GETs")


if __name__ == "__main__":
    main()
