# RUN: %PYTHON %s | FileCheck %s
# Each schedule primitive: the transform ops it emits (SCRIPT) and the payload after applying
# them (PAYLOAD), one section per primitive.

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops


def matmul(m=64, n=64, k=32):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(f.arg("a", shape=(m, k)), f.arg("b", shape=(k, n))))
    return bb.finish()


def section(name, sch):
    print(f"TEST: {name}")
    print("SCRIPT")
    print(sch.transform_script())
    print("PAYLOAD")
    print(sch.mod)


def loops(sch, name="matmul"):
    blk = sch.get_block(name)
    return blk, sch.get_loops(blk)


# CHECK-LABEL: TEST: get_block
# CHECK: transform.structured.match ops{["func.func"]} attributes {sym_name = "main"}
# CHECK: transform.structured.match attributes {mlc.name = "matmul"}
sch = mlc.Schedule(matmul())
loops(sch)
section("get_block", sch)

# CHECK-LABEL: TEST: split
# CHECK: SCRIPT
# CHECK: tile_using_for %{{.*}} tile_sizes [0, 16, 0]
# CHECK: PAYLOAD
# CHECK: scf.for %{{.*}} = %c0 to %c64 step %c16
# CHECK: linalg.matmul {mlc.name = "matmul"} ins({{.*}} : tensor<1x32xf32>, tensor<32x16xf32>)
sch = mlc.Schedule(matmul())
_, (i, j, k) = loops(sch)
sch.split(j, [None, 16])
section("split", sch)

# k outermost; i and j stay inside the op (convert-linalg-to-loops emits them in that order)
# CHECK-LABEL: TEST: reorder
# CHECK: SCRIPT
# CHECK: tile_sizes [0, 0, 1]
# CHECK-NOT: tile_using_for
# CHECK: PAYLOAD
# CHECK: scf.for %{{.*}} = %c0 to %c32 step %c1
# CHECK: linalg.matmul {{.*}} tensor<64x1xf32>, tensor<1x64xf32>
sch = mlc.Schedule(matmul())
_, (i, j, k) = loops(sch)
sch.reorder(k, i, j)
section("reorder", sch)

# CHECK-LABEL: TEST: fuse
# CHECK: SCRIPT
# CHECK: tile_using_for %{{.*}} tile_sizes [1, 1, 0]
# CHECK: transform.loop.coalesce
# CHECK: PAYLOAD
# CHECK: scf.for %{{.*}} = %{{.*}} to %c4096 step %{{.*}}
sch = mlc.Schedule(matmul())
_, (i, j, k) = loops(sch)
sch.fuse(i, j)
section("fuse", sch)

# CHECK-LABEL: TEST: parallel
# CHECK: SCRIPT
# CHECK: tile_using_forall %{{.*}} tile_sizes [32, 0, 0]
# CHECK: PAYLOAD
# CHECK: scf.forall (%{{.*}}) in (2)
sch = mlc.Schedule(matmul())
_, (i, j, k) = loops(sch)
i0, i1 = sch.split(i, [2, None])
sch.parallel(i0)
section("parallel", sch)

# CHECK-LABEL: TEST: vectorize
# CHECK: SCRIPT
# CHECK: transform.structured.vectorize %{{.*}} {create_named_contraction, vectorize_nd_extract}
# CHECK: transform.loop.hoist_loop_invariant_subsets
# CHECK: transform.apply_patterns.vector.lower_contraction
# CHECK: PAYLOAD
# CHECK: vector.transfer_read {{.*}} vector<8x16xf32>
# CHECK: vector.fma
sch = mlc.Schedule(matmul())
_, (i, j, k) = loops(sch)
i0, i1 = sch.split(i, [None, 8])
j0, j1 = sch.split(j, [None, 16])
sch.reorder(i0, j0, k, i1, j1)
sch.vectorize(i1)
section("vectorize", sch)

# CHECK-LABEL: TEST: unroll
# CHECK: SCRIPT
# CHECK: transform.loop.unroll %{{.*}} {factor = 2 : i64}
# CHECK: PAYLOAD
# CHECK: scf.for %{{.*}} = %c0 to %c32 step %c2
# CHECK-COUNT-2: linalg.matmul
sch = mlc.Schedule(matmul())
_, (i, j, k) = loops(sch)
k0, k1 = sch.split(k, [None, 1])
sch.unroll(k0, 2)
section("unroll", sch)

# CHECK-LABEL: TEST: compute_at
# CHECK: SCRIPT
# CHECK: transform.structured.fuse_into_containing_op
# CHECK: PAYLOAD
# CHECK: scf.for
# CHECK: math.exp
# CHECK: linalg.matmul
bb = mlc.GraphBuilder()
with bb.function("main") as f:
    f.output(ops.matmul(ops.exp(f.arg("a", shape=(32, 16))), f.arg("b", shape=(16, 24))))
