"""End of stage ``lower`` of :func:`mlc_mlir.compile` (LLVM dialect): private functions that
differ only in integer constants become one function that takes those constants as arguments,
so LLVM optimizes and generates code for it once.

The outlined loop nests of a model (:mod:`~mlc_mlir.pipeline.outline_nests`) and its shared units
(:mod:`~mlc_mlir.pipeline.shared_units`) repeat the same kernel on buffers of other sizes:
DenseNet-121's 1x1 convolutions over 96, 128, ..., 992 input channels, the batch norms and
ReLUs in front of them, the copies into each dense block's concatenation. Lowered, such kernels
are the same LLVM dialect ops; only the ``llvm.mlir.constant`` values of their trip counts and
strides differ (the memref descriptors passed in have the same LLVM types whatever the static
shape). :func:`merge_constant_variants` groups the private functions by their printed text with
those values masked, keeps the first of a group and gives it one ``i64``/``i32`` argument per
distinct column of differing values; each call of a member passes its own values. The merged
function computes what each member computed (its constants are now arguments holding the same
values). Run time stays that of the constants as immediates where what varies is a loop bound or
an address computation (see :data:`PARAMETER_USERS`); a value LLVM could exploit better as a
constant is never made an argument: small values (below :data:`MIN_PARAMETER`: a trip count of
2 is unrolled, a stride of 1 folds away) and constants with any other user (a division, a
vector index, an ``alloca`` size, an intrinsic's immediate) stay part of the key, so functions
that differ there stay apart.

Source: LLVM's ``MergeFunctions`` (identical functions only) and the parameterized merging of
functions that differ in constants (Rocha et al., "Function Merging by Sequence Alignment",
CGO 2019; IREE's deduplication of executables that differ in push constants).
"""

from __future__ import annotations

import collections
import re
from typing import Dict, List, Sequence, Tuple

from .._mlir import ir, llvm_d
from ..ir.module import Module
from .outline_nests import function_shape

#: Ops that may use a constant made an argument: integer arithmetic that LLVM strength-reduces
#: or hoists as well with a loop-invariant value, comparisons (loop bounds), memref descriptor
#: fields and address computations, branch arguments (loop starts) and call arguments.
PARAMETER_USERS = frozenset({"llvm.mul", "llvm.add", "llvm.sub", "llvm.icmp", "llvm.getelementptr",
                             "llvm.insertvalue", "llvm.br", "llvm.cond_br", "llvm.call"})
#: A constant whose magnitude is smaller than this in any function of a group stays a constant
#: (part of the grouping key): small trip counts are unrolled and small strides fold away.
MIN_PARAMETER = 16

_INT_CONSTANT = re.compile(r"llvm\.mlir\.constant\((-?\d+) : (\w+)\)")
_SYMBOL = re.compile(r"@([\w$.-]+)")
_CALL = re.compile(r"llvm\.call @([\w$.-]+)\(")
#: Ops that name a function other than as the callee of a direct ``llvm.call`` (the attribute).
_SYMBOL_USERS = {"llvm.mlir.addressof": "global_name", "llvm.dso_local_equivalent": "function_name",
                 "llvm.invoke": "callee"}


def _text(op: ir.Operation) -> str:
    return op.get_asm(enable_debug_info=False, use_local_scope=True, assume_verified=True,
                      large_elements_limit=16)


def _key(name: str, text: str) -> str:
    """``text`` with the function's own name and the integer constants of at least
    :data:`MIN_PARAMETER` in magnitude masked."""
    def mask(m):
        return m.group(0) if abs(int(m.group(1))) < MIN_PARAMETER else f"llvm.mlir.constant(N : {m.group(2)})"
    return _INT_CONSTANT.sub(mask, text.replace(f"@{name}(", "@(", 1))


def _int_constants(fn: ir.Operation) -> List[ir.Operation]:
    """The ``llvm.mlir.constant`` ops of ``fn`` with a scalar integer value (not i1), in
    pre-order: the order in which they print."""
    found = []

    def visit(op):
        op = op.operation
        if op.name == "llvm.mlir.constant":
            v = op.attributes["value"]
            if isinstance(v, ir.IntegerAttr) and not (isinstance(v.type, ir.IntegerType) and
                                                      ir.IntegerType(v.type).width == 1):
                found.append(op)
        return ir.WalkResult.ADVANCE

    fn.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


