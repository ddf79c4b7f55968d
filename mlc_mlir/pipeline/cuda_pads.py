"""Padding on the GPU: each ``tensor.pad`` left outside the kernels (conv2d's ``<name>.pad``)
becomes one kernel that writes the padded tensor to global memory before its consumer: a
``linalg.generic`` over the padded shape whose body reads the source at the shifted indices
(``tensor.extract``, clamped) or takes the padding value (``arith.select`` on the bounds), with
the elementwise GPU mapping of step 3 (TVM's ``topi.nn.pad``: a compute of the padded shape
with an ``if_then_else`` on the bounds). A pad whose value the body computes, and each
``tensor.insert_slice`` there (conv_transpose2d's ``<name>.phase<r>.insert``: a
phase's result inserted with strides into the output, a ``tensor.empty`` or a zero
``linalg.fill``), which is a pad already in step 1's form.

``fuse_into_containing_op`` of a ``tensor.pad`` into a block-mapped ``scf.forall`` aborts MLIR
22, so a scheduled conv2d reads its padded input from a producer outside the kernel. Left
there, the pad would bufferize to host code on device memory. A pad that is not a generic
becomes two kernels (upstream transform ops only):

1. ``transform.structured.rewrite_in_destination_passing_style`` -- the pad becomes
   ``linalg.fill`` of a ``tensor.empty`` + ``tensor.insert_slice`` of the source;
2. ``transform.structured.insert_slice_to_copy`` -- the insertion becomes a ``linalg.copy``
   into a slice of the filled tensor (in place after bufferization);
3. the fill and the copy each get the elementwise GPU mapping: one block per row (the outer
   dims, ``#gpu.block<linear_dim_k>``), the contiguous last dim over up to the GPU rules'
   :func:`~mlc_mlir.schedule.rules.gpu_common.default_threads` of the chip (``#gpu.thread<x>``).

The padded tensor is a temporary between kernels (device memory, :mod:`.cuda`).
"""

from __future__ import annotations

from typing import Callable, List, Tuple

from .._mlir import arith_d, ir, linalg_d, structured_transform_d, tensor_d, transform_d
from ..graph.emit_rewrites import constant_pad_value, has_constant_pad_value
from ..ir.emitters import generic, i64_attr, index_constant
from ..ir.transform_values import any_op
from ..errors import PipelineError
from ..ir.module import Module
from ..ir.walk import function_body_ops
from ..schedule.rules.gpu_common import default_threads
from ..target import CudaArch

#: Marks a host-level pad or insert_slice for matching (``mlc.host_pad = i``).
_TAG = "mlc.host_pad"
#: Marks the host-level ``linalg.fill`` an insert_slice writes into (``mlc.host_fill = i``).
_FILL_TAG = "mlc.host_fill"


def _host_pads(module: Module) -> Tuple[List[Tuple[str, List[int], List[int]]], List[List[int]]]:
    """Tag each ``tensor.pad`` and ``tensor.insert_slice`` directly in a function body (a pad
    with a constant value first made a generic: :func:`pad_as_generic`), and each
    ``linalg.fill`` there that an insert_slice writes into; returns ``(op name, result shape,
    source shape)`` by tag and the fills' shapes by fill tag."""
    tagged, fills = [], []
    with module.context:
        for op in list(function_body_ops(module)):
            if op.name not in ("tensor.pad", "tensor.insert_slice"):
                continue
            t = ir.RankedTensorType(op.results[0].type)
            src = ir.RankedTensorType(op.operands[0].type)
            if not (t.has_static_shape and src.has_static_shape):
                raise PipelineError(f"cuda pad: a {op.name} with dynamic shape {t} outside the "
                                    "kernels; expected static shapes")
            name = op.name
            if name == "tensor.pad" and has_constant_pad_value(op):
                op, name = pad_as_generic(op), "linalg.generic"
            op.attributes[_TAG] = i64_attr(len(tagged))
            tagged.append((name, list(t.shape), list(src.shape)))
            dest = op.operands[1].owner if op.name == "tensor.insert_slice" else None
            if dest is not None and not isinstance(dest, ir.Block) and dest.name == "linalg.fill" \
                    and dest.parent == op.parent and _FILL_TAG not in dest.attributes:
                dest.attributes[_FILL_TAG] = i64_attr(len(fills))
                fills.append(list(t.shape))
    return tagged, fills


