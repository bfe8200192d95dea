"""clover-local: quantize, run and share Clover-35B-A3B-Preview on one 16 GB GPU."""

__version__ = "0.1.0"
