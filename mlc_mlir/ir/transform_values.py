"""Small values every transform-script emitter builds: the ``!transform.any_op`` type, a
``transform.param.constant`` of an annotation value, and GPU dialect attributes.

Used by the CPU emitter (:mod:`mlc_mlir.schedule.transform_script`), the GPU emitters
(:mod:`mlc_mlir.schedule.gpu_script`, :mod:`mlc_mlir.schedule.gpu_reduction`) and the CUDA
lowering scripts (:mod:`mlc_mlir.pipeline.cuda`, :mod:`mlc_mlir.pipeline.cuda_pads`).
"""

from __future__ import annotations

from typing import Callable, Tuple, Union

from .._mlir import ir, transform_d


def any_op() -> ir.Type:
    """``!transform.any_op`` (in the current context)."""
    return transform_d.AnyOpType.get()


def param_constant(v: Union[bool, int, float, str]) -> ir.Value:
    """A ``transform.param.constant`` of an annotation value: ``bool`` -> BoolAttr, ``int`` ->
    i64, ``float`` -> f64, anything else -> its string (``transform.annotate``'s param)."""
    if isinstance(v, bool):
        attr = ir.BoolAttr.get(v)
    elif isinstance(v, int):
        attr = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    elif isinstance(v, float):
        attr = ir.FloatAttr.get(ir.F64Type.get(), v)
    else:
        attr = ir.StringAttr.get(v)
    return transform_d.ParamConstantOp(transform_d.AnyParamType.get(), attr).result


def gpu_attr(text: str) -> ir.Attribute:
    """A GPU dialect attribute (``#gpu.block<x>``, ``#gpu.address_space<workgroup>``...).
    Parsing text is debt: the bindings have no builders for the GPU mapping attributes."""
    return ir.Attribute.parse(text)


def build_script(build: Callable[[ir.Value], None]) -> Tuple[ir.Module, ir.Operation]:
    """A transform script whose ``__transform_main`` body ``build(root)`` fills (``root``: the
    payload's handle, consumed), as ``(script module, named sequence)`` for
    ``transform_interpreter.apply_named_sequence(payload, sequence, script)``. Call it with a
    context and location active."""
    script = ir.Module.create()
    script.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
    with ir.InsertionPoint(script.body):
        seq = transform_d.NamedSequenceOp("__transform_main", [any_op()], [],
                                          arg_attrs=[{"transform.consumed": ir.UnitAttr.get()}])
        with ir.InsertionPoint(seq.body):
            build(seq.bodyTarget)
            transform_d.YieldOp([])
    return script, seq