def pad_as_generic(pad: ir.Operation) -> ir.Operation:
    """Replace a static ``tensor.pad`` with a constant padding value by a ``linalg.generic`` of
    the padded shape with its name (module docstring); returns the generic. Each dim the pad
    grows reads the source at ``i - low`` clamped into the source and selects the padding value
    outside ``[low, low + size)``."""
    with ir.InsertionPoint(pad), pad.location:
        src = pad.operands[0]
        shape = list(ir.RankedTensorType(pad.results[0].type).shape)
        size = list(ir.RankedTensorType(src.type).shape)
        low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
        value = constant_pad_value(pad)
        init = tensor_d.EmptyOp(shape, ir.RankedTensorType(src.type).element_type).result
        name = ir.StringAttr(pad.attributes["mlc.name"]).value if "mlc.name" in pad.attributes else "pad"

        def body(_):
            idx, inside = [], None
            for d in range(len(shape)):
                i = linalg_d.IndexOp(d).result
                if shape[d] == size[d]:
                    idx.append(i)
                    continue
                j = arith_d.subi(i, index_constant(low[d]))
                ok = arith_d.andi(arith_d.cmpi(arith_d.CmpIPredicate.sge, j, index_constant(0)),
                                  arith_d.cmpi(arith_d.CmpIPredicate.slt, j, index_constant(size[d])))
                inside = ok if inside is None else arith_d.andi(inside, ok)
                idx.append(arith_d.minsi(arith_d.maxsi(j, index_constant(0)), index_constant(size[d] - 1)))
            v = tensor_d.ExtractOp(src, idx).result
            return [v if inside is None else arith_d.select(inside, v, value)]

        (out,) = generic(name, [], [], [init], [ir.AffineMap.get_identity(len(shape))],
                         ["parallel"] * len(shape), body)
    pad.results[0].replace_all_uses_with(out)
    pad.erase()
    return out.owner.operation


def _map_elementwise(op: ir.Value, shape: List[int], most: int) -> None:
    """Emit the block and thread ``tile_using_forall`` of a rank-``len(shape)`` elementwise op
    (module docstring, step 3), with the largest divisor of the last dim up to ``most``
    threads."""
    last = shape[-1]
    t = next(d for d in range(min(last, most), 0, -1) if last % d == 0)
    outer = [d for d, e in enumerate(shape[:-1]) if e > 1]
    sizes = [1 if d in outer else 0 for d in range(len(shape))]
    if not outer:   # a single row: blocks of t elements along it
        sizes[-1] = t
        names = ["#gpu.block<x>"]
    else:
        names = [f"#gpu.block<linear_dim_{len(outer) - 1 - k}>" for k in range(len(outer))]
    # debt: the bindings have no builders for the GPU mapping attributes
    mapping = ir.ArrayAttr.get([ir.Attribute.parse(a) for a in names])
    tiled = structured_transform_d.TileUsingForallOp(op, tile_sizes=sizes, mapping=mapping).tiled_op
    if t > 1:
        inner = [0] * len(shape)
        inner[-1] = 1 if not outer else last // t
        structured_transform_d.TileUsingForallOp(
            tiled, tile_sizes=inner, mapping=ir.ArrayAttr.get([ir.Attribute.parse("#gpu.thread<x>")]))


def materialize_host_pads(module: Module, apply: Callable, arch: CudaArch) -> Module:
    """Rewrite every host-level ``tensor.pad`` of ``module`` into a fill kernel and a copy
    kernel, every host-level ``tensor.insert_slice`` into a copy kernel and the ``linalg.fill``
    it writes into into a fill kernel (module docstring). ``apply(module, build, stage)`` runs a transform script built by
    ``build(root)`` (:func:`mlc_mlir.pipeline.cuda._apply`); ``arch``: the chip's resources (the kernels'
    threads). Returns ``module`` itself when it
    has no such pad.

    Raises
    ------
    PipelineError
        If a pad has a dynamic shape, or a transform op fails.
    """
    module = module.clone()
    tagged, fills = _host_pads(module)
    if not tagged:
        return module
    most = default_threads(arch)

    def build(root):
        def match(name: str, tag: str, i: int) -> ir.Value:
            return structured_transform_d.MatchOp(
                any_op(), root, ops=ir.ArrayAttr.get([ir.StringAttr.get(name)]),
                op_attrs=ir.DictAttr.get({tag: i64_attr(i)})).result

        for i, shape in enumerate(fills):
            _map_elementwise(match("linalg.fill", _FILL_TAG, i), shape, most)
        for i, (name, shape, source) in enumerate(tagged):
            insert = match(name, _TAG, i)
            if name == "linalg.generic":   # a pad_as_generic: one elementwise kernel
                _map_elementwise(insert, shape, most)
                continue
            if name == "tensor.pad":
                insert = structured_transform_d.RewriteInDestinationPassingStyleOp(any_op(), insert).result
                _map_elementwise(transform_d.GetProducerOfOperand(any_op(), insert, 1).result, shape, most)
            copy = structured_transform_d.InsertSliceToCopyOp(any_op(), insert).result
            _map_elementwise(copy, source, most)   # the copy has the source's shape

    return apply(module, build, "pad")
