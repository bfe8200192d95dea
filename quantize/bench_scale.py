"""Scale benchmark for the quantizer (a benchmark, not a test): real-size layers, random BF16 weights.

    python -m quantize.bench_scale --work /tmp/clover-scale --device cpu [--layers 1 2] [--json] [QUANTIZE FLAGS]

(flags it does not know, e.g. `--no-clip --no-act-order`, go to `clover-local quantize`)

Writes synthetic checkpoints with the real shapes (hidden 2048, 256 experts of 512, real GDN/attention, real
248,320 vocabulary) of 1 and of 2 decoder layers, quantizes each in a fresh process, and reports peak host
RSS (which must not grow with the layer count), seconds per layer, and the projection for 40 layers.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

SAMPLES, SEQ_LEN = 4, 256


def _make(work: Path, n_layers: int) -> Path:
    from clover_local.checkpoint.synthetic import REAL_SPEC, write_streaming_checkpoint
    from clover_local.tiny.tokenizer_build import build_tokenizer, write_tokenizer_assets

    folder = work / f"real-{n_layers}"
    if (folder / "model.safetensors.index.json").exists():
        return folder
    # 3 GDN layers for each attention layer, as in the real model; 2 layers = one of each kind
    kinds = ["linear_attention", "full_attention"][:n_layers] if n_layers <= 2 else None
    write_streaming_checkpoint(folder, REAL_SPEC, kinds)
    texts = [f"sample {i}: the quick brown fox jumps over the lazy dog {i * 7919}." for i in range(300)]
    write_tokenizer_assets(build_tokenizer(texts, 512), folder)
    calib = folder / "calibration.jsonl"
    calib.write_text("\n".join(json.dumps({"text": t * 20}) for t in texts) + "\n")
    return folder


def _run(src: Path, out: Path, device: str, extra: list[str] | None = None) -> dict:
    cmd = [sys.executable, "-m", "clover_local", "quantize", str(src), "--out", str(out), "--overwrite",
           "--samples", str(SAMPLES), "--seq-len", str(SEQ_LEN), "--device", device, "--no-eval", "--json",
           *(extra or [])]
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"quantize failed: {proc.stderr.strip()}")
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    summary = json.loads(proc.stdout)
    return {"wall_s": round(time.perf_counter() - t0, 1), "peak_rss_gib": round(max(peak_kib, before) / 2**20, 3),
            "layers": summary["layers"], "pack_bytes": summary["pack_bytes"], "source_bytes": summary["source_bytes"],
            "peak_device_bytes": summary["peak_device_bytes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", action="store_true")
    args, quantize_flags = parser.parse_known_args()
    if args.work.exists() and not args.work.is_dir():
        raise SystemExit(f"error: --work {args.work} is a file, not a folder")
    try:
        args.work.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # read-only place, a parent that is a file: one line, not a traceback
        raise SystemExit(f"error: cannot create --work {args.work}: {exc.strerror or exc}") from None
    results = {}
    for n in args.layers:
        src = _make(args.work, n)
        # each run in its own interpreter so peak RSS is that run's alone
        code = ("import json,sys; from pathlib import Path; from quantize.bench_scale import _run; "
                f"print(json.dumps(_run(Path({str(src)!r}), Path({str(args.work / f'pack-{n}')!r}), {args.device!r}, "
                f"{quantize_flags!r})))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(proc.stderr.strip().splitlines()[-1])
        results[n] = json.loads(proc.stdout)
    per_layer = [l["seconds"] for r in results.values() for l in r["layers"]]
    report = {
        "device": args.device, "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "calibration": f"{SAMPLES} x {SEQ_LEN} tokens", "runs": results,
        "seconds_per_layer_mean": round(sum(per_layer) / len(per_layer), 1),
        "projected_40_layers_hours": round(40 * sum(per_layer) / len(per_layer) / 3600, 2),
    }
    if len(results) >= 2:
        a, b = (results[k]["peak_rss_gib"] for k in sorted(results)[:2])
        report["peak_rss_ratio"] = round(b / a, 3)
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
