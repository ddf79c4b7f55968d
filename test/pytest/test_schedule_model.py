"""The loop-nest model as the schedule's interface: ``sch.get``, producers/consumers,
``show()`` agreeing with the scf loops of ``sch.mod``, argument validation of every primitive
(each a regression test), strict trace JSON, and a fuzz of random valid schedules vs numpy."""

import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import mlc_mlir as mlc
from mlc_mlir import ops
from mlc_mlir._mlir import ir
from mlc_mlir.errors import ScheduleError
from mlc_mlir.schedule.loop_nest import Block, Loop

from test_schedule import CONV, assert_replays, dense_relu_module, matmul_module, run_matmul


# ---------------------------------------------------------------------------- show() vs the IR
def _const(v) -> int:
    return ir.IntegerAttr(v.owner.attributes["value"]).value


def ir_loops(mod, func="main"):
    """(depth, text) for every scf.for/scf.forall (trip counts) and named linalg op."""
    out = []

    def walk(block, depth):
        for op in block.operations:
            name = op.operation.name
            if name == "scf.for":
                lb, ub, step = (_const(v) for v in list(op.operands)[:3])
                out.append((depth, f"for {-(-(ub - lb) // step)}"))
                walk(op.regions[0].blocks[0], depth + 1)
            elif name == "scf.forall":
                ub = list(ir.DenseI64ArrayAttr(op.attributes["staticUpperBound"]))
                lb = list(ir.DenseI64ArrayAttr(op.attributes["staticLowerBound"]))
                st_ = list(ir.DenseI64ArrayAttr(op.attributes["staticStep"]))
                trips = [-(-(u - l) // s) for u, l, s in zip(ub, lb, st_)]
                out.append((depth, "forall " + ",".join(map(str, trips))))
                walk(op.regions[0].blocks[0], depth + 1)
            elif name.startswith("linalg.") and "mlc.name" in op.attributes:
                out.append((depth, f'{name} "{ir.StringAttr(op.attributes["mlc.name"]).value}"'))

    for f in mod.func_ops():
        if f.sym_name.value == func:
            walk(f.regions[0].blocks[0], 0)
    return out


def show_loops(text):
    """The same (depth, text) pairs from ``sch.show()``."""
    out = []
    for line in text.splitlines()[1:]:
        depth = (len(line) - len(line.lstrip())) // 2 - 1
        body = line.strip().split("  #")[0]
        if body.startswith("tensor.pad"):
            continue
        m = re.match(r"for (?:\(unroll \w+\) )?\S+ in range\((\d+)\):", body)
        if m:
            body = f"for {m.group(1)}"
        m = re.match(r"forall(?: \(bind [^)]*\))? \([^)]*\) in \(([^)]*)\):", body)
        if m:
            body = "forall " + m.group(1).replace(" ", "")
        out.append((depth, body))
    return out


def _seed_walkthrough():
    mod = matmul_module(128, 128, 128)
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul", func_name="main")
    i, j, k = sch.get_loops(blk)
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.reorder(i, j0, k, j1)
    sch.decompose_reduction(blk, k)
    return mod, sch


def _seed_compute_at():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.matmul(ops.exp(f.arg("a", shape=(32, 16))), f.arg("b", shape=(16, 24))))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("matmul"))
    i0, i1 = sch.split(i, [None, 4])
    sch.compute_at(sch.get_block("exp"), i0)
    return mod, sch


def _seed_reverse_compute_at():
    mod, _ = dense_relu_module()
    sch = mlc.Schedule(mod)
    d = sch.get_block("dense")
    i, j, k = sch.get_loops(d)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    sch.reverse_compute_at(sch.get_block("dense.bias_add"), j0)
    sch.reverse_compute_at(sch.get_block("relu"), j0)
    return mod, sch


def _seed_cache_read_write():
    mod = matmul_module()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    j0, j1, j2 = sch.split(j, [None, 2, 16])
    i0, i1 = sch.split(i, [None, 8])
    sch.reorder(j0, i0, j1, k, i1, j2)
    sch.compute_at(sch.cache_read(blk, 1, "local"), j0)
    sch.cache_write(blk, 0, "local")
    return mod, sch


