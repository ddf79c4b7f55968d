# Invalid builder input: each op names itself, the argument and expected vs actual, and nothing
# reaches MLIR (no verifier crash).
# RUN: %PYTHON %s | FileCheck %s

import numpy as np

import mlc_mlir as mlc
from mlc_mlir import ops


def diagnose(build):
    bb = mlc.GraphBuilder()
    with bb.function("main") as f:
        try:
            build(f)
        except mlc.MlcError as e:
            print(f"DIAG: {e}")
        f.output(f.arg("unused", shape=(1,)))


# CHECK: DIAG: matmul: argument 'b' has shape (5, 3); expected (4, N) to match a's inner dimension 4
diagnose(lambda f: ops.matmul(f.arg("a", shape=(2, 4)), f.arg("b", shape=(5, 3))))
# CHECK: DIAG: add: shapes (2, 3) and (4,) are not broadcastable (dimension -1: 3 vs 4)
diagnose(lambda f: ops.add(f.arg("a", shape=(2, 3)), f.arg("b", shape=(4,))))
# CHECK: DIAG: add: argument 'b' has dtype int32; expected float32 (use ops.cast)
diagnose(lambda f: ops.add(f.arg("a", shape=(2, 3)), f.arg("b", shape=(2, 3), dtype="int32")))
# CHECK: DIAG: conv2d: argument 'weight' has shape (8, 4, 3, 3); expected (F, 3, KH, KW) for 3 input channels and groups=1
diagnose(lambda f: ops.conv2d(f.arg("x", shape=(1, 3, 8, 8)), np.zeros((8, 4, 3, 3), np.float32)))
# CHECK: DIAG: conv2d: argument 'strides' is (1, 2, 3); expected an int or 2 ints >= 1
diagnose(lambda f: ops.conv2d(f.arg("x", shape=(1, 3, 8, 8)), np.zeros((8, 3, 3, 3), np.float32),
                              strides=(1, 2, 3)))
# CHECK: DIAG: reshape: cannot reshape (2, 3) into (4, 2)
diagnose(lambda f: ops.reshape(f.arg("x", shape=(2, 3)), (4, 2)))
# CHECK: DIAG: transpose: argument 'perm' is (0, 0); expected a permutation of range(2) for x (2, 3)
diagnose(lambda f: ops.transpose(f.arg("x", shape=(2, 3)), (0, 0)))
# CHECK: DIAG: sum: argument 'axis' is 2; expected an int in [-2, 2)
diagnose(lambda f: ops.sum(f.arg("x", shape=(2, 3)), axis=2))
# CHECK: DIAG: concat: argument 'tensors[1]' has shape (2, 4); expected (2, 3) except along axis 0
diagnose(lambda f: ops.concat([f.arg("a", shape=(2, 3)), f.arg("b", shape=(2, 4))], axis=0))
