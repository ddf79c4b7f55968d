"""``Schedule.show``: the loop nests a loop-nest model materializes, as indented text.

Built from the same queries emission uses (:meth:`LoopNestModel.tilings`,
:meth:`~LoopNestModel.inner_start`, attachments), so each ``for``/``forall`` line is one
``scf.for``/``scf.forall`` of ``sch.mod``, with attached blocks where they are computed. The
cooperative fetch of a ``shared`` cache prints its loops as scheduled, as TVM's script does
(``for ax0_1 in thread_binding(64, thread="threadIdx.x")``): ``sch.mod`` has the staged tile,
and the CUDA lowering spreads its copy over the threads (:mod:`mlc_mlir.pipeline.cuda_fetch`).
"""

from __future__ import annotations

import math

from typing import List

from .gpu_script import block_threads, is_gpu_block
from .loop_nest import Block, LoopNestModel, Tiling


def _loop_line(blk: Block, t: Tiling) -> str:
    names = [blk.label(p) for p in t.positions]
    lp = blk.loops[t.positions[0]]
    if t.kind == "forall":
        tag = "forall"
        if lp.kind == "bound":
            tag += " (bind " + ", ".join(blk.loops[p].thread for p in t.positions) + ")"
        return f"{tag} ({', '.join(names)}) in ({', '.join(map(str, t.trip_counts))}):"
    if len(t.positions) > 1:
        n = 1
        for c in t.trip_counts:
            n *= c
        return f"for {'_'.join(names)}_fused in range({n}):"
    tag = "for"
    if lp.unroll is not None:
        tag += f" (unroll {lp.unroll or 'full'})"
    return f"{tag} {names[0]} in range({t.trip_counts[0]}):"


def _op_line(model: LoopNestModel, blk: Block, start: int) -> str:
    inner = model.inner_start(blk, start)
    text = f'{blk.op_name} "{blk.name}"'
    rest = [f"{blk.label(p)}={blk.loops[p].extent}" for p in range(inner, len(blk.loops))
            if blk.loops[p].extent > 1]
    if any(lp.kind == "vectorized" for lp in blk.loops):
        text += "  # vectorized: " + ", ".join(rest)
    elif rest:
        text += "  # in the op: " + ", ".join(rest)
    return text


