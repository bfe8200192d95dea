"""Calibration texts written for clover-local (see README.md); `clover_calib.jsonl` is the default set."""
