"""A one-line Triton kernel around `w4a16._rounded16` for `test_rounded16_is_round_to_nearest_even_like_torch`.

Its own module, defined at the top level: a jit function finds the helpers it calls among its module's globals,
and triton 3.6's interpreter (the H200 machine's version, `docs/gpu_versions_check.sh`) cannot read the source of
one defined inside an `if` block. Imported only where triton is (the test is `needs_triton`)."""

import triton
import triton.language as tl

from clover_local.runtime.kernels.w4a16 import _rounded16


@triton.jit
def round_kernel(x_ptr, y_ptr, BF16: tl.constexpr, N: tl.constexpr):
    o = tl.arange(0, N)
    tl.store(y_ptr + o, _rounded16(tl.load(x_ptr + o), BF16))
