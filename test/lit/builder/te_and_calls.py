# te.compute emits one linalg.generic; f.call emits func.call / mlc.call_library; mlir-opt
# (with the mlc IRDL dialect) accepts the result as is.
# RUN: %PYTHON %s | FileCheck %s
# RUN: %PYTHON %s | mlir-opt --irdl-file=%irdl | FileCheck %s --check-prefix=ROUNDTRIP

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops, te

mlc.register_func("env.lit_relu", lambda x, out: np.maximum(x, 0, out=out), override=True)
bb = mlc.GraphBuilder()
with bb.function("window") as f:
    x = f.arg("x", (6, 6))
    di, dj = te.reduce_axis(3, "di"), te.reduce_axis(3, "dj")
    f.output(te.compute((4, 4), lambda i, j: te.sum(x[i + di, j + dj], axis=[di, dj]),
                        name="win"))
with bb.function("main") as f:
    x = f.arg("x", (6, 6))
    y = f.call("window", x)
    f.output(f.call("env.lit_relu", y, out_shapes=(4, 4)))
print(bb.finish())

# CHECK-DAG: #[[WIN:.*]] = affine_map<(d0, d1, d2, d3) -> (d0 + d2, d1 + d3)>
# CHECK-DAG: #[[SHAPE:.*]] = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
# CHECK-LABEL: func.func @window(
# CHECK: linalg.fill {mlc.name = "win.init"}
# CHECK: linalg.generic {indexing_maps = [#[[WIN]], #[[SHAPE]], #{{.*}}], iterator_types = ["parallel", "parallel", "reduction", "reduction"]}
# CHECK-SAME: {mlc.name = "win"}
# CHECK: arith.addf
# CHECK-LABEL: func.func @main(
# CHECK: call @window(%{{.*}}) {mlc.name = "window"} : (tensor<6x6xf32>) -> tensor<4x4xf32>
# CHECK: "mlc.call_library"(%{{.*}}, %{{.*}}) {callee = "env.lit_relu", mlc.name = "call"
# ROUNDTRIP-LABEL: func.func @main(
# ROUNDTRIP: "mlc.call_library"
