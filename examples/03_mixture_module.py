"""The MLC course's "mixture module" on MLIR: an MLP whose first linear layer is compiled while
relu and the second linear layer call registered Python kernels (numpy inside), like TVM's
``register_func("env.linear")`` + ``call_tir``; then the same with OpenBLAS sgemm called
straight from the JIT code. Parameters are function arguments bound with ``bind_params``.

Run: python examples/03_mixture_module.py
"""

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import graph, ops


@mlc.register_func("env.linear", override=True)
def numpy_linear(x, w, b, out):
    np.matmul(x, w.T, out=out)     # w is (N, K), as a dense layer's parameter
    np.add(out, b, out=out)


@mlc.register_func("env.relu", override=True)
def numpy_relu(x, out):
    np.maximum(x, 0, out=out)


def build(params):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 784))
        w0, b0, w1, b1 = (f.param(n, params[n]) for n in ("w0", "b0", "w1", "b1"))
        lv0 = ops.dense(x, w0, b0, name="linear0")
        lv1 = ops.relu(lv0)
        f.output(ops.dense(lv1, w1, b1, name="linear1"))
    return bb.finish()


def main():
    rng = np.random.default_rng(0)
    params = {"w0": rng.standard_normal((128, 784)).astype(np.float32) * 0.05,
              "b0": rng.standard_normal(128).astype(np.float32),
              "w1": rng.standard_normal((10, 128)).astype(np.float32) * 0.1,
              "b1": rng.standard_normal(10).astype(np.float32)}
    data = rng.random((1, 784), dtype=np.float32)
    ref = np.maximum(data @ params["w0"].T + params["b0"], 0) @ params["w1"].T + params["b1"]

    mod = build(params)
    mixture = graph.DispatchLibrary({"relu": "env.relu", "linear1": "env.linear"})(mod)
    print(mixture.to_text(elide_weights=True))
    with_params = mixture.bind_params()           # Relax's BindParams
    exe = mlc.compile(with_params)
    out = exe(data)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    print("mixture prediction:", int(out.argmax()), "reference:", int(ref.argmax()))
    print("mixture time-cost: %.4f ms" % exe.benchmark(data, number=200).median_ms)

    blas = graph.DispatchLibrary({"linear0": "openblas.sgemm"})
    try:
        blas(with_params)
    except mlc.BuildError as e:                   # dense reads W transposed
        print("openblas on linear0 refused:", str(e).splitlines()[0])
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        x = f.arg("x", shape=(1, 784))
        f.output(ops.relu(ops.matmul(x, params["w0"].T.copy()) + params["b0"]))
    blas_mod = graph.DispatchLibrary({"matmul": "openblas.sgemm"})(bb.finish())
    got = mlc.compile(blas_mod)(data)
    np.testing.assert_allclose(got, np.maximum(data @ params["w0"].T + params["b0"], 0), rtol=1e-4, atol=1e-4)
    print("sgemm from the JIT code: ok")


if __name__ == "__main__":
    main()