def _seed_conv_decompose():
    mod = mlc.Module.parse(CONV)
    sch = mlc.Schedule(mod)
    blk = sch.get_block("conv")
    n, f, h, w, c, kh, kw = sch.get_loops(blk)
    f0, f1 = sch.split(f, [None, 8])
    w0, w1 = sch.split(w, [None, 8])
    sch.reorder(n, f0, h, w0, c, kh, kw, f1, w1)
    sch.parallel(f0)
    sch.decompose_reduction(blk, c)
    return mod, sch


def _seed_fused_parallel_epilogue():
    mod, _ = dense_relu_module()
    sch = mlc.Schedule(mod)
    d = sch.get_block("dense")
    i, j, k = sch.get_loops(d)
    f = sch.fuse(i, j)
    sch.parallel(f)
    sch.reverse_compute_at(sch.get_block("dense.bias_add"), f)
    return mod, sch


def _seed_epilogue_and_init_in_one_tile():
    """Regression: the init of a reduction decomposed below an epilogue's loops stayed outside
    them (show() and the IR disagreed)."""
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.matmul(f.arg("a", shape=(32, 16)), f.arg("b", shape=(16, 24)))))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    i0, i1 = sch.split(i, [None, 4])
    sch.reorder(i0, j, i1, k)
    sch.decompose_reduction(blk, k)
    sch.reverse_compute_at(sch.get_block("relu"), i0)
    return mod, sch


@pytest.mark.parametrize("seed", [_seed_epilogue_and_init_in_one_tile, _seed_walkthrough, _seed_compute_at, _seed_reverse_compute_at,
                                  _seed_cache_read_write, _seed_conv_decompose,
                                  _seed_fused_parallel_epilogue])
def test_show_agrees_with_the_loops_of_the_ir(seed):
    mod, sch = seed()
    assert show_loops(sch.show()) == ir_loops(sch.mod)
    assert_replays(sch, mod)


def test_show_of_seed_walkthrough():
    _, sch = _seed_walkthrough()
    assert sch.show().splitlines() == [
        "func @main:",
        "  for i in range(128):",
        "    for j0 in range(32):",
        '      linalg.fill "matmul.init"',
        "      for k in range(128):",
        '        linalg.matmul "matmul"  # in the op: j1=4',
    ]


# ---------------------------------------------------------------------------- public read access
def test_get_returns_typed_model_objects():
    mod, sch = _seed_reverse_compute_at()
    d = sch.get_block("dense")
    blk = sch.get(d)
    assert isinstance(blk, Block) and blk.name == "dense" and [x.extent for x in blk.dims] == [32, 64, 48]
    loops = sch.get_loops(d)
    first = sch.get(loops[0])
    assert isinstance(first, Loop)
    assert (first.extent, first.kind, blk.dims[first.dim].name) == (4, "parallel", "i")
    assert [sch.get(lp).extent for lp in loops] == [4, 4, 48, 8, 16]
    names = [sch.get(b).name for b in sch.get_consumers(d)]
    assert names == ["dense.bias_add"]
    assert {sch.get(b).name for b in sch.get_producers(d)} == {"dense.init"}
    assert sch.get(sch.get_block("relu")).reverse_compute_at == loops[1].loop_id


def test_get_sampled_value():
    sch = mlc.Schedule(matmul_module(), seed=0)
    i, j, k = sch.get_loops(sch.get_block("matmul"))
    f = sch.sample_perfect_tile(i, n=2, max_innermost_factor=4)
    assert sch.get(f[1]) == int(f[1]) <= 4 and f[1].options == (1, 2, 4)


# ---------------------------------------------------------------------------- argument validation
def test_split_accepts_numpy_integers():
    mod = matmul_module()
    sch = mlc.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("matmul"))
    j0, j1 = sch.split(j, [None, np.int64(4)])
    assert sch.get(j1).extent == 4
    assert json.loads(sch.trace.as_json())["insts"][2]["attrs"]["factors"] == [None, 4]
    run_matmul(sch.mod)
    assert_replays(sch, mod)


