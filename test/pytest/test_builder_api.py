"""Builder API: layering of builder/, ops.constant, numpy operands, f.call, duplicate outputs,
Module.extract / update_func. Numerics vs numpy."""

import ast
import pathlib

import numpy as np
import pytest

import mlc_mlir as mlc
from mlc_mlir import ops

PKG = pathlib.Path(mlc.__file__).parent


def _module_imports(path):
    """(function-level imports of mlc_mlir modules, module-level relative import targets)."""
    tree = ast.parse(path.read_text())
    top = set(id(n) for n in tree.body)
    inner, deps = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("mlc_mlir")):
            if id(node) not in top:
                inner.append(f"{path.name}:{node.lineno}")
            elif node.level == 1 and node.module:
                deps.add(node.module.split(".")[0])
            elif node.level == 1:
                deps.update(a.name for a in node.names)
    return inner, deps


@pytest.mark.parametrize("pkg", ["builder", "ir", "te"])
def test_builder_ir_te_have_no_function_level_imports_and_no_cycles(pkg):
    files = sorted((PKG / pkg).glob("*.py"))
    graph = {}
    for f in files:
        inner, deps = _module_imports(f)
        assert inner == [], f"function-level imports: {inner}"
        graph[f.stem] = {d for d in deps if (PKG / pkg / f"{d}.py").exists() and d != f.stem}
    # a DAG: repeatedly remove modules with no remaining deps
    while graph:
        leaves = [m for m, d in graph.items() if not d - {"__init__"}]
        assert leaves, f"import cycle among {sorted(graph)}"
        for m in leaves:
            del graph[m]
        for d in graph.values():
            d.difference_update(leaves)


def test_tensor_operators_are_installed_by_the_op_modules(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        a = f.arg("a", (2, 3))
        f.output((-(a * 2.0) + 1.0 - a / 4.0) @ w, 3.0 - a)
    y, z = mlc.compile(bb.finish())(x)
    np.testing.assert_allclose(y, (-(x * 2) + 1 - x / 4) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(z, 3 - x, rtol=1e-6)


def test_constant_and_numpy_operands_everywhere(rng):
    c = rng.standard_normal((3, 2)).astype(np.float32)
    s = np.array(2.5, np.float32)  # 0-d stays 0-d
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (2, 3))
        k = ops.constant(c, name="k")
        z = ops.constant(s)
        assert k.shape == (3, 2) and z.shape == ()
        t = ops.transpose(c)                      # numpy array where a Tensor is expected
        m = ops.multiply(c, c)                    # both operands numpy
        r = ops.sum(np.ones((2, 2), np.float32), axis=0)
        f.output(ops.add(x, t) * z, m + k, r)
    mod = bb.finish()
    assert any(op.attributes["mlc.name"].value == "k" for op in mod.get_function("main").regions[0].blocks[0].operations
               if "mlc.name" in op.attributes)
    xv = rng.standard_normal((2, 3)).astype(np.float32)
    a, b, r = mlc.compile(mod)(xv)
    np.testing.assert_allclose(a, (xv + c.T) * 2.5, rtol=1e-6)
    np.testing.assert_allclose(b, c * c + c, rtol=1e-6)
    np.testing.assert_allclose(r, [2.0, 2.0])


def test_constant_errors():
    with pytest.raises(mlc.BuildError, match="constant: no argument is a Tensor and no function is open"):
        ops.constant(np.ones(3))
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match="constant: argument 'array' is list; expected numpy.ndarray"):
        with bb.function("main"):
            ops.constant([1.0, 2.0])
    bb = mlc.GraphBuilder()
    with pytest.raises(mlc.BuildError, match="op name 'k' is already used"):
        with bb.function("main"):
            ops.constant(np.ones(2), name="k")
            ops.constant(np.ones(2), name="k")


def test_output_of_one_tensor_twice_is_copied(rng):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", (4, 5))
        a = ops.relu(x)
        f.output(a, a, x)
    mod = bb.finish()
    xv = rng.standard_normal((4, 5)).astype(np.float32)
    y0, y1, y2 = mlc.compile(mod)(xv)
    np.testing.assert_array_equal(y0, np.maximum(xv, 0))
    np.testing.assert_array_equal(y1, np.maximum(xv, 0))
    np.testing.assert_array_equal(y2, xv)
    y0[0, 0] = 123.0
    assert y1[0, 0] != 123.0  # distinct buffers


