"""clover-local: quantize, run and share Clover-35B-A3B-Preview on one 16 GB GPU."""

import os

__version__ = "0.1.0"

# Triton 3.9 compiles a·b + c into one fused multiply-add by default but warns, once per process and onto the chat's
# screen, that 3.10 will not; our kernels (and fla's) were checked against their references and timed with it on.
# So: on under every triton, and quiet. A setting of the user's own wins.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
