"""``Schedule``: TVM-TensorIR-style schedule primitives on the linalg ops of a Module.

Each primitive checks its preconditions against the loop-nest model
(:mod:`mlc_mlir.schedule.loop_nest`), edits the model and records an instruction in
``sch.trace``. ``sch.mod`` materializes the current state: the trace's transform script
(:mod:`mlc_mlir.schedule.emit`) applied by the transform interpreter to a copy of the original
module. Source: TVM ``tir.Schedule`` (primitives, traces, sampling), MLIR transform dialect
(the realization of each primitive; see the mapping table in DESIGN.md).
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any, Dict, List, Optional, Sequence, Union

from ..errors import ScheduleError
from ..ir.module import Module
from .loop_nest import Block, Loop, analyze_module
from .trace import RV, Instruction, Trace

THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
CACHE_SCOPES = ("local", "global", "shared")


class BlockRV:
    """Handle to a block (a named linalg op) of a Schedule (TVM ``BlockRV``)."""

    def __init__(self, block_id: int, rv: RV):
        self.block_id = block_id
        self.rv = rv

    def __repr__(self) -> str:
        return f"BlockRV({self.rv.name})"


class LoopRV:
    """Handle to a loop of the loop-nest model (TVM ``LoopRV``)."""

    def __init__(self, block_id: int, loop_id: int, rv: RV):
        self.block_id = block_id
        self.loop_id = loop_id
        self.rv = rv

    def __repr__(self) -> str:
        return f"LoopRV({self.rv.name})"


class ExprRV(int):
    """A sampled integer (TVM ``ExprRV``): behaves as its value, remembers its trace variable."""

    def __new__(cls, value: int, rv: RV):
        obj = super().__new__(cls, value)
        obj.rv = rv
        return obj

    def __repr__(self) -> str:
        return f"ExprRV({self.rv.name}={int(self)})"


def _divisors(n: int) -> List[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def perfect_tilings(extent: int, n: int, max_innermost_factor: int) -> List[List[int]]:
    """All ordered ``n``-factor perfect factorizations of ``extent`` whose innermost factor is
    at most ``max_innermost_factor`` (the support of TVM's ``sample_perfect_tile``)."""
    def rec(rem: int, k: int) -> List[List[int]]:
        if k == 1:
            return [[rem]]
        return [[d] + rest for d in _divisors(rem) for rest in rec(rem // d, k - 1)]

    return [t for t in rec(extent, n) if t[-1] <= max_innermost_factor]


class Schedule:
    """A schedule of a Module's linalg ops (TVM ``tir.Schedule``).

    Parameters
    ----------
    mod : Module
        The payload (from the builder, ``Module.parse`` or a graph pass). It is not modified.
    seed : int, optional
        Seed of the sampling primitives' random generator.

    Examples
    --------
    >>> sch = Schedule(mod)
    >>> blk = sch.get_block("matmul")
    >>> i, j, k = sch.get_loops(blk)
    >>> j0, j1 = sch.split(j, factors=[None, 4])
    >>> sch.reorder(i, j0, k, j1)
    >>> print(sch.trace)
    """

    def __init__(self, mod: Module, seed: Optional[int] = None):
        if not isinstance(mod, Module):
            raise ScheduleError(f"Schedule: argument 'mod' is {type(mod).__name__}; expected mlc.Module")
        self._orig = mod
        self._info = analyze_module(mod)
        self._blocks: Dict[int, Block] = {}
        self._by_name: Dict[tuple, int] = {}
        self._ids = itertools.count()
        self._rv_count = itertools.count()
        self._rng = random.Random(seed)
        self.trace = Trace()
        self.trace._mod = mod
        self._cache = None

    # ------------------------------------------------------------------ plumbing
    def _new_rv(self, prefix: str) -> RV:
        return RV(f"{prefix}{next(self._rv_count)}")

    def _record(self, kind: str, inputs: List[Any], attrs: Dict[str, Any], outputs: List[RV],
                decision=None) -> None:
        self.trace.insts.append(Instruction(kind, [_rvof(x) for x in inputs],
                                            {k: _rvof(v) for k, v in attrs.items()}, outputs))
        if decision is not None:
            self.trace.decisions[len(self.trace.insts) - 1] = decision

    def _block(self, prim: str, b) -> Block:
        if not isinstance(b, BlockRV) or b.block_id not in self._blocks:
            raise ScheduleError(f"{prim}: expected a BlockRV of this schedule, got {b!r}")
        return self._blocks[b.block_id]

    def _loop(self, prim: str, lp) -> tuple:
        if not isinstance(lp, LoopRV) or lp.block_id not in self._blocks:
            raise ScheduleError(f"{prim}: expected a LoopRV of this schedule, got {lp!r}")
        blk = self._blocks[lp.block_id]
        try:
            pos = blk.loop_index(lp.loop_id)
        except KeyError:
            raise ScheduleError(f"{prim}: loop {lp.rv.name} no longer exists (it was split, fused "
                                "or replaced)") from None
        return blk, pos, blk.loops[pos]

    def _loop_label(self, blk: Block, pos: int) -> str:
        lp = blk.loops[pos]
        n = sum(1 for q in blk.loops[:pos] if q.dim == lp.dim)
        return f"{blk.dims[lp.dim].name}{n}" if any(q.dim == lp.dim for q in blk.loops if q is not lp) \
            else blk.dims[lp.dim].name

    def _check_untouched(self, prim: str, blk: Block) -> None:
        if blk.compute_at is not None or blk.reverse_compute_at is not None:
            raise ScheduleError(f"{prim}: block '{blk.name}' is already attached to another block's loop")

    # ------------------------------------------------------------------ blocks and loops
    def get_block(self, name: str, func_name: Optional[str] = None) -> BlockRV:
        """The block (linalg op) whose ``mlc.name`` is ``name`` (TVM ``get_block``).

        Emits ``transform.structured.match attributes {mlc.name = name}``.

        Raises
        ------
        ScheduleError
            If no op has that name, or several functions do and ``func_name`` is not given.
        """
        hits = [k for k in self._info if k[1] == name and (func_name is None or k[0] == func_name)]
        if not hits:
            names = sorted({k[1] for k in self._info if func_name is None or k[0] == func_name})
            raise ScheduleError(f"get_block: no block named '{name}'"
                                + (f" in function '{func_name}'" if func_name else "")
                                + f"; blocks: {names}")
        if len(hits) > 1:
            raise ScheduleError(f"get_block: '{name}' exists in functions {sorted(k[0] for k in hits)}; "
                                "pass func_name=")
        bid = self._block_model(hits[0])
        rv = self._new_rv("b")
        attrs = {"func_name": func_name} if func_name is not None else {}
        self._record("get_block", [name], attrs, [rv])
        return BlockRV(bid, rv)

    def _block_model(self, key) -> int:
        if key not in self._by_name:
            info = self._info[key]
            bid = next(self._ids)
            loops = [Loop(next(self._ids), d.index, d.extent) for d in info["dims"]]
            self._blocks[bid] = Block(bid, key[1], key[0], info["op_name"], info["dims"], loops,
                                      info["operand_shapes"], info["num_inputs"])
            self._by_name[key] = bid
        return self._by_name[key]

    def get_loops(self, block: BlockRV) -> List[LoopRV]:
        """The loops of ``block``, outermost first (TVM ``get_loops``). Before any split these
        are the op's iteration dims (``i, j, k`` for matmul)."""
        blk = self._block("get_loops", block)
        out = [LoopRV(blk.id, lp.id, self._new_rv("l")) for lp in blk.loops]
        self._record("get_loops", [block], {}, [o.rv for o in out])
        return out

    def split(self, loop: LoopRV, factors: Sequence[Union[int, None, ExprRV]]) -> List[LoopRV]:
        """Split ``loop`` into ``len(factors)`` nested loops (TVM ``split``); one factor may be
        ``None`` (inferred). Realized as one ``structured.tile_using_for`` per resulting loop.

        Raises
        ------
        ScheduleError
            ``split: factors [3, 5] do not divide extent 128 of loop j`` and the like (only
            perfect splits: linalg vectorization needs static tiles).
        """
        blk, pos, lp = self._loop("split", loop)
        label = self._loop_label(blk, pos)
        self._check_untouched("split", blk)
        if lp.kind != "serial" or lp.unroll is not None:
            raise ScheduleError(f"split: loop {label} of '{blk.name}' is {lp.kind}; split it before "
                                "marking it")
        if not isinstance(factors, (list, tuple)) or len(factors) < 2:
            raise ScheduleError(f"split: factors must be a list of at least 2 entries, got {factors!r}")
        nones = [i for i, f in enumerate(factors) if f is None]
        if len(nones) > 1:
            raise ScheduleError(f"split: at most one factor may be None, got {list(factors)}")
        for f in factors:
            if f is not None and (not isinstance(f, int) or isinstance(f, bool) or f < 1):
                raise ScheduleError(f"split: factor {f!r} is not a positive int")
        known = math.prod(int(f) for f in factors if f is not None)
        if lp.extent % known != 0 or (not nones and known != lp.extent):
            raise ScheduleError(f"split: factors {[None if f is None else int(f) for f in factors]} "
                                f"do not divide extent {lp.extent} of loop {label}")
        extents = [lp.extent // known if f is None else int(f) for f in factors]
        new = [Loop(next(self._ids), lp.dim, e) for e in extents]
        if any(isinstance(f, ExprRV) for f in factors):
            for n_ in new:
                n_.annotations["sampled"] = True
        blk.loops[pos:pos + 1] = new
        out = [LoopRV(blk.id, n.id, self._new_rv("l")) for n in new]
        self._record("split", [loop], {"factors": list(factors)}, [o.rv for o in out])
        return out

    def reorder(self, *loops: LoopRV) -> None:
        """Reorder ``loops`` (of one block) into the given order, in the positions they occupy
        (TVM ``reorder``); realized by the order of the tiling ops.

        Raises
        ------
        ScheduleError
            If loops belong to different blocks, repeat, or a vectorized loop would move.
        """
        if len(loops) < 2:
            raise ScheduleError("reorder: needs at least two loops")
        found = [self._loop("reorder", lp) for lp in loops]
        blk = found[0][0]
        if any(b is not blk for b, _, _ in found):
            raise ScheduleError("reorder: loops belong to different blocks")
        positions = [p for _, p, _ in found]
        if len(set(positions)) != len(positions):
            raise ScheduleError("reorder: a loop appears twice")
        for _, p, l_ in found:
            if l_.kind == "vectorized":
                raise ScheduleError(f"reorder: loop {self._loop_label(blk, p)} is vectorized")
        slots = sorted(positions)
        objs = [l_ for _, _, l_ in found]
        for s, o in zip(slots, objs):
            blk.loops[s] = o
        self._record("reorder", list(loops), {}, [])

    def fuse(self, *loops: LoopRV) -> LoopRV:
        """Fuse consecutive loops into one (TVM ``fuse``): a parallel fused loop becomes one
        multi-dim ``scf.forall``; a serial one is coalesced (``transform.loop.coalesce``).

        Raises
        ------
        ScheduleError
            If the loops are not adjacent (outer to inner) in one block.
        """
        if len(loops) < 2:
            raise ScheduleError("fuse: needs at least two loops")
        found = [self._loop("fuse", lp) for lp in loops]
        blk = found[0][0]
        positions = [p for _, p, _ in found]
        if any(b is not blk for b, _, _ in found) or positions != list(range(positions[0], positions[0] + len(loops))):
            raise ScheduleError("fuse: loops must be adjacent, outer to inner, in one block; got "
                                f"positions {positions}")
        dims = [l_.dim for _, _, l_ in found]
        if len(set(dims)) != len(dims):
            raise ScheduleError("fuse: loops over the same dim cannot be fused")
        for _, p, l_ in found:
            if l_.kind != "serial":
                raise ScheduleError(f"fuse: loop {self._loop_label(blk, p)} is {l_.kind}")
        group = next(self._ids)
        for _, _, l_ in found:
            l_.annotations["fused_group"] = group
        rv = self._new_rv("l")
        self._record("fuse", list(loops), {}, [rv])
        return LoopRV(blk.id, found[0][2].id, rv)

    def _group(self, blk: Block, pos: int) -> List[int]:
        g = blk.loops[pos].annotations.get("fused_group")
        if g is None:
            return [pos]
        return [i for i, l_ in enumerate(blk.loops) if l_.annotations.get("fused_group") == g]

    # ------------------------------------------------------------------ loop kinds
    def parallel(self, loop: LoopRV) -> None:
        """Run ``loop``'s iterations in parallel threads (TVM ``parallel``): realized as
        ``structured.tile_using_forall`` (``scf.forall``), lowered to OpenMP.

        Raises
        ------
        ScheduleError
            If the loop iterates a reduction dim, or is already vectorized/bound.
        """
        blk, pos, lp = self._loop("parallel", loop)
        for p in self._group(blk, pos):
            l_ = blk.loops[p]
            if blk.dims[l_.dim].kind != "parallel" and not (blk.rfactor and blk.rfactor[1] == l_.id):
                raise ScheduleError(f"parallel: loop {self._loop_label(blk, p)} of '{blk.name}' "
                                    "iterates a reduction dim (use rfactor first)")
            if l_.kind != "serial":
                raise ScheduleError(f"parallel: loop {self._loop_label(blk, p)} is already {l_.kind}")
        for p in self._group(blk, pos):
            blk.loops[p].kind = "parallel"
        self._record("parallel", [loop], {}, [])

    def vectorize(self, loop: LoopRV) -> None:
        """Vectorize the tile formed by ``loop`` and every loop inside it (TVM ``vectorize``):
        ``structured.vectorize`` of the tiled op, then vector lowering to the host's SIMD.

        Raises
        ------
        ScheduleError
            If a loop inside is parallel, bound or unrolled.
        """
        blk, pos, lp = self._loop("vectorize", loop)
        for p in range(pos, len(blk.loops)):
            l_ = blk.loops[p]
            if l_.kind != "serial" or l_.unroll is not None or "fused_group" in l_.annotations:
                raise ScheduleError(f"vectorize: loop {self._loop_label(blk, p)} inside the vectorized "
                                    f"tile is {l_.kind if l_.kind != 'serial' else 'unrolled or fused'}")
        for p in range(pos, len(blk.loops)):
            blk.loops[p].kind = "vectorized"
        self._record("vectorize", [loop], {}, [])

    def unroll(self, loop: LoopRV, factor: Optional[int] = None) -> None:
        """Unroll ``loop`` by ``factor`` (None: fully) — ``transform.loop.unroll`` on its
        ``scf.for``.

        Raises
        ------
        ScheduleError
            If the loop is parallel/vectorized, or the factor does not divide the extent.
        """
        blk, pos, lp = self._loop("unroll", loop)
        label = self._loop_label(blk, pos)
        if lp.kind != "serial" or "fused_group" in lp.annotations:
            raise ScheduleError(f"unroll: loop {label} is {lp.kind if lp.kind != 'serial' else 'fused'}")
        if factor is not None and (int(factor) < 1 or lp.extent % int(factor) != 0):
            raise ScheduleError(f"unroll: factor {factor} does not divide extent {lp.extent} of loop {label}")
        lp.unroll = 0 if factor is None else int(factor)
        self._record("unroll", [loop], {"factor": factor} if factor is not None else {}, [])

    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind ``loop`` to a GPU axis (TVM ``bind``): consecutive loops bound to block (thread)
        axes become one multi-dim ``scf.forall`` (``structured.tile_using_forall``, annotated
        ``mlc.bind``); ``pipelines/cuda.pipeline`` maps it to the grid (thread block) with
        ``gpu-map-parallel-loops`` and ``convert-parallel-loops-to-gpu``. Axes of one kind follow
        the dim order (x for the outermost dim).

        Raises
        ------
        ScheduleError
            For an unknown axis, a reduction loop, or an axis bound twice in the block.
        """
        blk, pos, lp = self._loop("bind", loop)
        label = self._loop_label(blk, pos)
        if thread_axis not in THREAD_AXES:
            raise ScheduleError(f"bind: thread axis {thread_axis!r} is not one of {list(THREAD_AXES)}")
        if blk.dims[lp.dim].kind != "parallel":
            raise ScheduleError(f"bind: loop {label} of '{blk.name}' iterates a reduction dim")
        if lp.kind != "serial":
            raise ScheduleError(f"bind: loop {label} is already {lp.kind}")
        if any(l_.thread == thread_axis for l_ in blk.loops):
            raise ScheduleError(f"bind: {thread_axis} is already bound in '{blk.name}'")
        kind, axis = thread_axis.split(".")
        for l_ in blk.loops:
            if l_.thread and l_.thread.startswith(kind):
                other = l_.thread.split(".")[1]
                if (l_.dim < lp.dim) != (other < axis[-1]) or l_.dim == lp.dim:
                    raise ScheduleError(
                        f"bind: {kind} axes must follow the dim order (x for the outermost dim): "
                        f"loop {label} (dim {blk.dims[lp.dim].name}) cannot take {thread_axis} while "
                        f"dim {blk.dims[l_.dim].name} has {l_.thread}")
        lp.kind, lp.thread = "bound", thread_axis
        self._record("bind", [loop, thread_axis], {}, [])

    def annotate(self, target: Union[BlockRV, LoopRV], key: str, value) -> None:
        """Attach ``key = value`` to a block (the op gets attribute ``key``) or a loop (the
        materialized loop op gets it). ``value``: bool, int, float or str."""
        if not isinstance(key, str) or not key:
            raise ScheduleError(f"annotate: key must be a non-empty str, got {key!r}")
        if not isinstance(value, (bool, int, float, str)):
            raise ScheduleError(f"annotate: value must be bool/int/float/str, got {type(value).__name__}")
        if isinstance(target, BlockRV):
            self._block("annotate", target).annotations[key] = value
        else:
            self._loop("annotate", target)[2].annotations[key] = value
        self._record("annotate", [target, key, value], {}, [])

    # ------------------------------------------------------------------ placement
    def _producer_names(self, blk: Block) -> List[str]:
        return self._info[(blk.func, blk.name)].get("producers", [])

    def compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Compute producer ``block`` inside consumer ``loop`` (TVM ``compute_at``): the tile the
        consumer needs is computed there — ``structured.fuse_into_containing_op`` into each
        enclosing loop from the outermost down to ``loop``.

        Raises
        ------
        ScheduleError
            If ``block`` is not a producer of the loop's block, or already has loop transforms.
        """
        blk = self._block("compute_at", block)
        cblk, pos, lp = self._loop("compute_at", loop)
        if blk.kind == "cache":
            if blk.parent != cblk.id:
                raise ScheduleError(f"compute_at: cache block '{blk.name}' can only be placed in "
                                    f"loops of '{self._blocks[blk.parent].name}'")
            blk.compute_at = lp.id
            self._record("compute_at", [block, loop], {}, [])
            return
        self._attach_checks("compute_at", blk, cblk, producer=True)
        blk.compute_at = lp.id
        self._record("compute_at", [block, loop], {}, [])

    def reverse_compute_at(self, block: BlockRV, loop: LoopRV) -> None:
        """Compute consumer ``block`` (an elementwise epilogue) inside producer ``loop`` (TVM
        ``reverse_compute_at``). Realized by tiling the consumer with the producer's loops up to
        ``loop`` and fusing the producer into those loops (``fuse_into_containing_op``), so the
        epilogue runs on each tile while it is hot.

        Raises
        ------
        ScheduleError
            If ``block`` does not consume the loop's block with an identity map, or a loop at or
            above ``loop`` iterates a reduction dim.
        """
        blk = self._block("reverse_compute_at", block)
        pblk, pos, lp = self._loop("reverse_compute_at", loop)
        self._attach_checks("reverse_compute_at", blk, pblk, producer=False)
        for p in range(pos + 1):
            if pblk.dims[pblk.loops[p].dim].kind != "parallel":
                raise ScheduleError(f"reverse_compute_at: loop {self._loop_label(pblk, p)} of "
                                    f"'{pblk.name}' (at or above the target) iterates a reduction dim")
        p_shape = pblk.operand_shapes[pblk.num_inputs]
        c_shape = blk.operand_shapes[blk.num_inputs] if len(blk.operand_shapes) > blk.num_inputs else None
        if c_shape != p_shape:
            raise ScheduleError(f"reverse_compute_at: '{blk.name}' writes shape {c_shape}; expected "
                                f"{p_shape} like '{pblk.name}' (only same-shape epilogues are supported)")
        blk.reverse_compute_at = lp.id
        blk.annotations["_attach_order"] = next(self._ids)
        self._record("reverse_compute_at", [block, loop], {}, [])

    def _attach_checks(self, prim: str, blk: Block, other: Block, producer: bool) -> None:
        if blk is other:
            raise ScheduleError(f"{prim}: block '{blk.name}' cannot be attached to its own loop")
        if blk.func != other.func:
            raise ScheduleError(f"{prim}: blocks '{blk.name}' and '{other.name}' are in different functions")
        self._check_untouched(prim, blk)
        if any(l_.kind != "serial" or l_.unroll is not None for l_ in blk.loops) or \
                len(blk.loops) != len(blk.dims):
            raise ScheduleError(f"{prim}: block '{blk.name}' already has loop transformations")
        prod, cons = (blk, other) if producer else (other, blk)
        chain = self._consumer_chain(prod, cons)
        if chain is None:
            raise ScheduleError(f"{prim}: block '{prod.name}' is not a producer of '{cons.name}'")

    def _consumer_chain(self, prod: Block, cons: Block):
        names = self._info[(cons.func, cons.name)].get("producers", [])
        if prod.name in names:
            return []
        # an epilogue of an epilogue: cons reads a block already attached to prod's loops
        for b in self._blocks.values():
            if b.name in names and b.reverse_compute_at is not None and \
                    any(lp.id == b.reverse_compute_at for lp in prod.loops):
                return [b]
        return None

    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Separate the reduction's init from its update and place the init right above
        ``loop`` (TVM ``decompose_reduction``): the ``linalg.fill`` that initializes the output
        is fused (``fuse_into_containing_op``) into the loops outside ``loop``.

        Returns the init block (``<name>.init``).

        Raises
        ------
        ScheduleError
            If the block has no reduction dim or no fill init, or a loop outside ``loop``
            iterates a reduction dim.
        """
        blk = self._block("decompose_reduction", block)
        cblk, pos, lp = self._loop("decompose_reduction", loop)
        if cblk is not blk:
            raise ScheduleError(f"decompose_reduction: loop {loop.rv.name} is not a loop of '{blk.name}'")
        if not any(d.kind == "reduction" for d in blk.dims):
            raise ScheduleError(f"decompose_reduction: block '{blk.name}' has no reduction dim")
        for p in range(pos):
            if blk.dims[blk.loops[p].dim].kind != "parallel":
                raise ScheduleError(f"decompose_reduction: loop {self._loop_label(blk, p)} outside "
                                    f"{self._loop_label(blk, pos)} iterates a reduction dim; the init "
                                    "would run on every reduction step")
        init_name = self._info[(blk.func, blk.name)].get("init")
        if init_name is None:
            raise ScheduleError(f"decompose_reduction: the output of '{blk.name}' is not initialized "
                                "by a named linalg.fill")
        others = [p for p in self._info[(blk.func, blk.name)]["producers"] if p != init_name]
        if others and pos > 0:
            raise ScheduleError(f"decompose_reduction: inputs of '{blk.name}' are computed by {others}; "
                                "placing the init inside loops (transform.structured.fuse) would "
                                "recompute them per tile. Schedule the outlined primitive function")
        if any(blk.loops[p].kind == "bound" for p in range(pos)):
            raise ScheduleError("decompose_reduction: loops outside the init are bound to GPU axes; "
                                "decompose before bind")
        iblk = self._blocks[self._block_model((blk.func, init_name))]
        iblk.kind, iblk.parent = "init", blk.id
        blk.decomposed_at = lp.id
        rv = self._new_rv("b")
        self._record("decompose_reduction", [block, loop], {}, [rv])
        return BlockRV(iblk.id, rv)

    def cache_read(self, block: BlockRV, read_buffer_index: int, storage_scope: str = "local") -> BlockRV:
        """Stage input ``read_buffer_index`` of ``block`` in a packed local buffer (TVM
        ``cache_read``): ``structured.pad`` with ``nofold`` on that operand of the innermost tile
        (a contiguous copy); ``compute_at(cache_block, loop)`` then hoists the packing out of
        the loops inside ``loop`` (``structured.hoist_pad``), so each packed panel is reused.

        Returns the cache block.

        Raises
        ------
        ScheduleError
            For an index that is not an input, or an unknown scope.
        """
        blk = self._block("cache_read", block)
        if not isinstance(read_buffer_index, int) or not 0 <= read_buffer_index < blk.num_inputs:
            raise ScheduleError(f"cache_read: read_buffer_index {read_buffer_index!r} is not an input "
                                f"of '{blk.name}' (it has {blk.num_inputs})")
        if storage_scope not in CACHE_SCOPES:
            raise ScheduleError(f"cache_read: storage scope {storage_scope!r} is not one of {list(CACHE_SCOPES)}")
        if any(i == read_buffer_index for i, _, _ in blk.cache_reads):
            raise ScheduleError(f"cache_read: input {read_buffer_index} of '{blk.name}' is already cached")
        cid = next(self._ids)
        cache = Block(cid, f"{blk.name}.read{read_buffer_index}_{storage_scope}", blk.func, "tensor.pad",
                      [], [], [], 0, kind="cache", parent=blk.id)
        self._blocks[cid] = cache
        blk.cache_reads.append((read_buffer_index, storage_scope, cid))
        rv = self._new_rv("b")
        self._record("cache_read", [block, read_buffer_index, storage_scope], {}, [rv])
        return BlockRV(cid, rv)

    def rfactor(self, loop: LoopRV, factor_axis: int = 0) -> BlockRV:
        """Factorize a reduction (TVM ``rfactor``): ``loop`` must be the inner loop ``k1`` of a
        reduction dim split into ``k0, k1``; partial results are accumulated in a buffer indexed
        by ``k1`` (so ``k1`` becomes data-parallel and can be vectorized or parallelized) over
        the ``k0`` loop, then combined. Realized by ``structured.tile_reduction_using_for`` at
        the ``k0`` loop. Returns the rf block (the partial reduction); ``factor_axis`` must be 0
        (the rf dim is appended last by upstream).

        Raises
        ------
        ScheduleError
            If the loop is not the inner half of a 2-way split reduction dim.
        """
        blk, pos, lp = self._loop("rfactor", loop)
        label = self._loop_label(blk, pos)
        if factor_axis != 0:
            raise ScheduleError(f"rfactor: factor_axis={factor_axis} is not supported (0 only)")
        if blk.dims[lp.dim].kind != "reduction":
            raise ScheduleError(f"rfactor: loop {label} of '{blk.name}' iterates a parallel dim")
        same = [p for p, q in enumerate(blk.loops) if q.dim == lp.dim]
        if len(same) != 2 or same[1] != pos:
            raise ScheduleError(f"rfactor: loop {label} must be the inner loop of a reduction dim "
                                f"split into exactly two loops (it has {len(same)})")
        if blk.rfactor is not None or blk.decomposed_at is not None:
            raise ScheduleError(f"rfactor: '{blk.name}' is already factorized or decomposed")
        outer = blk.loops[same[0]]
        if outer.kind != "serial" or lp.kind != "serial":
            raise ScheduleError(f"rfactor: loops of the reduction dim of '{blk.name}' must be serial")
        blk.rfactor = (outer.id, lp.id)
        rv = self._new_rv("b")
        self._record("rfactor", [loop], {"factor_axis": factor_axis} if factor_axis else {}, [rv])
        return BlockRV(blk.id, rv)

    def cache_write(self, block: BlockRV, write_buffer_index: int = 0,
                    storage_scope: str = "local") -> BlockRV:
        """Accumulate output ``write_buffer_index`` of ``block`` in a local buffer and copy it
        back (TVM ``cache_write``): ``structured.pad`` with ``nofold`` on the output operand of
        the innermost parallel tile and ``copy_back_op = "linalg.copy"``.

        Returns the cache block.

        Raises
        ------
        ScheduleError
            For an index that is not an output, an unknown scope, or a second cache_write.
        """
        blk = self._block("cache_write", block)
        n_out = len(blk.operand_shapes) - blk.num_inputs
        if not isinstance(write_buffer_index, int) or not 0 <= write_buffer_index < n_out:
            raise ScheduleError(f"cache_write: write_buffer_index {write_buffer_index!r} is not an "
                                f"output of '{blk.name}' (it has {n_out})")
        if storage_scope not in CACHE_SCOPES:
            raise ScheduleError(f"cache_write: storage scope {storage_scope!r} is not one of {list(CACHE_SCOPES)}")
        if blk.cache_writes:
            raise ScheduleError(f"cache_write: '{blk.name}' already has a write cache")
        cid = next(self._ids)
        self._blocks[cid] = Block(cid, f"{blk.name}.write{write_buffer_index}_{storage_scope}",
                                  blk.func, "tensor.pad", [], [], [], 0, kind="cache", parent=blk.id)
        blk.cache_writes.append((blk.num_inputs + write_buffer_index, storage_scope))
        rv = self._new_rv("b")
        self._record("cache_write", [block, write_buffer_index, storage_scope], {}, [rv])
        return BlockRV(cid, rv)

    # ------------------------------------------------------------------ sampling
    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision: Optional[Sequence[int]] = None) -> List[ExprRV]:
        """Sample ``n`` factors whose product is the loop's extent (TVM ``sample_perfect_tile``).

        In the transform script each tile size the factors determine is a
        ``transform.tune.knob`` whose options are the divisors of the extent and whose
        ``selected`` value is this decision.

        Raises
        ------
        ScheduleError
            If ``decision`` is not a perfect tiling of the extent.
        """
        blk, pos, lp = self._loop("sample_perfect_tile", loop)
        if n < 1:
            raise ScheduleError(f"sample_perfect_tile: n={n} must be >= 1")
        if decision is None:
            support = perfect_tilings(lp.extent, n, max_innermost_factor)
            if not support:
                raise ScheduleError(f"sample_perfect_tile: no {n}-way tiling of extent {lp.extent} "
                                    f"with innermost <= {max_innermost_factor}")
            decision = self._rng.choice(support)
        decision = [int(d) for d in decision]
        if len(decision) != n or math.prod(decision) != lp.extent or min(decision) < 1:
            raise ScheduleError(f"sample_perfect_tile: decision {decision} is not a {n}-way perfect "
                                f"tiling of extent {lp.extent}")
        rvs = [self._new_rv("v") for _ in range(n)]
        self._record("sample_perfect_tile", [loop], {"n": n, "max_innermost_factor": max_innermost_factor},
                     rvs, decision=decision)
        return [ExprRV(d, r) for d, r in zip(decision, rvs)]

    def sample_categorical(self, candidates: Sequence[int], probs: Sequence[float],
                           decision: Optional[int] = None) -> ExprRV:
        """Sample one of ``candidates`` with probabilities ``probs`` (TVM
        ``sample_categorical``); the decision is the chosen index.

        Raises
        ------
        ScheduleError
            If lengths differ, probabilities are negative, or the decision is out of range.
        """
        candidates, probs = list(candidates), list(probs)
        if not candidates or len(candidates) != len(probs) or any(p < 0 for p in probs) or sum(probs) <= 0:
            raise ScheduleError(f"sample_categorical: need equal-length candidates and non-negative "
                                f"probs, got {candidates} and {probs}")
        if decision is None:
            decision = self._rng.choices(range(len(candidates)), weights=probs)[0]
        if not 0 <= int(decision) < len(candidates):
            raise ScheduleError(f"sample_categorical: decision {decision} is not an index of {candidates}")
        rv = self._new_rv("v")
        self._record("sample_categorical", [], {"candidates": candidates, "probs": probs}, [rv],
                     decision=int(decision))
        return ExprRV(int(candidates[int(decision)]), rv)

    # ------------------------------------------------------------------ results
    @property
    def blocks(self) -> List[Block]:
        """The loop-nest models of the blocks retrieved so far."""
        return list(self._blocks.values())

    def show(self, file=None) -> str:
        """Print (and return) every scheduled block's loop nest."""
        text = "\n".join(b.describe() for b in self._blocks.values() if b.kind == "compute")
        print(text, file=file)
        return text

    def transform_script(self, design_space: bool = False):
        """The transform module realizing the current schedule (see :mod:`.emit`); with
        ``design_space`` the knobs of sampled tile sizes carry no decision."""
        from .emit import emit_transform_script

        return emit_transform_script(self, design_space)

    @property
    def mod(self) -> Module:
        """The payload after applying the schedule so far (emitted + interpreted, cached)."""
        key = self.trace.as_json()
        if self._cache is None or self._cache[0] != key:
            from .emit import apply_transform_script

            self._cache = (key, apply_transform_script(self._orig, self.transform_script()))
        return self._cache[1]


def _rvof(x):
    if isinstance(x, (BlockRV, LoopRV)):
        return x.rv
    if isinstance(x, ExprRV):
        return x.rv
    if isinstance(x, (list, tuple)):
        return [_rvof(v) for v in x]
    return x
