"""Workload keys: a structural hash of one function, the identity of a tuning task.

Two functions are the same workload when their IR is the same up to names: the symbol name, the
``mlc.name`` of each op (replaced by positional names ``op0``, ``op1``, ... in walk order) and the
values of large constants (weights do not change the best schedule; their shapes and types do).
The key is the SHA-256 of that canonical text (TVM MetaSchedule's ``Workload`` keyed by a
structural hash). :func:`canonical_names` gives the renaming, so a trace recorded on one function
(it names blocks by ``mlc.name``) can be replayed on another function of the same workload.
"""

from __future__ import annotations

import hashlib
from typing import Dict

from .._mlir import ir
from ..errors import IRError
from .module import OP_NAME_ATTR, Module


def canonical_names(module: Module, func_name: str) -> Dict[str, str]:
    """``{mlc.name: "op<i>"}`` for the named ops of ``func_name`` in walk (pre-)order.

    Raises
    ------
    IRError
        If ``module`` has no function ``func_name``.
    """
    fn = module.get_function(func_name)
    names: Dict[str, str] = {}

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if OP_NAME_ATTR in op.attributes:
            name = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
            names.setdefault(name, f"op{len(names)}")
        return ir.WalkResult.ADVANCE

    with module.context:
        fn.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return names


def _canonical_text(module: Module, func_name: str, zero_weights: bool) -> str:
    """Function ``func_name`` alone (cloned into a scratch module, so the cost does not grow with
    the rest of ``module``), named ``main``, its ops renamed by :func:`canonical_names`, printed
    without locations; with ``zero_weights`` every non-scalar static tensor constant holds
    zeros and large ones are elided."""
    names = canonical_names(module, func_name)
    fn = module.get_function(func_name)
    calls = []

    def rename(op):
        op = op.operation if hasattr(op, "operation") else op
        if op.name == "func.call":
            calls.append(op)
        if OP_NAME_ATTR in op.attributes:
            old = ir.StringAttr(op.attributes[OP_NAME_ATTR]).value
            op.attributes[OP_NAME_ATTR] = ir.StringAttr.get(names[old])
        if zero_weights and op.name == "arith.constant" and isinstance(op.results[0].type, ir.RankedTensorType):
            t = op.results[0].type
            if t.has_static_shape and t.rank > 0:  # weights: only their type is part of the key
                zero = ir.FloatAttr.get(t.element_type, 0.0) if not isinstance(t.element_type, ir.IntegerType) \
                    else ir.IntegerAttr.get(t.element_type, 0)
                op.attributes["value"] = ir.DenseElementsAttr.get_splat(t, zero)
        return ir.WalkResult.ADVANCE

    with module.context, ir.Location.unknown():
        scratch = ir.Module.create()
        with ir.InsertionPoint(scratch.body):
            one = fn.operation.clone()
        one.walk(rename, ir.WalkOrder.PRE_ORDER)
        if calls:
            raise IRError(f"workload_key: function '{func_name}' calls other functions; a workload "
                          "is one self-contained function (outline with graph.FuseOps first)")
        one.attributes["sym_name"] = ir.StringAttr.get("main")
        if zero_weights:
            return one.get_asm(large_elements_limit=16, large_resource_limit=0, enable_debug_info=False)
        return one.get_asm(enable_debug_info=False)


def workload_key(module: Module, func_name: str) -> str:
    """The structural hash (hex SHA-256) of function ``func_name`` of ``module``, up to names and
    weight values (see the module docstring).

    Raises
    ------
    IRError
        If ``module`` has no function ``func_name``, or it calls other functions (a workload is
        one self-contained function).
    """
    return hashlib.sha256(_canonical_text(module, func_name, True).encode()).hexdigest()


def structural_key(module: Module, func_name: str) -> str:
    """The hash (hex SHA-256) of function ``func_name`` up to names only: unlike
    :func:`workload_key`, constant values count, so two functions of one key compute the same
    thing from the same arguments and one can replace the other at every call site (TVM Relax's
    structural equality of PrimFuncs, used to deduplicate them).

    Raises
    ------
    IRError
        As :func:`workload_key`.
    """
    return hashlib.sha256(_canonical_text(module, func_name, False).encode()).hexdigest()