class _Printer:
    def __init__(self, model: LoopNestModel):
        self.model = model
        self.lines: List[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def attached_at(self, blk: Block, positions, depth: int) -> None:
        ids = {blk.loops[p].id for p in positions}
        for a in self.model.attached(blk):
            if a.compute_at in ids:
                self.emit(depth, _op_line(self.model, a, 0))
        for c in blk.cache_reads:
            cache = self.model.cache_block(c.block_id)
            if cache.compute_at in ids and c.scope == "shared" and is_gpu_block(self.model, blk):
                self.fetch(cache, block_threads(blk), depth)
            elif cache.compute_at in ids:
                self.packing(blk, c.operand, blk.loop_index(cache.compute_at), cache.name, depth)

    def fetch(self, cache: Block, nthreads: int, depth: int) -> None:
        """The cooperative fetch of a ``shared`` cache as its loops stand (TVM's script:
        ``for ax0_1 in T.thread_binding(64, thread="threadIdx.x")``): a loop bound to threads
        prints the extent the block's threads share, a vectorized loop stays in the copy; a
        fetch with no bound loop is still spread over the block's ``nthreads`` threads."""
        vec = []
        for lp in cache.loops:
            same = [q for q in cache.loops if q.dim == lp.dim]
            name = f"ax{lp.dim}" + (f"_{same.index(lp)}" if len(same) > 1 else "")
            if lp.kind == "vectorized":
                vec.append(f"{name}={lp.extent}")
            elif lp.kind == "bound":
                self.emit(depth, f'for {name} in thread_binding({lp.extent}, thread="{lp.thread}"):')
                depth += 1
            elif lp.extent > 1:
                self.emit(depth, f"for {name} in range({lp.extent}):")
                depth += 1
        tile = "x".join(str(d.extent) for d in cache.dims)
        spread = "" if any(lp.kind == "bound" for lp in cache.loops) else \
            f", spread over the block's {nthreads} threads"
        self.emit(depth, f'tensor.pad "{cache.name}"  # shared tile {tile}{spread}' +
                  (f", vectorized: {', '.join(vec)}" if vec else ""))

    def packing(self, blk: Block, operand: int, ca: int, name: str, depth: int) -> None:
        """The packing loops ``hoist_pad`` builds: the materialized loops between the compute_at
        loop and the packed tile that index the operand."""
        pos = self.model.cache_position(blk, operand)
        dims = set(blk.info.operand_dims[operand])
        for t in self.model.tilings(blk):
            if ca < t.positions[0] <= pos and any(blk.loops[q].dim in dims for q in t.positions):
                self.emit(depth, _loop_line(blk, t) + "  # packing")
                depth += 1
        # the packed tile is copied one row at a time (transform_script.emit_cache_reads)
        tile = [math.prod(q.extent for q in blk.loops[pos + 1:] if q.dim == d)
                for d in blk.info.operand_dims[operand]]
        for r, extent in enumerate(tile[:-1]):
            if extent > 1:
                self.emit(depth, f"for r{r} in range({extent}):  # packing rows")
                depth += 1
        self.emit(depth, f'tensor.pad "{name}"')

    def nest(self, blk: Block, start: int, depth: int, stop=None, op: bool = True) -> int:
        """Loops of ``blk`` in ``[start, stop)``, its attachments, the init of a decomposed
        reduction and (``op``) the op itself; returns the depth reached."""
        init = self.model.init_of(blk)
        init_pos = blk.loop_index(blk.decomposed_at) if init is not None else 0
        tilings = list(self.model.tilings(blk, start, stop))
        end = stop if stop is not None else len(blk.loops)
        if start == 0:
            # attachments at loops that produce no loop op (extent 1) sit at the top
            first = tilings[0].positions[0] if tilings else end
            self.attached_at(blk, range(0, first), depth)
        init_done = init is None or init_pos < start
        for i, t in enumerate(tilings):
            if not init_done and t.positions[0] >= init_pos:
                self.emit(depth, f'linalg.fill "{init.name}"')
                init_done = True
            self.emit(depth, _loop_line(blk, t))
            depth += 1
            nxt = tilings[i + 1].positions[0] if i + 1 < len(tilings) else end
            self.attached_at(blk, range(t.positions[0], nxt), depth)
        if not init_done and (op or init_pos < end):
            self.emit(depth, f'linalg.fill "{init.name}"')
        if op:
            self.emit(depth, _op_line(self.model, blk, start))
        return depth

    def block(self, blk: Block) -> None:
        consumers = self.model.epilogues(blk)
        if not consumers:
            self.nest(blk, 0, 0)
            return
        pos = blk.loop_index(consumers[0].reverse_compute_at)
        depth = self.nest(blk, 0, 0, pos + 1, op=False)
        self.nest(blk, pos + 1, depth)
        for c in consumers:
            self.emit(depth, f'{c.op_name} "{c.name}"')


def describe(model: LoopNestModel) -> str:
    """The materialized loop nests of every function with a scheduled block, ops in program
    order; unscheduled named ops appear at the top level."""
    p = _Printer(model)
    funcs = []
    for f, _ in model.ops:
        if f not in funcs and any(b.func == f for b in model.blocks):
            funcs.append(f)
    for f in funcs:
        p.lines.append(f"func @{f}:")
        for (g, name), info in model.ops.items():
            if g != f:
                continue
            blk = model.find(f, name)
            if blk is None or (blk.kind == "compute" and blk.compute_at is None
                               and blk.reverse_compute_at is None and not _is_init(model, blk)):
                if blk is None:
                    if _init_owner(model, f, name) is None:
                        p.emit(1, f'{info.op_name} "{name}"')
                    continue
                sub = _Printer(model)
                sub.block(blk)
                p.lines.extend("  " + line for line in sub.lines)
    return "\n".join(p.lines)


def _is_init(model: LoopNestModel, blk: Block) -> bool:
    return blk.kind == "init"


def _init_owner(model: LoopNestModel, func: str, name: str):
    for b in model.blocks:
        if b.func == func and b.info.init == name and b.decomposed_at is not None:
            return b
    return None