def _parameterizable(op: ir.Operation) -> bool:
    return all(use.owner.operation.name in PARAMETER_USERS for use in op.result.uses)


def _symbol(attr: ir.Attribute) -> str:
    return ir.FlatSymbolRefAttr(attr).value


def _walk_calls(fn: ir.Operation, refs: collections.Counter) -> List[ir.Operation]:
    """The direct ``llvm.call`` ops in ``fn``; counts in ``refs`` the functions that other ops
    name (their address taken, an ``llvm.invoke``)."""
    calls = []

    def visit(op):
        op = op.operation
        if op.name == "llvm.call":
            if "callee" in op.attributes:
                calls.append(op)
        elif op.name in _SYMBOL_USERS:
            refs[_symbol(op.attributes[_SYMBOL_USERS[op.name]])] += 1
        return ir.WalkResult.ADVANCE

    fn.walk(visit, ir.WalkOrder.PRE_ORDER)
    return calls


def _private(fn: ir.Operation) -> bool:
    attrs = fn.attributes
    linkage = str(attrs["linkage"]) if "linkage" in attrs else ""
    return ("sym_visibility" in attrs and ir.StringAttr(attrs["sym_visibility"]).value == "private") \
        or linkage in ("#llvm.linkage<private>", "#llvm.linkage<internal>")


def _scan(module: Module):
    """``(defined, texts, calls, candidates)``: every ``llvm.func`` definition by name; the text
    of each private one whose :func:`~.outline_nests.function_shape` another shares (only those
    can merge: printing is most of this pass's time); the direct calls found by walking the
    functions not printed (by caller); the printed ones only called directly (``llvm.call @f``:
    none whose address is taken or that another op names)."""
    defined: Dict[str, ir.Operation] = {}
    refs: collections.Counter = collections.Counter()   # names used other than as a callee
    for op in module.ir_module.body.operations:
        op = op.operation
        if op.name == "llvm.func":
            if len(op.regions[0].blocks):
                defined[ir.StringAttr(op.attributes["sym_name"]).value] = op
        else:   # a global: the symbols its attributes or initializer region name
            text = " ".join(str(op.attributes[a]) for a in op.attributes if a != "value")
            if any(len(r.blocks) for r in op.regions):
                text += _text(op)
            refs.update(_SYMBOL.findall(text))
    shapes: Dict[tuple, List[str]] = collections.defaultdict(list)
    for name, fn in defined.items():
        if _private(fn):
            shapes[function_shape(fn)].append(name)
    texts = {name: _text(defined[name]) for group in shapes.values() if len(group) > 1 for name in group}
    calls: Dict[str, List[ir.Operation]] = {}
    for name, fn in defined.items():
        if name in texts:
            callees = _CALL.findall(texts[name])
            symbols = collections.Counter(_SYMBOL.findall(texts[name]))
            symbols[name] -= 1   # its own definition
            symbols.subtract(callees)
            refs.update(+symbols)
        else:
            calls[name] = _walk_calls(fn, refs)
    return defined, texts, calls, {name for name in texts if not refs[name]}


def _function_type(old: ir.Type, extra: Sequence[ir.Type]) -> ir.Type:
    """``old`` (an ``!llvm.func``) with ``extra`` arguments appended. Parsing text is debt: the
    bindings have no builder for ``!llvm.func``."""
    text = str(old)
    assert text.endswith(")>"), text
    params = ", ".join(str(t) for t in extra)
    sep = "" if text.endswith("()>") else ", "
    return ir.Type.parse(f"{text[:-2]}{sep}{params})>")


def _parameterize(fn: ir.Operation, columns: List[Tuple[int, ...]], consts: List[ir.Operation]) -> None:
    """Give ``fn`` one argument per column (the positions of its integer constants that hold
    the column's values) and replace those constants with it."""
    entry = fn.regions[0].blocks[0]
    types = [consts[col[0]].result.type for col in columns]
    if not types:   # identical functions: nothing to pass
        return
    fn.attributes["function_type"] = ir.TypeAttr.get(
        _function_type(ir.TypeAttr(fn.attributes["function_type"]).value, types))
    if "arg_attrs" in fn.attributes:
        old = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(old + [ir.DictAttr.get({}) for _ in types])
    for col, t in zip(columns, types):
        arg = entry.add_argument(t, fn.location)
        for i in col:
            consts[i].result.replace_all_uses_with(arg)
            consts[i].erase()


