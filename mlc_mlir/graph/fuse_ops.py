"""``FuseOps`` (``mlc-fuse-ops``): group ops by pattern kind and outline each group into a
primitive function, the unit that gets scheduled and tuned.

Rules (TVM Relay ``FuseOps``, simplified to single-consumer producers):

* elementwise/broadcast/injective producers fuse into their consumer's group (any kind except
  opaque), so elementwise chains, bias adds and activations end up together;
* an out-elementwise-fusable op (matmul, conv, pooling) or a reduction absorbs its elementwise
  and broadcast consumers (the epilogue), and a group holds at most one such op;
* a reshape (``tensor.collapse_shape``/``expand_shape``) does not fuse into a matmul/conv/
  reduction consumer: ``linalg-fuse-elementwise-ops`` would propagate it into that op and turn a
  named ``linalg.matmul`` into an anonymous ``linalg.generic`` (no longer found by schedules or
  ``DispatchLibrary``); for the same reason a group with a named contraction takes no reshape
  from its epilogue side either (BERT's ``matmul -> bias add -> expand_shape -> gelu``: fused,
  the matmul became a 4-d generic that no rule schedules, 19 ms against 0.2 ms for its task);
  a group of reshapes alone stays in the graph function (a view);
* constants, ``tensor.empty`` and inits (``linalg.fill`` of a scalar into a ``tensor.empty``)
  are cloned into every group that uses them.

Each group becomes ``func.func private @fused_<names> attributes {mlc.primitive}`` called from the
graph function; inside, upstream ``linalg-fuse-elementwise-ops`` merges each elementwise chain
into one ``linalg.generic`` (named ``<first op>.fused``).

Before::

    %0 = linalg.matmul {mlc.name = "dense"} ...
    %1 = linalg.generic {mlc.name = "dense.bias_add"} ins(%0, %bias ...)
    %2 = linalg.generic {mlc.name = "relu"} ins(%1 ...)

After::

    %0 = call @fused_dense_dense_bias_add_relu(%x) : (tensor<1x64xf32>) -> tensor<1x128xf32>
    func.func private @fused_dense_dense_bias_add_relu(...) attributes {mlc.primitive} {
      %0 = linalg.matmul {mlc.name = "dense"} ...
      %1 = linalg.generic {mlc.name = "dense.bias_add.fused"} ...   // bias add + relu
    }
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

from .._mlir import PassManager, func_d, ir
from ..ir.module import OP_NAME_ATTR, Module
from .use_def import clone_ops, has_uses, op_name, producer, used_values, users_in
from .op_kinds import (BROADCAST, ELEMWISE, FREE_OPS, INJECTIVE, OPAQUE, OUT_EWISE_FUSABLE,
                       REDUCTION, is_master, op_kind)
from .pass_manager import Pass, register_pass

PRIMITIVE_ATTR = "mlc.primitive"


_name = op_name
_producer = producer


#: arith ops that compute symbolic sizes (``index`` values) from ``tensor.dim``
_SIZE_ARITH = ("arith.addi", "arith.subi", "arith.muli", "arith.floordivsi", "arith.divsi",
               "arith.divui", "arith.index_cast", "arith.sitofp")


def _is_free(op) -> bool:
    """Constants, tensor.empty and inits (a fill of a scalar into a tensor.empty) are cloned into
    every group that uses them instead of being computed once and passed around; so are the
    sizes of dynamic tensors (``tensor.dim`` and ``arith`` on ``index``), read again inside the
    group from its own arguments."""
    if op.name in FREE_OPS or op.name == "tensor.dim":
        return True
    if op.name in _SIZE_ARITH:
        return all(not isinstance(r.type, ir.ShapedType) for r in op.results)
    if op.name == "linalg.fill":
        src = _producer(op.operands[1])
        return src is not None and src.name == "tensor.empty"
    return False


class _UnionFind:
    def __init__(self, n):
        self.parent = list(range(n))

    def find(self, i):
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)


_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


def _can_fuse(pk: str, ck: str, producer_name: str = "") -> bool:
    if pk == OPAQUE or ck == OPAQUE:
        return False
    if producer_name in _RESHAPES and is_master(ck):
        return False
    if pk in (ELEMWISE, BROADCAST, INJECTIVE):
        return True                                    # into anything non-opaque
    if pk in (OUT_EWISE_FUSABLE, REDUCTION):
        return ck in (ELEMWISE, BROADCAST)             # the epilogue
    return False


def _row_edge(p, users, memo: Optional[dict] = None) -> bool:
    """Whether ``p`` computes per-row values (a row max, sum or mean, or an elementwise op on
    them) that every user, a ``linalg.generic``, reads broadcast along its other dims (through
    an indexing map with fewer results than it has loops): softmax's max read by its exp-sum
    and its output, layer_norm's mean read by its variance and its output; or (:func:`_row_values`)
    a row's elementwise values read by a reduction over the row and by elementwise ops: softmax's
    ``exp(x - max)``, summed and scaled. Such a producer joins its users' group even when it has
    several users or its users hold a reduction, so a row's chain of reductions is one unit that a
    schedule can run row by row (``schedule.rules.row_fused``)."""
    if p.name != "linalg.generic" or len(p.results) != 1 or not users:
        return False
    if _row_values(p, users, memo):
        return True
    if not _from_reduction(p, 0, memo):
        return False   # a rank-raising copy (a 1x1 convolution's im2col) reads no row value
    for u in users:
        if u.name != "linalg.generic":
            return False
        maps = ir.ArrayAttr(u.attributes["indexing_maps"])
        nloops = len(ir.ArrayAttr(u.attributes["iterator_types"]))
        for i, operand in enumerate(u.operands):
            if operand == p.results[0] and len(ir.AffineMapAttr(maps[i]).value.results) >= nloops:
                return False
    return True


def _row_values(p, users, memo: Optional[dict] = None) -> bool:
    """Whether ``p``, an all-parallel ``linalg.generic`` of rank ``n``, is read whole (identity
    maps) by ``linalg.generic`` users only: one reduction over the innermost dim alone and
    all-parallel ops of rank ``n`` (at least one) whose other inputs are per-row values computed
    from that reduction by ``linalg.generic`` ops alone (:func:`_row_path`): softmax's
    ``e = exp(x - max)``, read by ``sum(e)`` and by ``e * (1 / sum)``. The group then holds
    all of ``p``'s users and no path leaves it and comes back (a residual sum read by a
    layer_norm and by the next residual add, or a top-k's masking by an ``argmax`` reshaped to
    keep its dim, stays apart)."""
    its = _iterators(p, memo)
    n = len(its)
    if n == 0 or "reduction" in its:
        return False
    reductions, others = [], []
    for u in users:
        if u.name != "linalg.generic":
            return False
        uits = _iterators(u, memo)
        if len(uits) != n or "reduction" in uits[:-1]:
            return False
        maps = ir.ArrayAttr(u.attributes["indexing_maps"])
        reads = [i for i, v in enumerate(u.operands) if v == p.results[0]]
        if any(ir.AffineMapAttr(maps[i]).value != ir.AffineMap.get_identity(n) for i in reads):
            return False
        (reductions if uits[-1] == "reduction" else others).append(u)
    if len(reductions) != 1 or not others:
        return False
    for u in others:
        n_in = len(u.operands) - len(u.results)
        rows = [v for v in list(u.operands)[:n_in] if v != p.results[0]]
        paths = [_row_path(v, reductions, 0, memo) for v in rows]
        if None in paths or not any(paths):
            return False
    return True


def _from_reduction(op, depth: int = 0, memo: Optional[dict] = None) -> bool:
    """Whether ``op`` is a ``linalg.generic`` reduction or an all-parallel one computed from such
    a reduction (softmax's ``1 / sum``, layer_norm's ``rsqrt(var + eps)``)."""
    if op is None or op.name != "linalg.generic" or depth > 8:
        return False
    if "reduction" in _iterators(op, memo):
        return True
    n_in = len(op.operands) - len(op.results)
    return any(_from_reduction(_producer(x), depth + 1, memo) for x in list(op.operands)[:n_in])


def _iterators(op, memo: Optional[dict] = None) -> List[str]:
    """``op``'s iterator types (``"parallel"``/``"reduction"``); ``memo`` (op -> list), if given,
    keeps them for the ops seen before (one :func:`fusion_groups` asks for an op's many times)."""
    if memo is not None and op in memo:
        return memo[op]
    # the array printed once (``[#linalg.iterator_type<parallel>, ...]``), not each element
    text = str(op.attributes["iterator_types"])
    its = ["reduction" if "reduction" in a else "parallel" for a in text.split(",")] if "<" in text else []
    if memo is not None:
        memo[op] = its
    return its


def _row_path(v, reductions, depth: int = 0, memo: Optional[dict] = None) -> Optional[bool]:
    """None unless ``v`` is a constant or init, or the result of one of ``reductions`` or of an
    all-parallel ``linalg.generic`` whose inputs all are (recursively), each of these results
    used once (by the next op of the path: no path leaves the group); otherwise whether ``v``
    is computed from one of ``reductions`` (an elementwise user of a row's values that reads
    none of them joins no row group: its group and the reduction's would be apart, with the
    row values between them)."""
    op = _producer(v)
    if op is None or depth > 8:
        return None
    if _is_free(op):
        return False
    if len(list(v.uses)) != 1:
        return None
    if any(op == r for r in reductions):
        return True
    if op.name != "linalg.generic" or "reduction" in _iterators(op, memo):
        return None
    n_in = len(op.operands) - len(op.results)
    paths = [_row_path(x, reductions, depth + 1, memo) for x in list(op.operands)[:n_in]]
    return None if None in paths else any(paths)


def _reductions(f) -> int:
    """Number of ``linalg.generic`` ops with a reduction iterator in ``f``'s body."""
    n = 0
    for o in f.regions[0].blocks[0].operations:
        if o.operation.name == "linalg.generic" and \
                "reduction" in str(o.operation.attributes["iterator_types"]):
            n += 1
    return n


def fusion_groups(f) -> List[List[ir.Operation]]:
    """The groups ``FuseOps`` outlines from graph function ``f`` (see the module docstring), each
    in program order, ordered by their last op; groups of reshapes alone are left out (views).
    Free ops (constants, ``tensor.empty``, inits) belong to no group: :func:`outline` clones
    them into every group that reads them."""
    block = f.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    index = {op: i for i, op in enumerate(ops)}
    kinds = [op_kind(op) if not _is_free(op) and op.name != "func.return" else None
             for op in ops]
    uf = _UnionFind(len(ops))
    memo: dict = {}   # iterator types per op, for this function's edges
    master = {i: is_master(k) for i, k in enumerate(kinds) if k is not None}
    # per group: holds a named contraction (linalg.matmul, conv, mmt4d: not a generic) /
    # holds a reshape; the two never share a group (see the module docstring)
    named = {i: master[i] and ops[i].name != "linalg.generic" for i in master}
    reshaped = {i: ops[i].name in _RESHAPES for i in master}
    for ci, cop in enumerate(ops):
        ck = kinds[ci]
        if ck is None:
            continue
        for v in cop.operands:
            p = _producer(v)
            if p is None or p not in index:
                continue
            pi = index[p]
            pk = kinds[pi]
            if pk is None:
                continue
            users = {u.owner for u in v.uses}
            row = _row_edge(p, users, memo)
            if not row and (len(list(p.results[0].uses)) != 1 or len(users) != 1):
                continue                            # a multi-use producer is materialized
            is_init = p.name == "linalg.fill"
            if not (is_init or row or _can_fuse(pk, ck, p.name)):
                continue
            gp, gc = uf.find(pi), uf.find(ci)
            if gp == gc:
                continue
            if master.get(gp) and master.get(gc) and not row:
                continue                            # one matmul/conv/reduction per group
            if (named.get(gp) and reshaped.get(gc)) or (named.get(gc) and reshaped.get(gp)):
                continue                            # a reshape never joins a named contraction
            m = master.get(gp) or master.get(gc)
            nm, rs = named.get(gp) or named.get(gc), reshaped.get(gp) or reshaped.get(gc)
            uf.union(pi, ci)
            root = uf.find(ci)
            master[root], named[root], reshaped[root] = m, nm, rs
    groups: Dict[int, List[int]] = {}
    for i, k in enumerate(kinds):
        if k is not None and k != OPAQUE:
            groups.setdefault(uf.find(i), []).append(i)
    return [[ops[i] for i in members] for members in sorted(groups.values(), key=lambda m: m[-1])
            if not all(ops[i].name in _RESHAPES for i in members)]   # reshapes alone: a view


@register_pass
class FuseOps(Pass):
    """Fuse ops into primitive functions by pattern kind (see module docstring).

    Graph functions are the ``func.func`` ops without ``mlc.primitive``; ops that are already in
    primitive functions are left alone, so the pass is idempotent. The input may have been
    canonicalized/CSE'd: shared constants and scalars captured by ``linalg.generic`` bodies are
    cloned into every primitive that reads them.

    Parameters
    ----------
    fuse_elementwise : bool
        Merge each elementwise chain of a primitive into one ``linalg.generic`` (upstream
        ``linalg-fuse-elementwise-ops``), named ``<first op>.fused``.

    Raises
    ------
    IRError
        If the result does not verify (a bug in the pass).
    """

    name = "mlc-fuse-ops"

    def __init__(self, fuse_elementwise: bool = True):
        self.fuse_elementwise = fuse_elementwise

    def transform(self, mod: Module) -> Module:
        with mod.context, ir.Location.unknown():
            used_names = set(mod.function_names())
            for f in mod.func_ops():
                if f.is_external or PRIMITIVE_ATTR in f.attributes:
                    continue
                self._fuse_function(mod, f, used_names)
        if self.fuse_elementwise:
            self._merge_elementwise(mod)
        return mod

    # ------------------------------------------------------------------ grouping
    def _fuse_function(self, mod: Module, f, used_names) -> None:
        for group in fusion_groups(f):
            outline(mod, f, group, used_names=used_names)

    # ------------------------------------------------------------------ elementwise chains
    def _merge_elementwise(self, mod: Module) -> None:
        """Run ``linalg-fuse-elementwise-ops`` in primitive functions and name the results."""
        with mod.context, ir.Location.unknown():
            for f in mod.func_ops():
                if PRIMITIVE_ATTR not in f.attributes or _reductions(f) > 1:
                    continue   # a row chain (_row_edge) keeps its per-row ops apart
                names = [_name(o) for o in f.regions[0].blocks[0].operations
                         if o.operation.name == "linalg.generic" and OP_NAME_ATTR in o.attributes]
                PassManager.parse("func.func(linalg-fuse-elementwise-ops)").run(f.operation)
                used = {ir.StringAttr(o.attributes[OP_NAME_ATTR]).value
                        for o in f.regions[0].blocks[0].operations if OP_NAME_ATTR in o.attributes}
                fresh = iter(n for n in names if n not in used)
                for o in f.regions[0].blocks[0].operations:
                    if o.operation.name.startswith("linalg.") and OP_NAME_ATTR not in o.attributes:
                        base = next(fresh, o.operation.name.split(".")[-1])
                        o.attributes[OP_NAME_ATTR] = ir.StringAttr.get(f"{base}.fused")


def outline(mod: Module, f, group: List, name: str = None, used_names=None,
            keep_outside: Optional[Callable[[ir.Operation], bool]] = None):
    """Outline ``group`` into a private primitive function called from ``f``.

    Constants, ``tensor.empty`` and inits the group reads (as operands or captured by its ops'
    bodies) are cloned into the primitive; every other value it reads becomes an argument, and
    every result used outside the group becomes a result of the call. Usable from custom passes
    (a dense + bias-add fusor); IR is built in ``mod``'s context (active inside
    :meth:`Pass.transform`).

    Parameters
    ----------
    mod : Module
        The module holding ``f``; the primitive is added to it.
    f : func.FuncOp
        The graph function the ops belong to.
    group : list of ir.Operation
        Ops of ``f``'s body, in program order.
    name : str, optional
        Symbol of the primitive (default ``fused_<op names>``, made unique).
    used_names : set of str, optional
        Symbols already taken (updated); default: the module's function names.
    keep_outside : callable, optional
        ``keep_outside(free_op)``: a free op (e.g. a weight constant) for which it is true is
        not cloned; its value becomes an argument like any other (a function shared by several
        call sites then takes each site's weights).

    Returns
    -------
    func.FuncOp
        The new function, marked ``mlc.primitive`` (the unit schedules and tuning work on).

    Source: TVM Relay ``FuseOps`` (``Primitive=1`` functions); MLIR ``outlineIfOp``-style
    region outlining.
    """
    used_names = set(mod.function_names()) if used_names is None else used_names
    group = [getattr(op, "operation", op) for op in group]
    members = set(group)
    block = group[0].block
    inputs, free = [], []

    def cloned(q):
        return q is not None and _is_free(q) and not (keep_outside and keep_outside(q))

    def take_free(p):
        for v in used_values(p):  # a fill's scalar and tensor.empty come first
            q = _producer(v)
            if cloned(q) and q not in free:
                take_free(q)
            elif (q is None or q not in members) and not cloned(q) \
                    and all(v != x for x in inputs):
                inputs.append(v)   # e.g. the tensor whose tensor.dim gives a dynamic size
        if p not in free:
            free.append(p)

    for op in group:
        for v in used_values(op):  # operands and values captured by the op's regions
            p = _producer(v)
            if p is not None and p in members:
                continue
            if cloned(p):
                take_free(p)
            elif all(v != x for x in inputs):
                inputs.append(v)
    outputs = []
    for op in group:
        for r in op.results:
            if any(u not in members for u in users_in(r, block)):
                outputs.append(r)
    base = name or "fused_" + "_".join(_name(op).replace(".", "_") for op in group
                                       if op.name not in ("linalg.fill",))[:80]
    name, n = base, 1
    while name in used_names:
        name, n = f"{base}_{n}", n + 1
    used_names.add(name)
    with ir.InsertionPoint(f):
        prim = func_d.FuncOp(name, ir.FunctionType.get([v.type for v in inputs],
                                                       [r.type for r in outputs]),
                             visibility="private")
    prim.attributes[PRIMITIVE_ATTR] = ir.UnitAttr.get()
    entry = prim.regions[0].blocks.append(*[v.type for v in inputs])
    mapping = dict(zip(inputs, entry.arguments))
    with ir.InsertionPoint(entry):
        clone_ops(free + group, mapping)
        func_d.ReturnOp([mapping[r] for r in outputs])
    with ir.InsertionPoint(group[-1]):
        call = func_d.CallOp([r.type for r in outputs], ir.FlatSymbolRefAttr.get(name), inputs)
    # the call sits after the last member: every output is used later
    call.operation.move_after(group[-1])
    for old, new in zip(outputs, call.results):
        old.replace_all_uses_with(new)
    for op in reversed(group):
        op.erase()
    for op in reversed(free):
        if not has_uses(op):
            op.erase()
    return prim
