"""A TPU's default precision for fp32 matrix products, simulated on XLA:CPU.

torch_xla multiplies fp32 matrices at `torch_xla.backends.get_mat_mul_precision()`, "default" unless set: on a TPU
that rounds both operands of every matrix product (forward and backward) to bf16 and accumulates the products in
fp32 (`torch_xla/backends/__init__.py`). XLA:CPU multiplies fp32 exactly, so a check run on the CPU ("equals an fp32
run within 1e-5") cannot see what a TPU computes: about 6e-4 apart after lesson 4's few SGD steps.

With COURSE_XLA_CPU_MATMULS=tpu in the environment, every XLA:CPU process that `xla.run` starts computes as a TPU does
at "default": the fp32 operands of matrix products on an XLA device are rounded to bf16 first (a bf16 x bf16 product
is exact in fp32, so what remains is fp32 accumulation, as on the TPU's matrix units). Tensors on the CPU are left
exact, like the CPU beside a real TPU. Left unset (or "exact"), XLA:CPU multiplies exactly.
"""

from __future__ import annotations

import functools
import os

from .language import say

ENV = "COURSE_XLA_CPU_MATMULS"
SETTINGS = ("exact", "tpu")


def setting(environ=None) -> str:
    """How XLA:CPU multiplies fp32 matrices in the XLA processes: "exact" (XLA:CPU's own) or "tpu" (simulated)."""
    value = (os.environ if environ is None else environ).get(ENV, "exact")
    if value not in SETTINGS:
        raise ValueError(say("{env} must be one of {settings}, got {value!r}", env=ENV, settings=', '.join(SETTINGS),
                             value=value))
    return value


def as_set(fn):
    """`fn`, to run in an XLA process with the matmul precision the environment asks for (`run_as_set`). What is not
    callable comes back as it is, for the runner to refuse."""
    return functools.partial(run_as_set, fn) if callable(fn) else fn


def run_as_set(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` in an XLA process, with a TPU's default matmul precision simulated when the environment
    asks for it (on XLA:CPU only: a real TPU needs no simulation)."""
    __tracebackhide__ = True
    if setting() == "tpu" and os.environ.get("PJRT_DEVICE") == "CPU":
        with tpu_default_matmuls():
            return fn(*args, **kwargs)
    return fn(*args, **kwargs)


def tpu_default_matmuls():
    """A context in which the fp32 operands of matrix products on XLA devices are rounded to bf16 before the product
    (torch's dispatch, below autograd: the backward's products too)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    # the positions of the two matrix operands: a bias added to the product stays fp32, as on the TPU
    operands = {aten.mm.default: (0, 1), aten.bmm.default: (0, 1), aten.addmm.default: (1, 2),
                aten.baddbmm.default: (1, 2), aten.convolution.default: (0, 1)}

    def rounded(tensor):
        if tensor.dtype == torch.float32 and tensor.device.type == "xla":
            return tensor.to(torch.bfloat16).to(torch.float32)
        return tensor

    class TPUDefaultMatmuls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            positions = operands.get(func, ())
            args = tuple(rounded(a) if i in positions else a for i, a in enumerate(args))
            return func(*args, **(kwargs or {}))

    return TPUDefaultMatmuls()
