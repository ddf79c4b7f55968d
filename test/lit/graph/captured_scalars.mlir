// FuseOps and FoldConstant on canonicalized/CSE'd input: one `0.0` is shared by an init and a
// relu body that captures it from above (not an operand). Each primitive gets its own copy, and
// a constant reduction (with its init) folds.
// RUN: %mlc-opt %s --mlc-fuse-ops | FileCheck %s --check-prefix=FUSE
// RUN: %mlc-opt %s --mlc-fold-constants | FileCheck %s --check-prefix=FOLD

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d1)>
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = arith.constant dense<2.0> : tensor<3x8xf32>
  %zero = arith.constant 0.0 : f32
  %e8 = tensor.empty() : tensor<8xf32>
  %init = linalg.fill {mlc.name = "sum.init"} ins(%zero : f32) outs(%e8 : tensor<8xf32>) -> tensor<8xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["reduction", "parallel"]}
      ins(%c : tensor<3x8xf32>) outs(%init : tensor<8xf32>) attrs = {mlc.name = "sum"} {
  ^bb0(%in: f32, %out: f32):
    %a = arith.addf %in, %out : f32
    linalg.yield %a : f32
  } -> tensor<8xf32>
  %e = tensor.empty() : tensor<4x8xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%in: f32, %out: f32):
    %m = arith.maximumf %in, %zero : f32
    linalg.yield %m : f32
  } -> tensor<4x8xf32>
  %y = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r, %s : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) attrs = {mlc.name = "add"} {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %t = arith.addf %a, %b : f32
    linalg.yield %t : f32
  } -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// FUSE-LABEL: func.func private @fused_
// FUSE-SAME: attributes {mlc.primitive}
// FUSE: %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// FUSE: arith.maximumf %{{.*}}, %[[Z]] : f32
// FUSE-LABEL: func.func @main(
// FUSE-NOT: arith.maximumf
// FUSE: call @fused_

// FOLD-LABEL: func.func @main(
// FOLD-NOT: linalg.fill
// FOLD: arith.constant {mlc.name = "sum.folded"} dense_resource<main_sum_folded> : tensor<8xf32>
// FOLD: arith.maximumf
// FOLD: return
// (the blob: alignment 64, then eight 6.0f = 0x40C00000 little-endian)
// FOLD: main_sum_folded: "0x400000000000C0400000C0400000C0400000C0400000C0400000C0400000C0400000C040"