@pytest.mark.parametrize("fn, match", [
    (lambda s, l: s.unroll(l[2], 2.5), r"unroll: argument 'factor' is 2.5 \(float\); expected an int"),
    (lambda s, l: s.unroll(l[2], True), r"unroll: argument 'factor' is True"),
    (lambda s, l: s.split(l[1], [None, 4.0]), r"split: argument 'factors' is 4.0"),
    (lambda s, l: s.split(l[1], [None, 0]), r"split: argument 'factors' is 0; expected an int >= 1"),
    (lambda s, l: s.split(l[1], "ab"), r"split: argument 'factors' is 'ab'"),
    (lambda s, l: s.cache_read(s.get_block("matmul"), 0, "texture"), r"storage_scope' is 'texture'"),
    (lambda s, l: s.cache_read(s.get_block("matmul"), "0"), r"read_buffer_index' is '0'"),
    (lambda s, l: s.annotate(l[0], "k", [1]), r"annotate: argument 'value' is list"),
    (lambda s, l: s.split(s.get_block("matmul"), [2, None]), r"split: argument 'loop' is BlockRV"),
    (lambda s, l: s.get_loops(l[0]), r"get_loops: argument 'block' is LoopRV"),
    (lambda s, l: s.sample_perfect_tile(l[0], 2, decision=[8, 8], max_innermost_factor=4),
     r"innermost factor 8; expected <= max_innermost_factor=4"),
    (lambda s, l: s.sample_categorical([2, 4], [1.0, 1.0], decision=2), r"decision 2 is not an index"),
])
def test_primitives_validate_arguments(fn, match):
    sch = mlc.Schedule(matmul_module())
    loops = sch.get_loops(sch.get_block("matmul"))
    with pytest.raises(ScheduleError, match=match):
        fn(sch, loops)


def test_handles_of_another_schedule_are_refused():
    a = mlc.Schedule(matmul_module())
    b = mlc.Schedule(dense_relu_module()[0])
    la = a.get_loops(a.get_block("matmul"))
    b.get_loops(b.get_block("dense"))
    with pytest.raises(ScheduleError, match=r"split: argument 'loop' LoopRV\(l1\) is a handle of another Schedule"):
        b.split(la[0], [None, 4])
    with pytest.raises(ScheduleError, match="is a handle of another Schedule"):
        b.get_loops(a.get_block("matmul"))
    assert len(b.get(b.get_block("dense")).loops) == 3   # untouched


def test_fuse_with_an_extent_1_loop_materializes():
    mod = matmul_module()
    sch = mlc.Schedule(mod)
    i, j, k = sch.get_loops(sch.get_block("matmul"))
    j0, j1 = sch.split(j, [1, None])
    sch.reorder(j0, i, j1)
    sch.fuse(j0, i)
    text = str(sch.mod)                           # used to fail: "failed to coalesce"
    assert "scf.for" in text
    assert [t for _, t in ir_loops(sch.mod)] == ['linalg.fill "matmul.init"', "for 64", 'linalg.matmul "matmul"']
    run_matmul(sch.mod)
    assert_replays(sch, mod)


