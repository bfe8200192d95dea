"""The quantization pipeline: GPTQ core, calibration, layer streaming, packing and evaluation.

Kept apart from `clover_local` so the runner never imports calibration code, while packs written here stay
readable by any GPTQ-aware loader (see `quantize.gptq_format`).
"""
