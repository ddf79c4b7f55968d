"""``MergeProjections`` (``mlc-merge-projections``): matmuls that read the same input and
constant weights of the same K become one matmul over the weights concatenated along N, whose
result is sliced back into the original ones.

Before (Llama's q/k/v projections of one normalized hidden state ``%h``)::

    %a0 = tensor.collapse_shape %h [[0], [1, 2]] : tensor<1x1x768xf32> into tensor<1x768xf32>
    %q = linalg.matmul {mlc.name = "matmul"} ins(%a0, %wq : tensor<1x768xf32>, tensor<768x768xf32>)
    %a1 = tensor.collapse_shape %h [[0], [1, 2]] ...
    %k = linalg.matmul {mlc.name = "matmul_1"} ins(%a1, %wk : ..., tensor<768x256xf32>)
    %a2 = tensor.collapse_shape %h [[0], [1, 2]] ...
    %v = linalg.matmul {mlc.name = "matmul_2"} ins(%a2, %wv : ..., tensor<768x256xf32>)

After (``%wqkv`` a new constant, ``[wq | wk | wv]`` along N)::

    %qkv = linalg.matmul {mlc.name = "matmul"} ins(%a0, %wqkv : ..., tensor<768x1280xf32>)
    %q = tensor.extract_slice %qkv[0, 0] [1, 768] [1, 1]       // matmul.part0
    %k = tensor.extract_slice %qkv[0, 768] [1, 256] [1, 1]     // matmul.part1
    %v = tensor.extract_slice %qkv[0, 1024] [1, 256] [1, 1]    // matmul.part2

The row count ``M`` is static (a decode step) or dynamic (a prefill step symbolic in its
sequence length: the accumulator and the slices take ``tensor.dim %a, 0``; the
``specialize-rows`` step then gives the merged matmul its ``M == 1`` GEMV version like any other
matmul of dynamic M). The concatenated weight is computed once per derived-weight store
(:attr:`~mlc_mlir.ir.module.Module.derived_weights`, :func:`~mlc_mlir.ir.constants.derived_array`
keyed by the buffers of its parts): the prefill and the decode step of one model, imported
with one store, read the same merged array, and the per-projection weights of neither step
are left for the JIT to link (one copy of each weight in the compiled model).

Inputs are the same when they are the same value, or the same value through the same
``tensor.collapse_shape`` (the importer reshapes the input once per projection). The weights
are ``arith.constant`` tensors whose bytes the module holds (``dense_resource`` blobs); the
accumulators are fills of one scalar. Each column of the merged product is the same sum over
k as the original's; the schedule of the wider product may split or order k differently
(a GEMV's K split on several threads), so results agree to rounding (3e-7 on a tiny Llama's
logits of scale 0.7).

A decode step then streams every weight of the group in one GEMV: one fork/join and one
barrier instead of one per projection, and the input vector read once; a prefill step runs one
GEMM of N = 1280 (q/k/v of Llama-110M) instead of three. Source: llama.cpp's and
MLC-LLM's fused ``qkv`` and ``gate_up`` projection weights (GPT-2's ``c_attn`` is this layout);
TVM Relay ``CombineParallelDense`` (parallel dense ops on one input combined into one).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..._mlir import arith_d, ir, linalg_d, tensor_d
from ...graph.emit_rewrites import named_fill, replace_contraction
from ...graph.linalg_attrs import indexing_maps, matmul_maps
from ...graph.pass_manager import ScopedPass, register_pass
from ...graph.use_def import named_ops, producer
from ...ir import dtypes, emitters
from ...ir.constants import constant_array, derived_array
from ...ir.module import OP_NAME_ATTR, Module

#: ``select(m, k, ns, dtype) -> bool``: whether the matmuls of one input (``m`` rows, ``k``
#: columns; ``m`` is -1 when dynamic) with weights of ``ns`` columns each are merged.
MergeSelect = Callable[[int, int, Tuple[int, ...], str], bool]


def _input_key(a: ir.Value):
    """The input as the merge sees it: the source and reassociation of a collapse_shape, else
    the value itself."""
    op = producer(a)
    if op is not None and op.name == "tensor.collapse_shape":
        return (op.operands[0], str(op.attributes["reassociation"]), str(a.type))
    return (a, "", str(a.type))


def _fill_value(init: ir.Value) -> Optional[str]:
    """The scalar of the fill that produces ``init`` (its only use), as attribute text, or None."""
    fill = named_fill(init)
    if fill is None:
        return None
    c = producer(fill.operands[0])
    if c is None or c.name != "arith.constant":
        return None
    return str(c.attributes["value"])


def _weight(op: ir.Operation, blobs) -> Optional[np.ndarray]:
    w = producer(op.operands[1])
    if w is None or w.name != "arith.constant":
        return None
    return constant_array(w.attributes["value"], blobs)


def _merge(mod: Module, group: List[ir.Operation], weights: List[np.ndarray]) -> None:
    """One matmul over the concatenated weights (one array per ``mod.derived_weights`` store),
    at the first op of ``group``; the group's results become slices of it."""
    first = group[0]
    a = first.operands[0]
    a_type = ir.RankedTensorType(a.type)
    ns = [w.shape[1] for w in weights]
    name = ir.StringAttr(first.attributes[OP_NAME_ATTR]).value
    fname = ir.StringAttr(first.parent.attributes["sym_name"]).value
    merged = derived_array(mod.derived_weights, "merge-projections", weights,
                           lambda *ws: np.ascontiguousarray(np.concatenate(ws, axis=1)))
    et = a_type.element_type
    with ir.InsertionPoint(first):
        attr = mod._keepalive.constant(merged, f"{fname}_{name}_merged")
        w = arith_d.ConstantOp(ir.RankedTensorType.get(list(merged.shape), et), attr)
        emitters.set_name(w.operation, f"{name}.merged_weight")
        # the row count: static, or tensor.dim of the input (a step symbolic in its rows)
        m = a_type.shape[0]
        rows = [tensor_d.DimOp(a, emitters.index_constant(0)).result] if a_type.is_dynamic_dim(0) else []
        fill = named_fill(first.operands[2])
        acc = linalg_d.fill(fill.operands[0], outs=[tensor_d.EmptyOp((rows or [m]) + [sum(ns)], et).result])
        emitters.set_name(acc.owner, ir.StringAttr(fill.attributes[OP_NAME_ATTR]).value)
        y = linalg_d.matmul(a, w.result, outs=[acc])
        emitters.set_name(y.owner, name)
        parts = []
        for i, n in enumerate(ns):
            t = ir.RankedTensorType.get([m, n], et)
            s = tensor_d.ExtractSliceOp(t, y, [], rows, [], [0, sum(ns[:i])], [m, n], [1, 1]).result
            emitters.set_name(s.owner, f"{name}.part{i}")
            parts.append(s)
    for op, part in zip(group, parts):
        replace_contraction(op, part)


