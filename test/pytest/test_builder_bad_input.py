"""Bad input is refused with an MlcError before MLIR sees it (or made to work, vs numpy).

Cases that used to abort the process run in a child interpreter, so a regression to a crash
fails the test instead of taking pytest down.
"""

import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops


def _in_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("shape, msg", [
    ((2 ** 32, 2 ** 32), r"arg: argument 'shape' \(4294967296, 4294967296\) has 18446744073709551616 "
                         r"elements; expected at most 2\*\*63 - 1"),
    ((2 ** 63,), r"arg: argument 'shape' \(9223372036854775808,\) has 9223372036854775808 elements"),
    ((2.7, 3), r"arg: argument 'shape' is \(2.7, 3\); expected a sequence of ints"),
    ((True, 3), r"arg: argument 'shape' is \(True, 3\); expected a sequence of ints"),
    ((2, -1), r"arg: argument 'shape' has negative dimensions: \(2, -1\)"),
])
def test_arg_shapes_are_checked(shape, msg):
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match=msg):
        with bb.function("main") as f:
            f.arg("x", shape)


def test_numpy_integer_dims_are_fine():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (np.int64(2), np.int32(3)))
        f.output(ops.relu(x))
    assert bb.finish().signature("main").args[0].shape == (2, 3)


def test_overflowing_shape_in_a_child_process_exits_cleanly():
    r = _in_child("""
        import mlc_mlir as mlc
        from mlc_mlir import ops
        bb = mlc.GraphBuilder()
        try:
            with bb.function("main") as f:
                f.output(ops.relu(f.arg("x", (2**32, 2**32))))
        except mlc.BuildError as e:
            print("BuildError:", e)
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "BuildError: arg: argument 'shape' (4294967296, 4294967296) has" in r.stdout


def test_an_op_producing_an_overflowing_shape_is_refused():
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match=r"add: argument 'result shape' \(4294967296, 4294967296\) has"):
        with bb.function("main") as f:
            a = f.arg("a", (2 ** 32, 1), "int8")
            b = f.arg("b", (1, 2 ** 32), "int8")
            ops.add(a, b)


@pytest.mark.parametrize("build, msg", [
    (lambda f: f.arg(None, (2,)), "arg: argument 'name' must be a non-empty str, got None"),
    (lambda f: f.param(None, np.ones(2)), "param: argument 'name' must be a non-empty str, got None"),
])
def test_none_names_are_build_errors(build, msg):
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match=msg):
        with bb.function("main") as f:
            build(f)


def test_integer_divide_never_traps_and_follows_numpy():
    # x / 0 -> 0 and INT_MIN / -1 -> INT_MIN (numpy wraps); run in a child: SIGFPE kills it
    r = _in_child("""
        import numpy as np, mlc_mlir as mlc
        from mlc_mlir import ops
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            a, b = f.arg("a", (6,), "int32"), f.arg("b", (6,), "int32")
            f.output(ops.divide(a, b), ops.divide(a, 0))
        q, z = mlc.compile(bb.finish())(np.array([7, -7, 5, -2**31, -2**31, 0], np.int32),
                                         np.array([2, 2, 0, -1, 1, 0], np.int32))
        print(q.tolist(), z.tolist())
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    with np.errstate(divide="ignore", over="ignore"):
        a = np.array([7, -7, 5, -2 ** 31, -2 ** 31, 0], np.int32)
        b = np.array([2, 2, 0, -1, 1, 0], np.int32)
        # numpy's int division floors; ops.divide truncates toward zero (C, arith.divsi)
        q = np.where(b == 0, 0, np.trunc(a.astype(np.float64) / np.where(b == 0, 1, b))).astype(np.int64)
        q = q.astype(np.int32)  # INT_MIN / -1 = 2**31 wraps to INT_MIN as in numpy
        assert (a // np.array([-1], np.int32))[3] == -2 ** 31
    assert r.stdout.split("] [")[0] + "]" == str(q.tolist())
    assert r.stdout.strip().endswith(str([0] * 6))


def test_zero_d_constant_keeps_its_shape():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", ())
        c = ops.constant(np.array(3.0, np.float32))
        assert c.shape == ()
        f.output(x * c + np.array(1.0, np.float32))
    out = mlc.compile(bb.finish())(np.array(2.0, np.float32))
    assert out.shape == () and float(out) == 7.0


def test_zero_size_reductions_follow_numpy():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (3, 0))
        f.output(ops.mean(x, axis=1), ops.sum(x, axis=1))
    m, s = mlc.compile(bb.finish())(np.zeros((3, 0), np.float32))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        ref = np.zeros((3, 0), np.float32).mean(axis=1)
    np.testing.assert_array_equal(m, ref)  # NaN, NaN, NaN
    np.testing.assert_array_equal(s, np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        np.zeros((3, 0)).max(axis=1)
    for op in (ops.max, ops.min, ops.argmax):
        bb = mlc.GraphBuilder()
        with pytest.raises(mlc.BuildError, match=rf"{op.__name__}: axis 1 of x \(3, 0\) has size 0; expected a "
                                                 "non-empty reduction"):
            with bb.function("main") as f:
                op(f.arg("x", (3, 0)), axis=1)


@pytest.mark.parametrize("dtype, value", [("int8", 1000), ("int8", -129), ("int32", 2 ** 31), ("int64", 2 ** 63)])
def test_python_int_scalars_must_fit_the_tensor_dtype(dtype, value):
    with pytest.raises(OverflowError):  # numpy 2 (NEP 50)
        np.zeros(2, dtype) + value
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match=rf"add: argument 'b' is {value}; expected a value representable "
                                             rf"in {dtype}"):
        with bb.function("main") as f:
            ops.add(f.arg("x", (2,), dtype), value)


def test_int8_scalar_in_range_still_works():
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        f.output(ops.add(f.arg("x", (2,), "int8"), 127))
    np.testing.assert_array_equal(mlc.compile(bb.finish())(np.array([0, 1], np.int8)),
                                  np.array([0, 1], np.int8) + np.int8(127))


@pytest.mark.parametrize("text, msg", [
    ("func.func @f(%a: i32) -> i32 { return %a : i32 }",
     "function 'f': 'arg0' has type i32; expected a ranked tensor or memref"),
    ("func.func @g(%a: tensor<4xf32>) -> (tensor<4xf32>, index) {\n"
     "  %c = arith.constant 0 : index\n  return %a, %c : tensor<4xf32>, index }",
     "function 'g': 'result1' has type index; expected a ranked tensor or memref"),
])
def test_non_tensor_function_types_are_ir_errors(text, msg):
    mod = mlc.Module.parse(text)
    with pytest.raises(mlc.IRError, match=msg):
        mod.signature(mod.function_names()[0])


def test_builders_and_parsed_modules_free_their_contexts():
    refs = []
    for _ in range(20):
        bb = mlc.GraphBuilder()
        with bb.function("main") as f:
            f.output(ops.relu(f.arg("x", (4,))))
        mod = bb.finish()
        parsed = mlc.Module.parse(str(mod))
        refs += [weakref.ref(bb.context), weakref.ref(parsed.context)]
        del bb, f, mod, parsed
    gc.collect()
    assert sum(r() is not None for r in refs) == 0
