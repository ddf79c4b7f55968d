"""Evaluate a constant subgraph of data-movement ops with numpy (no compile).

:class:`~mlc_mlir.graph.fold_constant.FoldConstant` folds layout transforms of weights
(``linalg.transpose`` of a filter made by ``ConvToNHWC``, reshapes, slices, pads). Compiling
them would push every weight through the LLVM backend as a global initializer: 11.8 s of the
ResNet-18 compile (45 MB of filters) for what ``np.transpose`` does in milliseconds. This module
interprets those ops on numpy arrays; a subgraph with any other op (a ``linalg.generic``, a
contraction) returns ``None`` and the pass compiles it instead.

Ops: ``arith.constant`` (tensors: dense, splat or a ``dense_resource`` indexed in the module's
:class:`~mlc_mlir.ir.constants.Blobs`; scalars), ``tensor.empty``, ``linalg.fill``,
``linalg.transpose``, ``linalg.broadcast``, ``linalg.copy``, ``tensor.collapse_shape``,
``tensor.expand_shape``, ``tensor.reshape``, ``tensor.extract_slice`` / ``tensor.insert_slice``
(static offsets, sizes and strides) and ``tensor.pad`` (static, a constant padding value).

Source: TVM Relay ``FoldConstant`` (evaluates with the interpreter) and MLIR's
``DenseElementsAttr`` folders of ``tensor``/``linalg.transpose``.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

import numpy as np

from .._mlir import ir
from ..ir import dtypes
from ..ir.constants import Blobs, constant_array
from .linalg_attrs import int_list
from .use_def import used_values


def _ints(op, name: str) -> List[int]:
    return int_list(op.attributes[name])


def _result_shape(op, i: int = 0):
    return tuple(ir.RankedTensorType(op.results[i].type).shape)


def _result_dtype(op, i: int = 0):
    t = ir.RankedTensorType(op.results[i].type)
    return dtypes.to_numpy_dtype(dtypes.from_ir_type(t.element_type))


def _static(values: List[int]) -> bool:
    return all(v != ir.ShapedType.get_dynamic_size() and v != ir.ShapedType.get_dynamic_stride_or_offset()
               for v in values)


def _slices(op) -> Optional[tuple]:
    offsets, sizes, strides = (_ints(op, n) for n in ("static_offsets", "static_sizes", "static_strides"))
    if not (_static(offsets) and _static(sizes) and _static(strides)):
        return None
    return tuple(slice(o, o + (s - 1) * st + 1, st) for o, s, st in zip(offsets, sizes, strides)), sizes


def _constant(op, args, blobs):
    t = op.results[0].type
    if isinstance(t, ir.RankedTensorType):
        return constant_array(op.attributes["value"], blobs)
    attr = op.attributes["value"]
    for cls in (ir.FloatAttr, ir.IntegerAttr, ir.BoolAttr):
        try:
            return cls(attr).value
        except ValueError:
            continue
    return None


def _extract_slice(op, args, blobs):
    s = _slices(op)
    if s is None or len(op.operands) != 1:
        return None
    return np.ascontiguousarray(args[0][s[0]]).reshape(_result_shape(op))


def _insert_slice(op, args, blobs):
    s = _slices(op)
    if s is None or len(op.operands) != 2:
        return None
    out = np.array(args[1], copy=True)
    out[s[0]] = args[0].reshape(tuple(s[1]))
    return out


def _pad(op, args, blobs):
    low, high = _ints(op, "static_low"), _ints(op, "static_high")
    if len(op.operands) != 1 or not (_static(low) and _static(high)):
        return None
    body = op.regions[0].blocks[0]
    yielded = list(body.operations)[-1].operands[0]
    owner = yielded.owner
    if isinstance(owner, ir.Block):
        return None  # the padding value is an index of the body
    if owner.operation.block == body:  # a constant in the body, else computed there
        value = _constant(owner.operation, [], blobs) if owner.operation.name == "arith.constant" else None
    else:  # captured from above: the last used value
        value = args[-1] if len(args) > 1 else None
    if value is None:
        return None
    return np.pad(args[0], list(zip(low, high)), constant_values=value)


def _broadcast(op, args, blobs):
    dims = _ints(op, "dimensions")
    shape = _result_shape(op)
    src = np.expand_dims(args[0], tuple(dims)) if dims else args[0]
    return np.ascontiguousarray(np.broadcast_to(src, shape))


_EVAL: Dict[str, Callable] = {
    "arith.constant": _constant,
    "tensor.empty": lambda op, args, blobs: np.zeros(_result_shape(op), _result_dtype(op)),
    "linalg.fill": lambda op, args, blobs: np.full(_result_shape(op), args[0], _result_dtype(op)),
    "linalg.transpose": lambda op, args, blobs: np.ascontiguousarray(np.transpose(args[0], _ints(op, "permutation"))),
    "linalg.copy": lambda op, args, blobs: np.array(args[0], dtype=_result_dtype(op), copy=True),
    "linalg.broadcast": _broadcast,
    "tensor.collapse_shape": lambda op, args, blobs: args[0].reshape(_result_shape(op)),
    "tensor.expand_shape": lambda op, args, blobs: args[0].reshape(_result_shape(op)),
    "tensor.reshape": lambda op, args, blobs: args[0].reshape(_result_shape(op)),
    "tensor.extract_slice": _extract_slice,
    "tensor.insert_slice": _insert_slice,
    "tensor.pad": _pad,
}


#: The ops :func:`evaluate_with_numpy` interprets.
NUMPY_OPS = frozenset(_EVAL)


def evaluate_with_numpy(ops, outputs, blobs: Blobs) -> Optional[List[np.ndarray]]:
    """Values of ``outputs`` computed by interpreting ``ops`` (in order) with numpy, or ``None``
    when an op is not in the table above or a constant's bytes are unknown (the caller compiles
    the subgraph instead).

    Parameters
    ----------
    ops : list of ir.Operation
        A constant subgraph in program order (its inputs are constants among ``ops``).
    outputs : list of ir.Value
        Results of ``ops`` to return.
    blobs : Blobs
        The module's weight buffers, for ``dense_resource`` constants.
    """
    env: Dict = {}
    for op in ops:
        fn = _EVAL.get(op.name)
        if fn is None:
            return None
        try:
            args = [env[v] for v in used_values(op)]
        except KeyError:
            return None
        value = fn(op, args, blobs)
        if value is None:
            return None
        if isinstance(value, np.ndarray) and op.results and isinstance(op.results[0].type, ir.RankedTensorType):
            if value.shape != _result_shape(op):
                return None
            value = value.astype(_result_dtype(op), copy=False)
        env[op.results[0]] = value
    try:
        return [np.ascontiguousarray(env[r]) for r in outputs]
    except KeyError:
        return None
