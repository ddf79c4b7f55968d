# The IR the graph builder emits, and that upstream mlir-opt accepts it as is.
# RUN: %PYTHON %s | FileCheck %s
# RUN: %PYTHON %s | mlir-opt | FileCheck %s --check-prefix=ROUNDTRIP

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops

rng = np.random.default_rng(0)
bb = mlc.GraphBuilder()
with bb.function("main") as f:
    x = f.arg("x", shape=(1, 64), dtype="float32")
    w0 = f.param("w0", rng.standard_normal((128, 64)).astype(np.float32))
    h = ops.relu(ops.dense(x, w0, rng.standard_normal(128).astype(np.float32)))
    h = ops.dense(h, rng.standard_normal((10, 128)).astype(np.float32), name="logits")
    f.output(ops.softmax(h))
with bb.function("cnn") as f:
    img = f.arg("img", shape=(1, 3, 8, 8))
    y = ops.conv2d(img, np.ones((4, 3, 3, 3), np.float32), strides=2, padding=1)
    y = ops.max_pool2d(ops.relu(y), 2)
    f.output(ops.reshape(y, (1, -1)), ops.argmax(y, axis=1))
mod = bb.finish()
print(mod)

# CHECK-LABEL: func.func @main(
# CHECK-SAME: %[[X:.*]]: tensor<1x64xf32> {mlc.arg_name = "x"}
# CHECK-SAME: %[[W0:.*]]: tensor<128x64xf32> {mlc.arg_name = "w0", mlc.param}
# CHECK: linalg.fill {mlc.name = "dense.init"}
# a parameter weight is read through transposed-B maps
# CHECK: linalg.matmul indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}] {mlc.name = "dense"} ins(%[[X]], %[[W0]]
# CHECK: linalg.generic {{.*}} attrs = {mlc.name = "dense.bias_add"}
# CHECK: attrs = {mlc.name = "relu"}
# CHECK: arith.maximumf
# a constant weight is stored transposed, as a dense_resource blob
# CHECK: arith.constant {mlc.name = "logits.weight_t"} dense_resource<main_logits.weight_t> : tensor<128x10xf32>
# CHECK: linalg.matmul {mlc.name = "logits"}
# CHECK: attrs = {mlc.name = "softmax.max"}
# CHECK: math.exp
# CHECK: attrs = {mlc.name = "softmax"}
# CHECK-LABEL: func.func @cnn(
# CHECK: tensor.pad %{{.*}} low[0, 0, 1, 1] high[0, 0, 1, 1]
# CHECK: linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, mlc.name = "conv2d", strides = dense<2> : tensor<2xi64>}
# CHECK: linalg.pooling_nchw_max {{.*}}mlc.name = "max_pool2d"
# CHECK: tensor.collapse_shape {{.*}} {mlc.name = "reshape"}
# CHECK: linalg.index 1
# CHECK: return %{{.*}}, %{{.*}} : tensor<1x16xf32>, tensor<1x2x2xi64>
# CHECK: dialect_resources
# ROUNDTRIP: func.func @main
# ROUNDTRIP: func.func @cnn
