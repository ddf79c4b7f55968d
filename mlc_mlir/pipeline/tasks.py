"""Stage ``tasks`` of :func:`mlc_mlir.compile`: the units of scheduling and tuning.

A unit is a group of ops of one graph function that ``graph.FuseOps`` would outline into one
primitive function (an anchor such as a matmul or convolution with its elementwise epilogue,
the injective ops it reads; see :mod:`mlc_mlir.graph.fuse_ops`). The grouping is computed on a
copy (``FuseOps(fuse_elementwise=False)``: every op keeps its ``mlc.name``); the module itself
is never outlined, so the ``schedule`` stage schedules every unit where it is, and the
``prepare`` stage's in-place writes across units (a Winograd output transform into the next
convolution's padded buffer, a residual slice) hold for default and tuned schedules alike.

* The stage marks each op of a unit with ``mlc.task = "<unit name>"`` (visible in ``dump_ir``);
  the ``schedule`` stage removes the marks.
* :func:`task_units` gives, per unit, its function alone (public, named as the graph function
  holds it, so a space written for ``main`` calls ``sch.get_block("C", "main")``) and its
  workload key: the tuner's tasks (:func:`mlc_mlir.tune.extract_tasks`) and the keys under which
  the ``schedule`` stage looks up database records.

A function that is already primitive (``mlc.primitive``, made by ``FuseOps`` by the user) is one
unit. Source: TVM Relay/Relax ``FuseOps`` and MetaSchedule's ``extract_task_from_relax`` (the
tasks are the fused functions); unlike TVM the schedule is applied in the unfused graph.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from .._mlir import arith_d, ir
from ..graph.fuse_ops import PRIMITIVE_ATTR, FuseOps
from ..ir.module import OP_NAME_ATTR, Module
from ..ir.workload import canonical_names, workload_key

#: The attribute the ``tasks`` stage puts on each op of a unit (the unit's name).
TASK_ATTR = "mlc.task"


@dataclasses.dataclass(frozen=True, eq=False)
class TaskUnit:
    """One unit of scheduling and tuning.

    Attributes
    ----------
    name : str
        The name ``FuseOps`` gives its primitive function (``fused_dense_relu``).
    func : str
        The function of the module that holds its ops.
    blocks : tuple of str
        The ``mlc.name`` of each named linalg op of the unit (equal in ``func`` and in
        ``module``).
    module : Module or None
        The unit alone as a public function named ``func`` (None unless asked for).
    workload : str
        :func:`~mlc_mlir.ir.workload.workload_key` of the unit's primitive function ("" unless
        asked for): the key of its database records.
    block_names : dict of str to str
        ``canonical_names`` of the primitive function (renames a record made on another unit of
        the same workload).
    """

    name: str
    func: str
    blocks: Tuple[str, ...]
    module: Optional[Module] = None
    workload: str = ""
    block_names: Dict[str, str] = dataclasses.field(default_factory=dict)


def strip_task_marks(module: Module) -> Module:
    """``module`` without the ``mlc.task`` marks of the ``tasks`` stage (``module`` itself if it
    has none; else a copy)."""
    marked = []

    def visit(op):
        op = op.operation if hasattr(op, "operation") else op
        if TASK_ATTR in op.attributes:
            marked.append(op)
        return ir.WalkResult.ADVANCE

    with module.context:
        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        if not marked:
            return module
        out = module.clone()
        marked.clear()
        out.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        for op in marked:
            del op.attributes[TASK_ATTR]
    return out


def _zero_scalar_arguments(fn) -> None:
    """In place: each argument of ``fn`` that is not a shaped type (an ``index`` offset the caller
    computed, e.g. the position of a KV-cache write) becomes a zero constant of its type at the
    top of the body; the function no longer takes it."""
    block = fn.regions[0].blocks[0]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    inputs = list(ftype.inputs)
    attrs = list(fn.arg_attrs) if "arg_attrs" in fn.attributes else None
    for i in reversed(range(len(inputs))):
        t = inputs[i]
        if isinstance(t, ir.ShapedType):
            continue
        zero = ir.FloatAttr.get(t, 0.0) if isinstance(t, ir.FloatType) else ir.IntegerAttr.get(t, 0)
        with ir.InsertionPoint.at_block_begin(block):
            cst = arith_d.ConstantOp(t, zero)
        block.arguments[i].replace_all_uses_with(cst.result)
        block.erase_argument(i)
        del inputs[i]
        if attrs is not None:
            del attrs[i]
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, list(ftype.results)))
    if attrs is not None:
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


def unit_module(module: Module, func_name: str, new_name: Optional[str] = None) -> Module:
    """Function ``func_name`` of ``module`` alone, public, renamed ``new_name`` if given
    (``Module.extract``).

    A scalar argument (``index``/integer/float, not a tensor: e.g. the clamped write position of
    a KV-cache update, computed by the caller) is fixed at zero inside the unit, so the unit
    runs on tensors alone: zero is in bounds for every offset, and every offset runs the same
    loops (the ops' iteration spaces do not depend on it).
    """
    one = module.extract(func_name)
    with one.context, ir.Location.unknown():
        fn = one.get_function(func_name)
        if "sym_visibility" in fn.attributes:
            del fn.attributes["sym_visibility"]
        _zero_scalar_arguments(fn)
        if new_name is not None and new_name != func_name:
            fn.attributes["sym_name"] = ir.StringAttr.get(new_name)
    return one.verify()


def _named_ops(fn) -> List[str]:
    if not fn.regions[0].blocks:
        return []
    return [ir.StringAttr(o.operation.attributes[OP_NAME_ATTR]).value
            for o in fn.regions[0].blocks[0].operations
            if OP_NAME_ATTR in o.operation.attributes and o.operation.name.startswith("linalg.")]


def _callers(mod: Module) -> Dict[str, str]:
    """``{callee: the function that calls it}`` over the module's ``func.call`` ops."""
    out: Dict[str, str] = {}
    with mod.context:
        for f in mod.func_ops():
            caller = f.sym_name.value

            def visit(op, caller=caller):
                op = op.operation if hasattr(op, "operation") else op
                if op.name == "func.call":
                    out.setdefault(ir.FlatSymbolRefAttr(op.attributes["callee"]).value, caller)
                return ir.WalkResult.ADVANCE

            f.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return out


def _static(f) -> bool:
    """Whether function ``f`` has static shapes only."""
    return all(not isinstance(t, ir.RankedTensorType) or ir.RankedTensorType(t).has_static_shape
               for t in list(f.type.inputs) + list(f.type.results))


def task_units(module: Module, functions: Sequence[str], details: bool = True) -> List[TaskUnit]:
    """The units of ``functions`` of ``module`` (see the module docstring), in program order;
    units without a named linalg op (views, slices alone) are left out: nothing schedules them.

    Parameters
    ----------
    module : Module
        After the ``layout`` stage (``mlc.task`` marks are ignored).
    functions : sequence of str
        The functions to divide (the unscheduled ones).
    details : bool
        Also give each unit's ``module``, ``workload`` and ``block_names``; units with symbolic
        sizes are then left out (measuring needs concrete sizes; the default schedule serves
        every size).
    """
    wanted = set(functions)
    clean = strip_task_marks(module)
    with clean.context:
        primitive = {f.sym_name.value for f in clean.func_ops() if PRIMITIVE_ATTR in f.attributes}
    fused = FuseOps(fuse_elementwise=False)(clean)
    callers = _callers(fused)
    units: List[TaskUnit] = []
    with fused.context:
        for f in fused.func_ops():
            name = f.sym_name.value
            if f.is_external or PRIMITIVE_ATTR not in f.attributes:
                continue
            func = name if name in primitive else callers.get(name)
            blocks = tuple(_named_ops(f))
            if func not in wanted or not blocks:
                continue
            if not details:
                units.append(TaskUnit(name, func, blocks))
                continue
            if not _static(f):   # symbolic sizes: no workload to measure or look up
                continue
            units.append(TaskUnit(name, func, blocks, unit_module(fused, name, func),
                                  workload_key(fused, name), canonical_names(fused, name)))
    return units


def mark_tasks(module: Module, functions: Sequence[str]) -> Module:
    """A copy of ``module`` with ``mlc.task = "<unit>"`` on each named op of each unit of
    ``functions`` (the ``tasks`` stage's output; ``module`` itself when there is no unit)."""
    units = task_units(module, functions, details=False)
    if not units:
        return module
    by_op = {(u.func, b): u.name for u in units for b in u.blocks}
    out = strip_task_marks(module)
    out = out.clone() if out is module else out
    with out.context:
        for f in out.func_ops():
            fname = f.sym_name.value
            if f.is_external or fname not in set(functions):
                continue
            for o in f.regions[0].blocks[0].operations:
                op = o.operation
                if OP_NAME_ATTR in op.attributes:
                    unit = by_op.get((fname, ir.StringAttr(op.attributes[OP_NAME_ATTR]).value))
                    if unit is not None:
                        op.attributes[TASK_ATTR] = ir.StringAttr.get(unit)
    return out
