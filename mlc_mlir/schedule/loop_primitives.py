"""Loop primitives (TVM ``split``, ``reorder``, ``fuse``, ``parallel``, ``vectorize``, ``unroll``,
``bind``, ``annotate``): each validates its arguments, edits the loop-nest model and records an
instruction. Realization in the transform dialect: :mod:`mlc_mlir.schedule.transform_script`."""

from __future__ import annotations

import math
import numbers
from typing import List, Optional, Sequence, Union

from ..errors import ScheduleError
from .factors import divisors
from .gpu_reduction import VECTOR_LANES
from .loop_nest import Loop
from .state import BlockRV, ExprRV, LoopRV, ScheduleState, as_int, as_str

THREAD_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "warpIdx.x", "warpIdx.y", "warpIdx.z")


def split_extents(extent: Optional[int], factors: Sequence[Optional[int]], label: str) -> List[Optional[int]]:
    """The loop extents of ``split(loop, factors)`` for a loop of ``extent`` (None: dynamic).

    Raises
    ------
    ScheduleError
        If the factors do not cover the extent exactly once (see :meth:`LoopPrimitives.split`).
    """
    given = [f for f in factors if f is not None]
    known = math.prod(given)
    if extent is None:
        if factors[0] is not None or len(given) != len(factors) - 1:
            raise ScheduleError(f"split: loop {label} has a dynamic extent; expected factors "
                                f"[None, <ints>...] (got {list(factors)})")
        return list(factors)
    if None in factors:
        i = factors.index(None)
        inner = math.prod(f for f in factors[i + 1:])
        outer = math.prod(f for f in factors[:i])
        # the None loop's extent: enough tiles of the inner ones to cover one outer tile
        e = -(-extent // known)
        out = list(factors)
        out[i] = e
        if outer > 1 and -(-extent // (e * inner)) != outer:
            raise ScheduleError(f"split: factors {list(factors)} do not cover extent {extent} of loop "
                                f"{label} ({outer} outer tiles of {e * inner})")
        return out
    inner = math.prod(factors[1:])
    if factors[0] != -(-extent // inner):
        raise ScheduleError(f"split: factors {list(factors)} do not cover extent {extent} of loop {label}; "
                            f"expected the outermost to be ceil({extent} / {inner}) = {-(-extent // inner)}")
    return list(factors)


class LoopPrimitives(ScheduleState):
    """Primitives that transform the loops of one block."""

    def split(self, loop: LoopRV, factors: Sequence[Union[int, None, ExprRV]]) -> List[LoopRV]:
        """Split ``loop`` into ``len(factors)`` nested loops (TVM ``split``).

        Realized as one ``transform.structured.tile_using_for`` (``tile_using_forall`` once
        parallel) per resulting loop.

        Parameters
        ----------
        loop : LoopRV
            A serial, unmarked loop of a block not attached elsewhere.
        factors : sequence of (int, numpy integer, ExprRV or None)
            At least two positive factors, at most one ``None`` (inferred as
            ``ceil(extent / product of the others)``). Factors need not divide the extent (TVM's
            imperfect split): the last iteration of a loop then runs a partial tile
            (``tile_using_for`` bounds it with ``affine.min``; a vectorized partial tile is
            vectorized with masks). Given without ``None``, the outermost factor must be
            ``ceil(extent / product of the others)``. A dynamic loop (extent None) takes
            ``None`` first and static inner factors.

        Returns
        -------
        list of LoopRV
            The new loops, outermost first.

        Raises
        ------
        ScheduleError
            ``split: factors [3, 5] do not cover extent 64 of loop j`` and the like.
        """
        blk, pos, lp = self._loop("split", loop)
        label = blk.label(pos)
        self._check_untouched("split", blk)
        if lp.kind != "serial" or lp.unroll is not None or lp.fused_group is not None:
            raise ScheduleError(f"split: loop {label} of '{blk.name}' is {lp.kind}"
                                f"{' (unrolled)' if lp.unroll is not None else ''}"
                                f"{' (fused)' if lp.fused_group is not None else ''}; expected a "
                                "serial loop (split before marking it)")
        if not isinstance(factors, (list, tuple)) or len(factors) < 2:
            raise ScheduleError(f"split: argument 'factors' is {factors!r}; expected a list of at "
                                "least 2 entries")
        nones = [i for i, f in enumerate(factors) if f is None]
        if len(nones) > 1:
            raise ScheduleError(f"split: at most one factor may be None, got {list(factors)}")
        clean = [None if f is None else f if isinstance(f, ExprRV) else as_int("split", "factors", f, 1)
                 for f in factors]
        if any(isinstance(f, ExprRV) and int(f) < 1 for f in clean):
            raise ScheduleError(f"split: argument 'factors' is {list(factors)}; expected positive ints")
        extents = split_extents(lp.extent, [None if f is None else int(f) for f in clean], label)
        sampled = any(isinstance(f, ExprRV) for f in clean)
        divs = () if lp.extent is None else divisors(lp.extent)
        new = [Loop(next(self._ids), lp.dim, e,
                    options=None if not sampled else
                    tuple(o for o in f.options if o in divs) or divs or tuple(f.options)
                    if isinstance(f, ExprRV) else divs if f is None else None)
               for e, f in zip(extents, clean)]
        blk.loops[pos:pos + 1] = new
        out = [self._loop_rv(blk, n) for n in new]
        self._record("split", [loop], {"factors": clean}, [o.rv for o in out])
        return out

    def reorder(self, *loops: LoopRV) -> None:
        """Reorder ``loops`` (of one block) into the given order, in the positions they occupy
        (TVM ``reorder``); realized by the order of the tiling ops.

        Raises
        ------
        ScheduleError
            If loops belong to different blocks, repeat, are fused, or a vectorized loop would
            move.
        """
        if len(loops) < 2:
            raise ScheduleError(f"reorder: needs at least two loops, got {len(loops)}")
        found = [self._loop("reorder", lp, f"loops[{i}]") for i, lp in enumerate(loops)]
        blk = found[0][0]
        self._check_untouched("reorder", blk)
        if any(b is not blk for b, _, _ in found):
            raise ScheduleError(f"reorder: loops belong to different blocks "
                                f"{sorted({b.name for b, _, _ in found})}; expected one block")
        # a fused loop stands for its whole group, which moves as one
        items = [blk.group(p) for _, p, _ in found]
        flat = [q for it in items for q in it]
        if len(set(flat)) != len(flat):
            raise ScheduleError("reorder: a loop appears twice")
        for q in flat:
            if blk.loops[q].kind == "vectorized":
                raise ScheduleError(f"reorder: loop {blk.label(q)} is vectorized; expected a loop "
                                    "outside the vectorized tile")
        new = list(blk.loops)
        for s_, q in zip(sorted(flat), flat):
            new[s_] = blk.loops[q]
        groups = {lp.fused_group for lp in new if lp.fused_group is not None}
        for g in groups:
            at = [i for i, lp in enumerate(new) if lp.fused_group == g]
            if at != list(range(at[0], at[0] + len(at))):
                raise ScheduleError("reorder: the order would split a fused loop; expected the "
                                    "fused loops to stay adjacent")
        blk.loops[:] = new
        self._record("reorder", list(loops), {}, [])

    def fuse(self, *loops: LoopRV) -> LoopRV:
        """Fuse consecutive loops into one (TVM ``fuse``): a parallel fused loop becomes one
        multi-dim ``scf.forall``; a serial one is coalesced (``transform.loop.coalesce``).
        Extent-1 loops of the group produce no loop and are left out.

        Raises
        ------
        ScheduleError
            If the loops are not adjacent (outer to inner) serial loops over distinct dims of one
            block.
        """
        if len(loops) < 2:
            raise ScheduleError(f"fuse: needs at least two loops, got {len(loops)}")
        found = [self._loop("fuse", lp, f"loops[{i}]") for i, lp in enumerate(loops)]
        blk = found[0][0]
        positions = [p for _, p, _ in found]
        if any(b is not blk for b, _, _ in found) or positions != list(range(positions[0], positions[0] + len(loops))):
            raise ScheduleError("fuse: loops must be adjacent, outer to inner, in one block; got "
                                f"positions {positions}")
        self._check_untouched("fuse", blk)
        dims = [l_.dim for _, _, l_ in found]
        if len(set(dims)) != len(dims):
            raise ScheduleError("fuse: loops over the same dim cannot be fused")
        for _, p, l_ in found:
            if l_.kind != "serial" or l_.unroll is not None or l_.fused_group is not None:
                raise ScheduleError(f"fuse: loop {blk.label(p)} is {l_.kind}"
                                    f"{' (unrolled)' if l_.unroll is not None else ''}"
                                    f"{' (fused)' if l_.fused_group is not None else ''}; expected serial")
        first = positions[0]
        if blk.kind == "cache":
            # the loops of a cache block only describe its copy: fusing makes one loop
            lp = Loop(next(self._ids), dims[0], math.prod(l_.extent for _, _, l_ in found))
            blk.loops[first:first + len(loops)] = [lp]
            out = self._loop_rv(blk, lp)
            self._record("fuse", list(loops), {}, [out.rv])
            return out
        attach = {b.compute_at for b in self._model.blocks if b.kind != "cache"} | \
            {b.reverse_compute_at for b in self._model.blocks if b.kind != "cache"} | {blk.decomposed_at}
        for p in range(first, len(blk.loops)):
            if blk.loops[p].id in attach and not (p == first and blk.loops[p].id == blk.decomposed_at):
                raise ScheduleError(f"fuse: a block is attached at loop {blk.label(p)} (at or inside "
                                    "the fused loops); fused serial loops are coalesced, which needs "
                                    "a perfect nest. Expected fuse (and parallel) before attaching")
        group = next(self._ids)
        for _, _, l_ in found:
            l_.fused_group = group
        rv = self._new_rv("l")
        self._record("fuse", list(loops), {}, [rv])
        return LoopRV(self._token, blk.id, found[0][2].id, rv)

    # ------------------------------------------------------------------ loop kinds
    def parallel(self, loop: LoopRV) -> None:
        """Run ``loop``'s iterations in parallel threads (TVM ``parallel``): realized as
        ``structured.tile_using_forall`` (``scf.forall``), lowered to OpenMP.

        Raises
        ------
        ScheduleError
            If the loop iterates a reduction dim, or is already vectorized/bound/unrolled.
        """
        blk, pos, lp = self._loop("parallel", loop)
        for p in blk.group(pos):
            l_ = blk.loops[p]
            if blk.dims[l_.dim].kind != "parallel" and not (blk.rfactor and blk.rfactor.factored == l_.id):
                raise ScheduleError(f"parallel: loop {blk.label(p)} of '{blk.name}' "
                                    "iterates a reduction dim (use rfactor first)")
            if l_.kind != "serial" or l_.unroll is not None:
                raise ScheduleError(f"parallel: loop {blk.label(p)} is already "
                                    f"{'unrolled' if l_.unroll is not None else l_.kind}")
        for p in blk.group(pos):
            blk.loops[p].kind = "parallel"
        self._record("parallel", [loop], {}, [])

    def vectorize(self, loop: LoopRV) -> None:
        """Vectorize the tile formed by ``loop`` and every loop inside it (TVM ``vectorize``):
        ``structured.vectorize`` of the tiled op, then vector lowering to the host's SIMD.

        Raises
        ------
        ScheduleError
            If a loop inside is parallel, bound, unrolled, fused or dynamic, another block is
            attached inside it, or the block is a decomposed reduction whose init would be
            inside it.
        """
        blk, pos, lp = self._loop("vectorize", loop)
        pinned = self._model.pinned_loops()
        for p in range(pos, len(blk.loops)):
            l_ = blk.loops[p]
            if l_.kind != "serial" or l_.unroll is not None or l_.fused_group is not None:
                raise ScheduleError(f"vectorize: loop {blk.label(p)} inside the vectorized "
                                    f"tile is {l_.kind if l_.kind != 'serial' else 'unrolled or fused'}")
            if l_.id in pinned:
                raise ScheduleError(f"vectorize: a block is attached at loop {blk.label(p)} inside "
                                    "the vectorized tile; expected no attachment there")
            if l_.extent is None:
                raise ScheduleError(f"vectorize: loop {blk.label(p)} of '{blk.name}' has a dynamic "
                                    "extent inside the vectorized tile; split it first")
        for p in range(pos, len(blk.loops)):
            blk.loops[p].kind = "vectorized"
        self._record("vectorize", [loop], {}, [])

    def unroll(self, loop: LoopRV, factor: Optional[int] = None) -> None:
        """Unroll ``loop`` by ``factor`` (None: fully) — ``transform.loop.unroll`` on its
        ``scf.for`` (TVM ``unroll``).

        Raises
        ------
        ScheduleError
            If the loop is parallel/vectorized/fused, or the factor is not a positive int that
            divides the extent.
        """
        blk, pos, lp = self._loop("unroll", loop)
        label = blk.label(pos)
        if factor is not None:
            factor = as_int("unroll", "factor", factor, 1)
        if lp.kind != "serial" or lp.fused_group is not None or lp.unroll is not None:
            raise ScheduleError(f"unroll: loop {label} is "
                                f"{lp.kind if lp.kind != 'serial' else 'fused or unrolled'}; expected serial")
        if factor is not None and lp.extent % factor != 0:
            raise ScheduleError(f"unroll: factor {factor} does not divide extent {lp.extent} of loop {label}")
        lp.unroll = 0 if factor is None else factor
        self._record("unroll", [loop], {"factor": factor} if factor is not None else {}, [])

    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind ``loop`` to a GPU axis (TVM ``bind``). Loops bound to ``blockIdx.*`` become one
        ``scf.forall`` with ``mapping = [#gpu.block<...>]``, loops bound to ``threadIdx.*`` one
        with ``#gpu.thread<...>`` (``structured.tile_using_forall``), in any axis order; a fused
        loop (``fuse(i1, j1)``) is one linear axis (``#gpu.thread<linear_dim_k>``). Loops bound
        to ``warpIdx.*`` (``#gpu.warp<...>``, instead of threadIdx) give each iteration to a
        whole warp of 32 threads: a block annotated ``mlc.mma_sync`` then runs its
        ``16x8x16`` f16 tiles on tensor cores (:mod:`mlc_mlir.pipeline.cuda`). On a cache
        block (``cache_read(..., "shared")``) it asks for a cooperative copy. Emission:
        :mod:`mlc_mlir.schedule.gpu_script`; mapping to the grid: ``gpu.map_forall_to_blocks``
        and ``gpu.map_nested_forall_to_threads`` in :mod:`mlc_mlir.pipeline.cuda`.

        The innermost loop of a reduction dim can be bound to ``threadIdx.*``: the threads of a
        block then reduce together (TVM's cross-thread reduction;
        :mod:`mlc_mlir.schedule.gpu_reduction`); every parallel loop must then be bound to
        ``blockIdx`` (or one inner loop to ``threadIdx.y``: rows of a block). Below the
        thread loop may stay one serial loop of :data:`VECTOR_LANES` elements, each thread's
        contiguous vector (16-byte loads where the row is aligned)::

            k0, k1 = sch.split(k, [None, 256])        # or [None, 256, 4]
            sch.bind(i, "blockIdx.x")
            sch.bind(k1, "threadIdx.x")

        Parameters
        ----------
        loop : LoopRV
            A serial loop of a parallel dim (a fused loop: all of its loops), or the innermost
            loop of a reduction dim (threadIdx axes only).
        thread_axis : str
            One of :data:`THREAD_AXES`.

        Raises
        ------
        ScheduleError
            For an unknown axis, a reduction loop that is not innermost or goes to blockIdx, a loop already bound/parallel/vectorized/
            unrolled, or an axis bound twice in the block.
        """
        blk, pos, lp = self._loop("bind", loop)
        label = blk.label(pos)
        as_str("bind", "thread_axis", thread_axis, THREAD_AXES)
        group = blk.group(pos)
        for p in group:
            l_ = blk.loops[p]
            inner = [q for q in blk.loops[p + 1:] if q.dim == l_.dim]
            if blk.dims[l_.dim].kind != "parallel" and not (
                    thread_axis.startswith("threadIdx") and len(group) == 1 and
                    (not inner or (len(inner) == 1 and inner[0].extent in (1,) + VECTOR_LANES))):
                raise ScheduleError(f"bind: loop {blk.label(p)} of '{blk.name}' iterates a reduction "
                                    "dim; only its innermost loop (or the one just outside an "
                                    f"innermost loop of {'/'.join(map(str, VECTOR_LANES))}: each "
                                    "thread's vector) can be bound, to a threadIdx axis (a "
                                    "cross-thread reduction)")
            if l_.kind != "serial" or l_.unroll is not None:
                raise ScheduleError(f"bind: loop {blk.label(p)} is already "
                                    f"{l_.kind if l_.kind != 'serial' else 'unrolled'}")
        if any(l_.thread == thread_axis for l_ in blk.loops):
            raise ScheduleError(f"bind: {thread_axis} is already bound in '{blk.name}'")
        for p in group:
            blk.loops[p].kind, blk.loops[p].thread = "bound", thread_axis
        self._record("bind", [loop, thread_axis], {}, [])

    def annotate(self, target: Union[BlockRV, LoopRV], key: str, value) -> None:
        """Attach ``key = value`` to a block (the op gets attribute ``key``) or a loop (the
        materialized loop op gets it) — TVM ``annotate``, realized by ``transform.annotate``.

        Parameters
        ----------
        target : BlockRV or LoopRV
        key : str
            Non-empty, not starting with ``_``.
        value : bool, int, float, str or ExprRV
            An ``ExprRV`` (a sampled decision) annotates its int value; the trace keeps the
            random variable, so a replay with another decision annotates that one.

        Raises
        ------
        ScheduleError
            For another type of key or value, or a loop that does not materialize (it stays in
            the op or has extent 1).
        """
        if not isinstance(key, str) or not key or key.startswith("_"):
            raise ScheduleError(f"annotate: argument 'key' is {key!r}; expected a non-empty str "
                                "not starting with '_'")
        if not isinstance(value, (bool, numbers.Integral, float, str, ExprRV)):
            raise ScheduleError(f"annotate: argument 'value' is {type(value).__name__}; "
                                "expected bool, int, float, str or ExprRV")
        recorded = value   # an ExprRV (an int) stays a random variable in the trace
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            value = int(value)
            recorded = recorded if isinstance(recorded, ExprRV) else value
        if isinstance(target, BlockRV):
            self._block("annotate", target, "target").annotations[key] = value
        elif isinstance(target, LoopRV):
            blk, pos, lp = self._loop("annotate", target, "target")
            if lp.extent == 1:
                raise ScheduleError(f"annotate: loop {blk.label(pos)} of '{blk.name}' has extent 1 "
                                    "and produces no loop op; expected a loop of extent > 1")
            lp.annotations[key] = value
        else:
            raise ScheduleError(f"annotate: argument 'target' is {target!r}; expected a BlockRV or LoopRV")
        self._record("annotate", [target, key, recorded], {}, [])