@register_pass
class MergeProjections(ScopedPass):
    """Merge the matmuls of one input and constant weights into one matmul over the weights
    concatenated along N (see the module docstring). The results agree to rounding.

    Parameters
    ----------
    select : callable, optional
        ``select(m, k, ns, dtype) -> bool`` (:data:`MergeSelect`), asked once per group of two
        or more matmuls (``m`` is -1 when dynamic); default: merge every group.
    functions : sequence of str, optional
        As :class:`~mlc_mlir.graph.pass_manager.ScopedPass`.
    """

    name = "mlc-merge-projections"

    def __init__(self, select: Optional[MergeSelect] = None, functions: Optional[Sequence[str]] = None):
        super().__init__(select or (lambda m, k, ns, dtype: True), functions)

    def transform(self, mod: Module) -> Module:
        groups: Dict[tuple, List[Tuple[ir.Operation, np.ndarray]]] = {}
        with mod.context, ir.Location.unknown():
            for op in named_ops(mod, "linalg.matmul", self.functions):
                maps = indexing_maps(op)
                if maps is not None and maps != matmul_maps(op.context):
                    continue
                fill = _fill_value(op.operands[2])
                w = _weight(op, mod._keepalive) if fill is not None else None
                if w is None or w.ndim != 2:
                    continue
                key = _input_key(op.operands[0]) + (fill, str(w.dtype), ir.StringAttr(op.parent.attributes["sym_name"]).value)
                groups.setdefault(key, []).append((op, w))
            for members in groups.values():
                if len(members) < 2:
                    continue
                ops, weights = [m[0] for m in members], [m[1] for m in members]
                a = ir.RankedTensorType(ops[0].operands[0].type)
                m = a.shape[0] if not a.is_dynamic_dim(0) else -1
                dtype = dtypes.from_ir_type(a.element_type)
                if self.select(m, a.shape[1], tuple(w.shape[1] for w in weights), dtype):
                    _merge(mod, ops, weights)
        return mod