def test_fuse_with_an_attached_epilogue_is_refused_or_materializes():
    """decompose_reduction + reverse_compute_at + fuse gave a KeyError in emission."""
    mod = matmul_module()
    rng = np.random.default_rng(0)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.relu(ops.matmul(f.arg("a", shape=(32, 16)), f.arg("b", shape=(16, 24)))))
    mod = bb.finish()
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    sch.decompose_reduction(blk, k)
    sch.reverse_compute_at(sch.get_block("relu"), j)
    with pytest.raises(ScheduleError, match="fuse: a block is attached at loop j"):
        sch.fuse(i, j)
    # fused and parallel first, then attached: one scf.forall over (i, j) with the epilogue inside
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    i, j, k = sch.get_loops(blk)
    f = sch.fuse(i, j)
    with pytest.raises(ScheduleError, match="serial fused loop"):
        sch.reverse_compute_at(sch.get_block("relu"), f)
    sch.parallel(f)
    sch.decompose_reduction(blk, k)
    sch.reverse_compute_at(sch.get_block("relu"), f)
    assert show_loops(sch.show()) == ir_loops(sch.mod)
    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((16, 24)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(a, b), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
    assert_replays(sch, mod)


# ---------------------------------------------------------------------------- trace JSON
def _trace_json():
    sch = mlc.Schedule(matmul_module())
    i, j, k = sch.get_loops(sch.get_block("matmul"))
    sch.split(j, [None, 4])
    return sch.trace.as_json()


def _set(path, value):
    def edit(text):
        d = json.loads(text)
        obj = d
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value
        return json.dumps(d)
    return edit


@pytest.mark.parametrize("edit, match", [
    (_set(["insts", 2, "kind"], "splat"), r"instruction 2 has kind 'splat'; expected one of"),
    (_set(["insts", 1, "inputs"], []), r"instruction 1 \(get_loops\) has 0 inputs; expected 1..1"),
    (_set(["insts", 2, "attrs"], {"factor": [None, 4]}), r"has attrs \['factor'\]"),
    (_set(["insts", 0, "outputs"], "b0"), "outputs must be a list"),
    (_set(["insts", 0, "attrs"], 3), "attrs must be an object"),
    (_set(["decisions"], {"0": [1]}), "index of a sampling instruction"),
    (_set(["insts", 2, "inputs"], [{"rvv": "l2"}]), r"expected an RV"),
    (lambda t: "[1, 2]", r"not a trace: expected an object"),
    (lambda t: "{", "invalid JSON"),
])
def test_trace_json_schema_errors(edit, match):
    text = edit(_trace_json())
    with pytest.raises(ScheduleError, match=match):
        mlc.Trace.from_json(text)


@pytest.mark.parametrize("edit, match", [
    (_set(["insts", 2, "attrs", "factors"], [None, "4"]), r"split: argument 'factors' is '4'"),
    (_set(["insts", 2, "attrs", "factors"], [None, 2.5]), r"split: argument 'factors' is 2.5"),
    (_set(["insts", 2, "inputs"], [{"rv": "l9"}]), r"instruction 2 uses l9 before it is defined"),
    (_set(["insts", 2, "inputs"], [{"rv": "b0"}]), r"split: argument 'loop' is BlockRV"),
    (_set(["insts", 0, "inputs"], ["mm"]), r"no block named 'mm'"),
    (_set(["insts", 0, "inputs"], [7]), r"get_block: argument 'name' is 7"),
])
def test_trace_replay_errors_name_the_instruction(edit, match):
    trace = mlc.Trace.from_json(edit(_trace_json()))
    with pytest.raises(ScheduleError, match=r"trace: instruction \d.*" + match):
        mlc.Schedule.from_trace(matmul_module(), trace)


def test_json_trace_has_no_script_until_replayed():
    trace = mlc.Trace.from_json(_trace_json())
    with pytest.raises(ScheduleError, match="Schedule.from_trace"):
        trace.as_transform_script()
    script = mlc.Schedule.from_trace(matmul_module(), trace).as_transform_script()
    assert isinstance(script, ir.Module) and "tile_sizes [0, 4, 0]" in str(script)


# ---------------------------------------------------------------------------- fuzz
def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _random_nest(sch, blk, data, extents, parallel_dims):
    """Split each loop in two, reorder randomly, maybe parallel/unroll/vectorize."""
    loops = sch.get_loops(blk)
    pairs = [sch.split(lp, [None, np.int64(data.draw(st.sampled_from(_divisors(e))))])
             for lp, e in zip(loops, extents)]
    order = data.draw(st.permutations([x for p in pairs for x in p]))
    sch.reorder(*order)
    if data.draw(st.booleans()) and sch.get(order[0]).dim in parallel_dims:
        sch.parallel(order[0])
    if data.draw(st.booleans()) and sch.get(order[-2]).kind == "serial":
        e = sch.get(order[-2]).extent
        sch.unroll(order[-2], data.draw(st.sampled_from(_divisors(e))))
    if data.draw(st.booleans()):
        sch.vectorize(order[-1])
    return order


@settings(max_examples=10, deadline=None)
@given(m=st.sampled_from([8, 12]), n=st.sampled_from([8, 16]), k=st.sampled_from([4, 6]), data=st.data())
def test_fuzz_matmul_schedules_match_numpy(m, n, k, data):
    mod = matmul_module(m, n, k)
    sch = mlc.Schedule(mod)
    blk = sch.get_block("matmul")
    order = _random_nest(sch, blk, data, [m, n, k], {0, 1})
    if data.draw(st.booleans()) and sch.get(order[0]).kind == "serial" and sch.get(order[0]).dim != 2:
        pos = next(p for p, lp in enumerate(order) if sch.get(lp).dim == 2)
        if all(sch.get(lp).dim != 2 for lp in order[:pos]):
            sch.decompose_reduction(blk, order[pos])
    run_matmul(sch.mod, m, n, k)
    assert show_loops(sch.show())[0][0] == 0
    assert mlc.Schedule.from_trace(mod, mlc.Trace.from_json(sch.trace.as_json())).trace == sch.trace


def _chain_module():
    red = """
    #id = affine_map<(d0, d1) -> (d0, d1)>
    #row = affine_map<(d0, d1) -> (d0)>
    func.func @main(%x: tensor<16x32xf32>) -> tensor<16xf32> {
      %e = tensor.empty() : tensor<16x32xf32>
      %t = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
           ins(%x : tensor<16x32xf32>) outs(%e : tensor<16x32xf32>) attrs = {mlc.name = "exp"} {
      ^bb0(%a: f32, %o: f32):
        %y = math.exp %a : f32
        linalg.yield %y : f32
      } -> tensor<16x32xf32>
      %e2 = tensor.empty() : tensor<16xf32>
      %z = arith.constant 0.0 : f32
      %f = linalg.fill {mlc.name = "sum.init"} ins(%z : f32) outs(%e2 : tensor<16xf32>) -> tensor<16xf32>
      %r = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
           ins(%t : tensor<16x32xf32>) outs(%f : tensor<16xf32>) attrs = {mlc.name = "sum"} {
      ^bb0(%a: f32, %acc: f32):
        %s = arith.addf %a, %acc : f32
        linalg.yield %s : f32
      } -> tensor<16xf32>
      return %r : tensor<16xf32>
    }"""
    return mlc.Module.parse(red)


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_fuzz_elementwise_reduction_chain_matches_numpy(data):
    mod = _chain_module()
    sch = mlc.Schedule(mod)
    s = sch.get_block("sum")
    i, k = sch.get_loops(s)
    i0, i1 = sch.split(i, [None, data.draw(st.sampled_from([1, 2, 4, 8, 16]))])
    k0, k1 = sch.split(k, [None, data.draw(st.sampled_from([1, 4, 8, 32]))])
    order = data.draw(st.sampled_from([[i0, i1, k0, k1], [i0, k0, i1, k1], [k0, i0, i1, k1]]))
    sch.reorder(*order)
    if data.draw(st.booleans()):
        # the producer computed at an outer loop of the consumer (legal when the loop is above
        # every reduction loop)
        at = data.draw(st.sampled_from([lp for lp in order[:order.index(k0)]] or [None]))
        if at is not None:
            sch.compute_at(sch.get_block("exp"), at)
    elif data.draw(st.booleans()):
        e = sch.get_block("exp")
        a, b = sch.get_loops(e)
        b0, b1 = sch.split(b, [None, 8])
        if data.draw(st.booleans()):
            sch.parallel(a)
        sch.vectorize(b1)
    if data.draw(st.booleans()) and order[0] is i0:
        sch.parallel(i0)
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod)(x), np.exp(x).sum(axis=1), rtol=1e-4, atol=1e-4)
    assert_replays(sch, mod)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rfactor_of_a_sampled_split_materializes_and_replays(seed):
    # regression: tile_reduction_using_for got the knob's param as a size (raw TypeError)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.sum(f.arg("x", (8, 64)), axis=1))
    mod = bb.finish()
    sch = mlc.Schedule(mod, seed=seed)
    b = sch.get_block("sum")
    _, k = sch.get_loops(b)
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, n=2, max_innermost_factor=16))
    sch.rfactor(k1, 0)
    x = np.random.default_rng(seed).random((8, 64)).astype(np.float32)
    np.testing.assert_allclose(mlc.compile(sch.mod, schedule="none")(x), x.sum(1), rtol=1e-5)
    assert_replays(sch, mod)