def _linear_module(w0, b0, w1, kernel):
    bb = mlc.GraphBuilder()
    with bb.function("linear0") as f:
        x, w, b = f.arg("x", (1, 784)), f.arg("w", (128, 784)), f.arg("b", (128,))
        f.output(ops.dense(x, w, b))
    with bb.function("main") as f:
        x = f.arg("x", (1, 784))
        lv0 = f.call("linear0", x, w0, b0)                                        # func.call
        lv1 = f.call(kernel, lv0, out_shapes=(1, 128), out_dtypes="float32")      # mlc.call_library
        f.output(ops.dense(lv1, w1))
    return bb.finish()


def test_call_function_and_registered_kernel_then_extract_tune_update(rng):
    # the seed: main calls linear0 (call_tir) and env.relu (call_dps_packed); linear0 is
    # extracted, scheduled and put back with update_func
    @mlc.register_func("env.test_relu", override=True)
    def _relu(x, out):
        np.maximum(x, 0, out=out)

    w0 = rng.standard_normal((128, 784)).astype(np.float32)
    b0 = rng.standard_normal(128).astype(np.float32)
    w1 = rng.standard_normal((10, 128)).astype(np.float32)
    mod = _linear_module(w0, b0, w1, "env.test_relu")
    ops_names = [op.operation.name for op in mod.get_function("main").regions[0].blocks[0].operations]
    assert "func.call" in ops_names and "mlc.call_library" in ops_names
    x = rng.standard_normal((1, 784)).astype(np.float32)
    ref = np.maximum(x @ w0.T + b0, 0) @ w1.T
    np.testing.assert_allclose(mlc.compile(mod)(x), ref, rtol=1e-4, atol=1e-4)

    lin = mod.extract("linear0")
    assert lin.function_names() == ["linear0"]
    sch = mlc.Schedule(lin)
    i, j, k = sch.get_loops(sch.get_block("dense"))
    sch.split(j, [None, 16])
    mod2 = mod.update_func("linear0", sch.mod)
    assert mod2.function_names() == ["linear0", "main"]
    assert str(mod2.get_function("linear0")) != str(mod.get_function("linear0"))
    np.testing.assert_allclose(mlc.compile(mod2)(x), ref, rtol=1e-4, atol=1e-4)
    # a module of another context (parsed text) also works
    other = mlc.Module.parse(str(lin))
    mod3 = mod.update_func("linear0", other)
    np.testing.assert_allclose(mlc.compile(mod3)(x), ref, rtol=1e-4, atol=1e-4)


def test_call_errors():
    cases = [
        (lambda f, x: f.call("nope", x), r"call: 'nope' is neither a function of this module \['f', 'main'\]"),
        (lambda f, x: f.call("f", x, x), "call: 'f' takes 1 arguments; got 2"),
        (lambda f, x: f.call("f", ops.transpose(x)),
         r"call: argument 0 of 'f' is float32\(3, 2\); expected float32\(2, 3\)"),
        (lambda f, x: f.call("f", x, out_shapes=(3, 2)), r"out_shapes/out_dtypes give \['float32\(3, 2\)'\]"),
        (lambda f, x: f.call("main", x), "function 'main' cannot call itself"),
        (lambda f, x: f.call("openblas.sgemm", x, x), "kernel 'openblas.sgemm' needs out_shapes="),
        (lambda f, x: f.call("openblas.sgemm", x, out_shapes=[(2, 3), (2, 3)]),
         "gets 2 outputs; mlc.call_library has one"),
    ]
    for build, msg in cases:
        b2 = mlc.GraphBuilder()
        with b2.function("f") as f:
            f.output(ops.relu(f.arg("x", (2, 3))))
        with pytest.raises(mlc.BuildError, match=msg):
            with b2.function("main") as f:
                build(f, f.arg("x", (2, 3)))


def test_update_func_and_extract_errors():
    bb = mlc.GraphBuilder()
    with bb.function("f") as f:
        f.output(ops.relu(f.arg("x", (2, 3))))
    with bb.function("g") as f:
        f.output(ops.relu(f.arg("x", (3, 3))))
    mod = bb.finish()
    with pytest.raises(mlc.IRError, match=r"no function named 'h'; functions: \['f', 'g'\]"):
        mod.extract("h")
    with pytest.raises(mlc.IRError, match=r"update_func: 'f' has type \(tensor<2x3xf32>\) -> tensor<2x3xf32>; "
                                          r"the new function has \(tensor<3x3xf32>\)"):
        mod.update_func("f", mod.extract("g"))
    with pytest.raises(mlc.IRError, match="argument 'new' is int"):
        mod.update_func("f", 3)