sch = mlc.Schedule(bb.finish())
_, (i, j, k) = loops(sch)
i0, i1 = sch.split(i, [None, 4])
sch.compute_at(sch.get_block("exp"), i0)
section("compute_at", sch)

# CHECK-LABEL: TEST: reverse_compute_at
# CHECK: SCRIPT
# CHECK: %[[RELU:.*]] = transform.structured.match attributes {mlc.name = "relu"}
# CHECK: tile_using_for %[[RELU]] tile_sizes [8, 0]
# CHECK: fuse_into_containing_op
# CHECK: PAYLOAD
# CHECK: scf.for
# CHECK: linalg.matmul
# CHECK: arith.maximumf
rng = np.random.default_rng(0)
bb = mlc.GraphBuilder()
with bb.function("main") as f:
    f.output(ops.relu(ops.matmul(f.arg("a", shape=(32, 16)), rng.random((16, 24), dtype=np.float32))))
sch = mlc.Schedule(bb.finish())
_, (i, j, k) = loops(sch)
i0, i1 = sch.split(i, [None, 8])
sch.reverse_compute_at(sch.get_block("relu"), i0)
section("reverse_compute_at", sch)

# B's 32x16 panel is packed right inside j1 and hoisted out of j1 and i0 (2 loops): one
# packed buffer of 2 panels per j0 iteration, copied one 16-wide row at a time
# CHECK-LABEL: TEST: cache_read
# CHECK: SCRIPT
# CHECK: transform.structured.pad %{{.*}} {copy_back_op = "none", nofold_flags = [0, 1, 0]
# CHECK: transform.get_producer_of_operand %{{.*}}[1]
# CHECK: transform.structured.hoist_pad %{{.*}} by 2 loops
# CHECK: transform.structured.tile_using_for %{{.*}} tile_sizes [1, 0]
# CHECK: transform.structured.vectorize %{{.*}} vector_sizes [1, 16]
# CHECK: PAYLOAD
# CHECK: tensor.empty() : tensor<2x32x16xf32>
sch = mlc.Schedule(matmul())
blk, (i, j, k) = loops(sch)
j0, j1, j2 = sch.split(j, [None, 2, 16])
i0, i1 = sch.split(i, [None, 8])
sch.reorder(j0, i0, j1, k, i1, j2)
c = sch.cache_read(blk, 1, "local")
sch.compute_at(c, j0)
sch.vectorize(i1)
section("cache_read", sch)

# CHECK-LABEL: TEST: decompose_reduction
# CHECK: SCRIPT
# CHECK: transform.structured.fuse %{{.*}} tile_sizes [1, 0, 0]
# CHECK: PAYLOAD
# CHECK: scf.for
# CHECK: linalg.fill {mlc.name = "matmul.init"} {{.*}} -> tensor<1x64xf32>
# CHECK: scf.for
# CHECK: linalg.matmul
sch = mlc.Schedule(matmul())
blk, (i, j, k) = loops(sch)
sch.reorder(i, k, j)
sch.decompose_reduction(blk, k)
section("decompose_reduction", sch)

# CHECK-LABEL: TEST: rfactor
# CHECK: SCRIPT
# CHECK: transform.structured.tile_reduction_using_for %{{.*}} by tile_sizes = [0, 0, 8]
# CHECK: PAYLOAD
# CHECK: linalg.fill ins(%{{.*}}) outs(%{{.*}} : tensor<1x1x8xf32>)
# CHECK: linalg.reduce
sch = mlc.Schedule(matmul())
blk, (i, j, k) = loops(sch)
k0, k1 = sch.split(k, [None, 8])
sch.rfactor(k1)
section("rfactor", sch)

# CHECK-LABEL: TEST: bind
# CHECK: SCRIPT
# CHECK: tile_using_forall %{{.*}} tile_sizes [8, 16](mapping = [#gpu.block<x>, #gpu.block<y>])
# CHECK: tile_using_forall %{{.*}} tile_sizes [1, 1](mapping = [#gpu.thread<x>, #gpu.thread<y>])
# CHECK: PAYLOAD
# CHECK: scf.forall (%{{.*}}, %{{.*}}) in (8, 4)
# CHECK: scf.forall (%{{.*}}, %{{.*}}) in (8, 16)
# CHECK: {mapping = [#gpu.thread<x>, #gpu.thread<y>]}
# CHECK: {mapping = [#gpu.block<x>, #gpu.block<y>]}
bb = mlc.GraphBuilder()
with bb.function("main") as f:
    f.output(ops.relu(f.arg("x", shape=(64, 64))))
