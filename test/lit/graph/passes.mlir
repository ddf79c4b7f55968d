// Graph passes from mlc-opt, one RUN line each (--split-input-file is not needed: the passes
// work per function). Inputs: an MLP layer with a constant weight transposed at run time, a
// dead op, and an elementwise epilogue.
// RUN: %mlc-opt %s --mlc-fuse-ops | FileCheck %s --check-prefix=FUSE
// RUN: %mlc-opt %s --mlc-fold-constants | FileCheck %s --check-prefix=FOLD
// RUN: %mlc-opt %s --mlc-dce | FileCheck %s --check-prefix=DCE
// RUN: %mlc-opt %s --mlc-fold-constants --mlc-dce --mlc-fuse-ops | FileCheck %s --check-prefix=ALL
// RUN: %mlc-opt %s --mlc-dce --mlc-dispatch-library=mm=openblas.sgemm | FileCheck %s --check-prefix=BLAS
// RUN: %mlc-opt %s --mlc-dce --mlc-dispatch-library=mm=openblas.sgemm --mlc-lower-call-library | FileCheck %s --check-prefix=LOWER
// RUN: not %mlc-opt %s --mlc-dispatch-library=mm 2>&1 | FileCheck %s --check-prefix=BADARG
// RUN: %mlc-opt %s --mlc-dce --mlc-dispatch-library=mm=openblas.sgemm | mlir-opt --irdl-file=%irdl | FileCheck %s --check-prefix=BLAS

// (the splat weight's transpose folds away inside its primitive)
// FUSE-LABEL: func.func private @fused_wt(
// FUSE: return %{{.*}} : tensor<64x10xf32>
// FUSE-LABEL: func.func private @fused_mm_relu(
// FUSE-SAME: attributes {mlc.primitive}
// FUSE: linalg.matmul {mlc.name = "mm"}
// FUSE: linalg.generic {{.*}} {mlc.name = "relu"}
// FUSE-LABEL: func.func @main(
// FUSE: call @fused_wt
// FUSE: call @fused_mm_relu

// FOLD-NOT: linalg.transpose
// FOLD: arith.constant {mlc.name = "wt.folded"} dense_resource<main_wt_folded> : tensor<64x10xf32>
// FOLD: linalg.fill

// DCE-NOT: "dead"
// DCE: return

// ALL-LABEL: func.func private @fused_mm_relu(
// ALL: arith.constant {mlc.name = "wt.folded"}
// ALL-NOT: linalg.transpose
// ALL-LABEL: func.func @main(
// ALL-NEXT: call @fused_mm_relu

// BLAS: "mlc.call_library"(%arg0, %{{.*}}, %{{.*}}) {callee = "openblas.sgemm"
// BLAS-NOT: linalg.matmul
// LOWER: bufferization.to_buffer %arg0 read_only
// LOWER: call @scipy_cblas_sgemm
// LOWER: bufferization.to_tensor %{{.*}} restrict writable
// LOWER: func.func private @scipy_cblas_sgemm(i32, i32, i32, i32, i32, i32, f32, !llvm.ptr, i32, !llvm.ptr, i32, f32, !llvm.ptr, i32)
// BADARG: mlc-opt: error: --mlc-dispatch-library: expected op=kernel[,op=kernel...], got 'mm'
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%x: tensor<4x64xf32>) -> tensor<4x10xf32> {
  %w = arith.constant dense<0.5> : tensor<10x64xf32>
  %e = tensor.empty() : tensor<64x10xf32>
  %t = linalg.transpose {mlc.name = "wt"} ins(%w : tensor<10x64xf32>) outs(%e : tensor<64x10xf32>) permutation = [1, 0]
  %e2 = tensor.empty() : tensor<4x10xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill {mlc.name = "mm.init"} ins(%z : f32) outs(%e2 : tensor<4x10xf32>) -> tensor<4x10xf32>
  %r = linalg.matmul {mlc.name = "mm"} ins(%x, %t : tensor<4x64xf32>, tensor<64x10xf32>) outs(%f : tensor<4x10xf32>) -> tensor<4x10xf32>
  %dead = linalg.matmul {mlc.name = "dead"} ins(%x, %t : tensor<4x64xf32>, tensor<64x10xf32>) outs(%f : tensor<4x10xf32>) -> tensor<4x10xf32>
  %e3 = tensor.empty() : tensor<4x10xf32>
  %y = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%r : tensor<4x10xf32>) outs(%e3 : tensor<4x10xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%a: f32, %o: f32):
    %c = arith.constant 0.0 : f32
    %m = arith.maximumf %a, %c : f32
    linalg.yield %m : f32
  } -> tensor<4x10xf32>
  return %y : tensor<4x10xf32>
}