def _rewrite_calls(calls: List[ir.Operation], extra: Dict[str, Tuple[str, List[Tuple[ir.Type, int]]]]) -> None:
    """Each of ``calls`` (``llvm.call`` ops) of a function named in ``extra`` calls its kept
    function with the extra constant arguments appended."""
    for call in calls:
        callee = _symbol(call.attributes["callee"])
        if callee not in extra:
            continue
        kept, values = extra[callee]
        with ir.InsertionPoint(call), call.location:
            args = [llvm_d.ConstantOp(t, ir.IntegerAttr.get(t, v)).result for t, v in values]
            attrs = {n: call.attributes[n] for n in call.attributes}
            attrs["callee"] = ir.FlatSymbolRefAttr.get(kept)
            operands = list(call.operands) + args
            attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([len(operands), 0])
            new = ir.Operation.create("llvm.call", results=[r.type for r in call.results],
                                      operands=operands, attributes=attrs)
        for old, res in zip(call.results, new.results):
            old.replace_all_uses_with(res)
        call.erase()


def _merge_group(members: List[Tuple[str, List[int]]], funcs: Dict[str, ir.Operation],
                 extra: Dict[str, Tuple[str, List[Tuple[ir.Type, int]]]]) -> None:
    """Merge ``members`` (name, integer constant values in print order; equal keys) into the
    first, splitting off those whose differing constants cannot all be arguments; records the
    calls to rewrite in ``extra``."""
    kept = funcs[members[0][0]]
    consts = _int_constants(kept)
    if any(len(v) != len(consts) for _, v in members):
        return   # the text and the walk disagree (never seen): leave the group alone
    differ = [i for i in range(len(consts)) if len({v[i] for _, v in members}) > 1]
    fixed = [i for i in differ if not _parameterizable(consts[i])]
    if fixed:   # split by the values that must stay constants, merge within each part
        parts: Dict[tuple, list] = collections.defaultdict(list)
        for name, values in members:
            parts[tuple(values[i] for i in fixed)].append((name, values))
        for part in parts.values():
            if len(part) > 1 and len(part) < len(members):
                _merge_group(part, funcs, extra)
        return
    columns: Dict[Tuple[str, Tuple[int, ...]], List[int]] = {}
    for i in differ:
        columns.setdefault((str(consts[i].result.type), tuple(v[i] for _, v in members)), []).append(i)
    cols = [tuple(c) for c in columns.values()]
    types = [consts[c[0]].result.type for c in cols]
    _parameterize(kept, cols, consts)
    kept_name = members[0][0]
    for name, values in members:
        extra[name] = (kept_name, [(t, values[c[0]]) for t, c in zip(types, cols)])


def merge_constant_variants(module: Module) -> Dict[str, str]:
    """Merge the private functions of ``module`` (LLVM dialect) that differ only in integer
    constants (see the module docstring): every call of a group's member calls the group's first
    function with the member's constants as extra arguments, and the other members are erased.
    Modifies ``module`` in place; returns ``{erased name: kept name}``."""
    with module.context, ir.Location.unknown():
        defined, texts, calls, candidates = _scan(module)
        groups: Dict[str, List[Tuple[str, List[int]]]] = collections.defaultdict(list)
        for name in (n for n in defined if n in candidates):   # in module order: deterministic
            text = texts[name]
            groups[_key(name, text)].append((name, [int(m.group(1)) for m in _INT_CONSTANT.finditer(text)]))
        extra: Dict[str, Tuple[str, List[Tuple[ir.Type, int]]]] = {}
        for members in groups.values():
            if len(members) > 1:
                _merge_group(members, defined, extra)
        merged = {name: kept for name, (kept, _) in extra.items() if name != kept}
        if not merged:
            return merged
        for name, text in texts.items():   # printed callers (merged-away ones are erased)
            if name not in merged and any(c in extra for c in _CALL.findall(text)):
                calls[name] = _walk_calls(defined[name], collections.Counter())
        for found in calls.values():
            _rewrite_calls(found, extra)
        for name in merged:
            defined[name].erase()
        return merged
