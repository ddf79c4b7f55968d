// PropagateTransposes: a channel concatenation of two NHWC results (each transposed to NCHW,
// inserted into an NCHW tensor.empty, the concat transposed back to NHWC for the next conv)
// runs in NHWC: each result is inserted into its channel slice and no transpose is left.
// RUN: %mlc-opt %s --mlc-propagate-transposes | FileCheck %s

// CHECK-LABEL: func.func @concat
// CHECK-NOT: linalg.transpose
// CHECK: %[[E:.*]] = tensor.empty() : tensor<1x8x8x48xf32>
// CHECK: %[[P0:.*]] = tensor.insert_slice %arg0 into %[[E]][0, 0, 0, 0] [1, 8, 8, 16] [1, 1, 1, 1] {mlc.name = "cat.part0"}
// CHECK: %[[P1:.*]] = tensor.insert_slice %arg1 into %[[P0]][0, 0, 0, 16] [1, 8, 8, 32] [1, 1, 1, 1] {mlc.name = "cat"}
// CHECK-NOT: linalg.transpose
// CHECK: return %[[P1]]
func.func @concat(%a: tensor<1x8x8x16xf32>, %b: tensor<1x8x8x32xf32>) -> tensor<1x8x8x48xf32> {
  %ea = tensor.empty() : tensor<1x16x8x8xf32>
  %ta = linalg.transpose {mlc.name = "a.to_nchw"} ins(%a : tensor<1x8x8x16xf32>) outs(%ea : tensor<1x16x8x8xf32>) permutation = [0, 3, 1, 2]
  %eb = tensor.empty() : tensor<1x32x8x8xf32>
  %tb = linalg.transpose {mlc.name = "b.to_nchw"} ins(%b : tensor<1x8x8x32xf32>) outs(%eb : tensor<1x32x8x8xf32>) permutation = [0, 3, 1, 2]
  %e = tensor.empty() : tensor<1x48x8x8xf32>
  %c0 = tensor.insert_slice %ta into %e[0, 0, 0, 0] [1, 16, 8, 8] [1, 1, 1, 1] {mlc.name = "cat.part0"} : tensor<1x16x8x8xf32> into tensor<1x48x8x8xf32>
  %c1 = tensor.insert_slice %tb into %c0[0, 16, 0, 0] [1, 32, 8, 8] [1, 1, 1, 1] {mlc.name = "cat"} : tensor<1x32x8x8xf32> into tensor<1x48x8x8xf32>
  %e2 = tensor.empty() : tensor<1x8x8x48xf32>
  %back = linalg.transpose {mlc.name = "next.x_nhwc"} ins(%c1 : tensor<1x48x8x8xf32>) outs(%e2 : tensor<1x8x8x48xf32>) permutation = [0, 2, 3, 1]
  return %back : tensor<1x8x8x48xf32>
}

// An input that is not a transpose stops the rewrite there: the first insert runs in NHWC, the
// second stays in NCHW on the transposed partial result.
// CHECK-LABEL: func.func @mixed
// CHECK: tensor.insert_slice %arg0 into %{{.*}}[0, 0, 0, 0] [1, 8, 8, 16]
// CHECK: linalg.transpose
// CHECK: tensor.insert_slice %arg1 into %{{.*}}[0, 16, 0, 0] [1, 32, 8, 8]
func.func @mixed(%a: tensor<1x8x8x16xf32>, %b: tensor<1x32x8x8xf32>) -> tensor<1x48x8x8xf32> {
  %ea = tensor.empty() : tensor<1x16x8x8xf32>
  %ta = linalg.transpose {mlc.name = "a.to_nchw"} ins(%a : tensor<1x8x8x16xf32>) outs(%ea : tensor<1x16x8x8xf32>) permutation = [0, 3, 1, 2]
  %e = tensor.empty() : tensor<1x48x8x8xf32>
  %c0 = tensor.insert_slice %ta into %e[0, 0, 0, 0] [1, 16, 8, 8] [1, 1, 1, 1] {mlc.name = "cat.part0"} : tensor<1x16x8x8xf32> into tensor<1x48x8x8xf32>
  %c1 = tensor.insert_slice %b into %c0[0, 16, 0, 0] [1, 32, 8, 8] [1, 1, 1, 1] {mlc.name = "cat"} : tensor<1x32x8x8xf32> into tensor<1x48x8x8xf32>
  return %c1 : tensor<1x48x8x8xf32>
}