sch = mlc.Schedule(bb.finish())
blk, (i, j) = loops(sch, "relu")
i0, i1 = sch.split(i, [None, 8])
j0, j1 = sch.split(j, [None, 16])
sch.reorder(i0, j0, i1, j1)
sch.bind(i0, "blockIdx.x")
sch.bind(j0, "blockIdx.y")
sch.bind(i1, "threadIdx.x")
sch.bind(j1, "threadIdx.y")
section("bind", sch)

# CHECK-LABEL: TEST: annotate
# CHECK: SCRIPT
# CHECK: transform.param.constant 4 : i64
# CHECK: transform.annotate
# CHECK: PAYLOAD
# CHECK: mlc.unroll_hint = 4 : i64
sch = mlc.Schedule(matmul())
blk, (i, j, k) = loops(sch)
i0, i1 = sch.split(i, [None, 8])
sch.annotate(i0, "mlc.unroll_hint", 4)
section("annotate", sch)

# CHECK-LABEL: TEST: sample_perfect_tile
# CHECK: SCRIPT
# the knob offers the tile sizes max_innermost_factor (16) allows
# CHECK: %[[K:.*]] = transform.tune.knob<"matmul.j.tile1"> = 4 : i64 from options = [1, 2, 4, 8, 16] -> !transform.param<i64>
# CHECK: tile_using_for %{{.*}} tile_sizes [0, %[[K]], 0]
# CHECK: PAYLOAD
# CHECK: step %c4
sch = mlc.Schedule(matmul())
blk, (i, j, k) = loops(sch)
sch.split(j, sch.sample_perfect_tile(j, n=2, decision=[16, 4]))
section("sample_perfect_tile", sch)

# CHECK-LABEL: TEST: sample_categorical
# CHECK: SCRIPT
# the knob offers the candidates
# CHECK: transform.tune.knob<"matmul.k.tile1"> = 8 : i64 from options = [4, 8]
# CHECK: PAYLOAD
# CHECK: step %c8
sch = mlc.Schedule(matmul())
blk, (i, j, k) = loops(sch)
v = sch.sample_categorical([4, 8], [0.5, 0.5], decision=1)
sch.split(k, [None, v])
section("sample_categorical", sch)

# CHECK-LABEL: TEST: cache_write
# CHECK: SCRIPT
# CHECK: transform.structured.pad %{{.*}} {copy_back_op = "linalg.copy", nofold_flags = [0, 0, 1]
# CHECK: PAYLOAD
# CHECK: %[[ACC:.*]] = tensor.pad %[[C:.*]] nofold low[0, 0] high[0, 0]
# CHECK: %[[MM:.*]] = linalg.matmul {mlc.name = "matmul"} {{.*}} outs(%[[ACC]] : tensor<1x16xf32>)
# CHECK: linalg.copy ins(%[[MM]] : tensor<1x16xf32>) outs(%[[C]] : tensor<1x16xf32>)
sch = mlc.Schedule(matmul())
blk, (i, j, k) = loops(sch)
sch.split(j, [None, 16])
sch.cache_write(blk, 0, "local")
section("cache_write", sch)


# Invalid schedules: each primitive names itself and what is wrong, before anything is emitted.
def diagnose(build):
    sch = mlc.Schedule(matmul())
    blk, lps = loops(sch)
    try:
        build(sch, blk, *lps)
    except mlc.ScheduleError as e:
        print(f"DIAG: {e}")


# CHECK-LABEL: TEST: invalid
print("TEST: invalid")
# CHECK: DIAG: split: factors [3, 5] do not cover extent 64 of loop j
diagnose(lambda sch, blk, i, j, k: sch.split(j, [3, 5]))
# CHECK: DIAG: split: {{.*}}at most one factor may be None
diagnose(lambda sch, blk, i, j, k: sch.split(j, [None, None]))
# CHECK: DIAG: parallel: {{.*}}reduction
diagnose(lambda sch, blk, i, j, k: sch.parallel(k))
# CHECK: DIAG: cache_write: write_buffer_index 3 is not an output of 'matmul' (it has 1)
diagnose(lambda sch, blk, i, j, k: sch.cache_write(blk, 3, "local"))
# CHECK: DIAG: bind: {{.*}}threadIdx.w
diagnose(lambda sch, blk, i, j, k: sch.bind(i, "threadIdx.w"))
# CHECK: DIAG: get_block: {{.*}}nosuch
diagnose(lambda sch, blk, i, j, k: sch.get_block("nosuch"))
