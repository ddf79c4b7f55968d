"""Neural-network ops (TOPI's ``nn`` category): matmul, batch_matmul, dense, conv2d, pooling,
normalization and softmax, emitted as linalg named ops where upstream has one
(``linalg.matmul``, ``linalg.batch_matmul``, ``linalg.conv_2d_nchw_fchw``, ``linalg.pooling_*``)
and as ``linalg.generic`` otherwise.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from .._mlir import ir, linalg_d
from ..errors import BuildError, format_shape
from . import elementwise, emit
from .graph_builder import Tensor


def _check_rank(op: str, arg: str, t: Tensor, rank: int, layout: str) -> None:
    if t.ndim != rank:
        raise BuildError(f"{op}: argument '{arg}' has shape {format_shape(t.shape)}; expected rank "
                         f"{rank} ({layout})")


def _same_dtype(op: str, a: Tensor, b: Tensor, bname: str = "b", aname: str = "a") -> None:
    if a.dtype != b.dtype:
        raise BuildError(f"{op}: argument '{bname}' has dtype {b.dtype}; expected {a.dtype} like "
                         f"'{aname}' (use ops.cast)")


def _zero(dtype: str):
    return 0.0 if dtype.startswith(("float", "bfloat")) else 0


def matmul(a, b, name: Optional[str] = None) -> Tensor:
    """``a @ b`` for 2-D operands: ``linalg.matmul`` accumulating into a zero-filled init.

    a: (M, K), b: (K, N), same dtype (float* or int*); returns (M, N).

    Raises
    ------
    BuildError
        On ranks other than 2, mismatched inner dimensions or dtypes.
    """
    fn = emit.function_of("matmul", a, b)
    dtype = a.dtype if isinstance(a, Tensor) else b.dtype
    a = emit.as_tensor("matmul", "a", fn, a, dtype)
    b = emit.as_tensor("matmul", "b", fn, b, dtype)
    _check_rank("matmul", "a", a, 2, "M, K")
    _check_rank("matmul", "b", b, 2, "K, N")
    if a.shape[1] != b.shape[0]:
        raise BuildError(f"matmul: argument 'b' has shape {format_shape(b.shape)}; expected "
                         f"({a.shape[1]}, N) to match a's inner dimension {a.shape[1]}")
    nm = emit.op_name(fn, "matmul", name)
    init = emit.filled((a.shape[0], b.shape[1]), dtype, _zero(dtype), f"{nm}.init")
    r = linalg_d.matmul(a.value, b.value, outs=[init])
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def batch_matmul(a, b, name: Optional[str] = None) -> Tensor:
    """Batched ``a @ b``: ``linalg.batch_matmul``. a: (B, M, K), b: (B, K, N) -> (B, M, N).

    Raises
    ------
    BuildError
        On ranks other than 3, or mismatched batch/inner dimensions or dtypes.
    """
    fn = emit.function_of("batch_matmul", a, b)
    dtype = a.dtype if isinstance(a, Tensor) else b.dtype
    a = emit.as_tensor("batch_matmul", "a", fn, a, dtype)
    b = emit.as_tensor("batch_matmul", "b", fn, b, dtype)
    _check_rank("batch_matmul", "a", a, 3, "B, M, K")
    _check_rank("batch_matmul", "b", b, 3, "B, K, N")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise BuildError(f"batch_matmul: argument 'b' has shape {format_shape(b.shape)}; expected "
                         f"({a.shape[0]}, {a.shape[2]}, N) to match a {format_shape(a.shape)}")
    nm = emit.op_name(fn, "batch_matmul", name)
    init = emit.filled((a.shape[0], a.shape[1], b.shape[2]), dtype, _zero(dtype), f"{nm}.init")
    r = linalg_d.batch_matmul(a.value, b.value, outs=[init])
    emit.set_name(r.owner, nm)
    return Tensor(r, fn)


def dense(x, weight, bias=None, name: Optional[str] = None) -> Tensor:
    """Fully connected layer ``x @ weight.T + bias`` (TVM ``nn.dense``, PyTorch ``Linear``).

    x: (M, K); weight: (N, K); bias: (N,) or None; same dtype. Emits a ``linalg.matmul`` named
    ``name``: a numpy ``weight`` becomes the constant ``weight.T`` (K, N) (the layout transform
    is done at build time); a Tensor ``weight`` is read through transposed-B indexing maps (no
    transpose is materialized). The bias add is a broadcasting ``linalg.generic`` named
    ``<name>.bias_add``.

    Raises
    ------
    BuildError
        On rank or dimension mismatches: ``dense: argument 'weight' has shape (10, 65); expected
        (N, 64) to match x's last dimension 64``.
    """
    fn = emit.function_of("dense", x, weight, bias)
    if not isinstance(x, Tensor):
        raise BuildError(f"dense: argument 'x' is {type(x).__name__}; expected a Tensor")
    w = emit.as_tensor("dense", "weight", fn, weight, x.dtype)
    _check_rank("dense", "x", x, 2, "M, K")
    _check_rank("dense", "weight", w, 2, "N, K")
    if w.shape[1] != x.shape[1]:
        raise BuildError(f"dense: argument 'weight' has shape {format_shape(w.shape)}; expected "
                         f"(N, {x.shape[1]}) to match x's last dimension {x.shape[1]}")
    n = w.shape[0]
    b = None
    if bias is not None:
        b = emit.as_tensor("dense", "bias", fn, bias, x.dtype)
        if b.shape != (n,):
            raise BuildError(f"dense: argument 'bias' has shape {format_shape(b.shape)}; expected ({n},)")
    nm = emit.op_name(fn, "dense", name)
    init = emit.filled((x.shape[0], n), x.dtype, _zero(x.dtype), f"{nm}.init")
    if isinstance(weight, np.ndarray):
        # a constant weight is stored transposed (K, N): the layout transform happens at
        # build time and the op is a plain linalg.matmul (contiguous B rows for packing)
        wt = emit.constant(fn, np.ascontiguousarray(weight.T), name=f"{nm}.weight_t")
        r = linalg_d.matmul(x.value, wt.value, outs=[init])
    else:
        d0, d1, d2 = (ir.AffineDimExpr.get(i) for i in range(3))
        maps = [ir.AffineMap.get(3, 0, [d0, d2]), ir.AffineMap.get(3, 0, [d1, d2]),
                ir.AffineMap.get(3, 0, [d0, d1])]
        r = linalg_d.matmul(x.value, w.value, outs=[init], indexing_maps=maps)
    emit.set_name(r.owner, nm)
    y = Tensor(r, fn)
    if b is not None:
        y = elementwise.add(y, b, name=f"{nm}.bias_add")
    return y
