"""The seed's end-to-end model, MLC style: a tensor expression, a Relax-style ``call_tir`` to a
function of the module and to a registered Python kernel, then the seed's "replace linear0 by its
tuned version" with ``mod.extract`` / ``mod.update_func``. Checked against numpy.

    python examples/05_call_tir_and_te.py
"""

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops, te

rng = np.random.default_rng(0)
w0 = rng.standard_normal((128, 784)).astype(np.float32) * 0.05
b0 = rng.standard_normal(128).astype(np.float32)
w1 = rng.standard_normal((10, 128)).astype(np.float32) * 0.05


@mlc.register_func("env.relu")                        # a Python kernel, destination-passing style
def relu(x, out):
    np.maximum(x, 0, out=out)


bb = mlc.GraphBuilder()
with bb.function("linear0") as f:                     # a te.compute matmul + bias: one linalg.generic
    x = f.arg("x", (1, 784))
    w = ops.constant(w0.T.copy(), name="w0")          # numpy arrays become named constants
    k = te.reduce_axis((0, 784), name="k")
    y = te.compute((1, 128), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="linear0")
    f.output(y + b0)                                  # numpy operands work in every op
with bb.function("main") as f:
    x = f.arg("x", (1, 784))
    lv0 = f.call("linear0", x)                                            # func.call (call_tir)
    lv1 = f.call("env.relu", lv0, out_shapes=(1, 128), out_dtypes="float32")  # mlc.call_library
    f.output(ops.dense(lv1, w1))
mod = bb.finish()

xv = rng.standard_normal((1, 784)).astype(np.float32)
ref = np.maximum(xv @ w0.T + b0, 0) @ w1.T
out = mlc.compile(mod)["main"](xv)
np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
print("call_tir + registered kernel + te.compute: numerics match numpy")

# the seed's last step: schedule linear0 on its own, then put the tuned version back
linear0 = mod.extract("linear0")
sch = mlc.Schedule(linear0)
i, j, kk = sch.get_loops(sch.get_block("linear0", func_name="linear0"))
j0, j1 = sch.split(j, [None, 8])
sch.reorder(i, j0, kk, j1)
sch.vectorize(j1)
mod = mod.update_func("linear0", sch.mod)
np.testing.assert_allclose(mlc.compile(mod)["main"](xv), ref, rtol=1e-4, atol=1e-4)
print("linear0 replaced by its scheduled version: numerics match numpy")
