"""``SpecializeUnitRows`` (``mlc-specialize-unit-rows``): a ``linalg.matmul`` whose row count
``M`` is dynamic gets a second version for ``M == 1``, chosen at run time.

A decode step of a language model multiplies one row by each weight (a GEMV, bound by reading
the weight once); a prefill multiplies many (a GEMM). One loop nest serves both poorly, so the
matmul (and its zero init) is outlined twice, into private functions that schedules see like
any other: one on ``tensor<1xK>`` (static: the static default rules give it the GEMV
schedule), one on ``tensor<?xK>`` (the dynamic rule); an ``scf.if`` on ``M == 1`` calls one of
them. Source: TVM Relax / dlight, which keep a GEMV tensor program next to the GEMM ones for
the same symbolic function.

Before::

    %init = linalg.fill {mlc.name = "mm.init"} ... -> tensor<?x768xf32>
    %y = linalg.matmul {mlc.name = "mm"} ins(%x, %w : tensor<?x768xf32>, tensor<768x768xf32>) ...

After::

    %m = tensor.dim %x, %c0
    %one = arith.cmpi eq, %m, %c1
    %y = scf.if %one -> tensor<?x768xf32> {
      %x1 = tensor.cast %x : tensor<?x768xf32> to tensor<1x768xf32>
      %y1 = func.call @main_mm_rows1(%x1, %w) : (...) -> tensor<1x768xf32>
      scf.yield (tensor.cast %y1)
    } else {
      scf.yield (func.call @main_mm_rows(%x, %w))
    }
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..._mlir import arith_d, func_d, ir, linalg_d, scf_d, tensor_d
from ...ir.emitters import index_constant
from ...ir.module import OP_NAME_ATTR, Module
from ...graph.use_def import named_ops, producer
from ...graph.pass_manager import ScopedPass, register_pass


def _candidate(op: ir.Operation) -> bool:
    """A matmul on ``tensor<?xK> x tensor<KxN>`` whose init is a fill of a ``tensor.empty``
    used only by it."""
    a, b, init = (ir.RankedTensorType(v.type) for v in op.operands[:3])
    if not (a.is_dynamic_dim(0) and not a.is_dynamic_dim(1) and b.has_static_shape):
        return False
    fill = producer(op.operands[2])
    if fill is None or fill.name != "linalg.fill" or len(list(op.operands[2].uses)) != 1:
        return False
    value, empty = producer(fill.operands[0]), producer(fill.operands[1])
    return value is not None and value.name == "arith.constant" and \
        empty is not None and empty.name == "tensor.empty"


def _outline(mod: Module, f, op: ir.Operation, rows: Optional[int], name: str) -> func_d.FuncOp:
    """A private function ``name(a, b) -> c`` holding a zero fill and a copy of the matmul
    ``op``, on ``rows`` rows (None: dynamic)."""
    a_t, b_t, c_t = (ir.RankedTensorType(v.type) for v in (op.operands[0], op.operands[1], op.results[0]))
    a_shape = [rows if rows is not None else ir.ShapedType.get_dynamic_size(), a_t.shape[1]]
    c_shape = [a_shape[0], c_t.shape[1]]
    at = ir.RankedTensorType.get(a_shape, a_t.element_type)
    ct = ir.RankedTensorType.get(c_shape, c_t.element_type)
    fill = producer(op.operands[2])
    with ir.InsertionPoint(f):
        fn = func_d.FuncOp(name, ir.FunctionType.get([at, b_t], [ct]), visibility="private")
    entry = fn.regions[0].blocks.append(at, b_t)
    with ir.InsertionPoint(entry):
        a, b = entry.arguments
        sizes = [c_shape[0] if rows is not None else
                 tensor_d.dim(a, index_constant(0)), c_shape[1]]
        empty = tensor_d.EmptyOp(sizes, ct.element_type).result
        value = producer(fill.operands[0]).clone()   # the scalar (a constant, see _candidate)
        init = linalg_d.fill(value.results[0], outs=[empty])
        init.owner.attributes[OP_NAME_ATTR] = fill.attributes[OP_NAME_ATTR]
        kwargs = {}
        if "indexing_maps" in op.attributes:
            kwargs["indexing_maps"] = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        r = linalg_d.matmul(a, b, outs=[init], **kwargs)
        r.owner.attributes[OP_NAME_ATTR] = op.attributes[OP_NAME_ATTR]
        func_d.ReturnOp([r])
    return fn


def _specialize(mod: Module, f, op: ir.Operation, used: set) -> None:
    base = f"{f.sym_name.value}_{ir.StringAttr(op.attributes[OP_NAME_ATTR]).value}".replace(".", "_")
    names = []
    for suffix in ("rows1", "rows"):
        n, k = f"{base}_{suffix}", 1
        while n in used:
            n, k = f"{base}_{suffix}_{k}", k + 1
        used.add(n)
        names.append(n)
    one_fn = _outline(mod, f, op, 1, names[0])
    any_fn = _outline(mod, f, op, None, names[1])
    a, b = op.operands[0], op.operands[1]
    res_t = op.results[0].type
    fill = producer(op.operands[2])
    with ir.InsertionPoint(op):
        idx = ir.IndexType.get()
        m = tensor_d.dim(a, arith_d.ConstantOp(idx, 0).result)
        is_one = arith_d.cmpi(arith_d.CmpIPredicate.eq, m, arith_d.ConstantOp(idx, 1).result)
        branch = scf_d.IfOp(is_one, [res_t], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            a1 = tensor_d.cast(one_fn.type.inputs[0], a)
            c1 = func_d.CallOp(one_fn, [a1, b]).results[0]
            scf_d.YieldOp([tensor_d.cast(res_t, c1)])
        with ir.InsertionPoint(branch.else_block):
            scf_d.YieldOp([func_d.CallOp(any_fn, [a, b]).results[0]])
    op.results[0].replace_all_uses_with(branch.results[0])
    op.erase()
    empty = producer(fill.operands[1])
    fill.erase()
    if not list(empty.results[0].uses):
        empty.erase()


@register_pass
class SpecializeUnitRows(ScopedPass):
    """Give each ``linalg.matmul`` of dynamic ``M`` (static K, N; a zero-filled init) an
    ``M == 1`` version chosen at run time (see the module docstring).

    Parameters
    ----------
    functions : sequence of str, optional
        As :class:`~.pass_manager.ScopedPass`.
    """

    name = "mlc-specialize-unit-rows"

    def __init__(self, functions: Optional[Sequence[str]] = None):
        super().__init__(None, functions)

    def transform(self, mod: Module) -> Module:
        used = set(mod.function_names())
        for op in named_ops(mod, "linalg.matmul", self.functions):
            if _candidate(op):
                _specialize(mod, _func_of(op), op, used)
        return mod


def _func_of(op: ir.Operation):
    p = op.parent
    while p is not None and p.name != "func.func":
        p = p.parent
    return p.opview
