// pipelines/cpu.pipeline, verbatim, on a matmul + bias/relu generic: the result is LLVM dialect
// only, the tensor result became an out-parameter (buffer-results-to-out-params), the
// scf.forall of a parallel loop became OpenMP, math.erf became a libm call.
// RUN: mlir-opt %s --pass-pipeline=%cpu_pipeline | FileCheck %s

// CHECK-NOT: linalg.
// CHECK-NOT: tensor.
// CHECK-NOT: memref.
// CHECK-LABEL: llvm.func @main(
// CHECK-SAME: %arg{{[0-9]+}}: !llvm.ptr, %arg{{[0-9]+}}: !llvm.ptr, %arg{{[0-9]+}}: i64
// CHECK-NOT: llvm.return %{{.*}} : !llvm.struct
// CHECK: llvm.fmul
// CHECK: llvm.fadd
// CHECK: llvm.intr.maximum
// CHECK-LABEL: llvm.func @par(
// CHECK: omp.parallel
// CHECK: omp.wsloop
// CHECK-LABEL: llvm.func @gelu(
// CHECK: llvm.call @erff
#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %bias: tensor<16xf32>) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]}
       ins(%m, %bias : tensor<4x16xf32>, tensor<16xf32>) outs(%e2 : tensor<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    %c0 = arith.constant 0.0 : f32
    %t = arith.maximumf %s, %c0 : f32
    linalg.yield %t : f32
  } -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

func.func @par(%a: tensor<64xf32>) -> tensor<64xf32> {
  %e = tensor.empty() : tensor<64xf32>
  %r = scf.forall (%i) in (2) shared_outs(%o = %e) -> (tensor<64xf32>) {
    %off = affine.apply affine_map<(d0) -> (d0 * 32)>(%i)
    %s = tensor.extract_slice %a[%off] [32] [1] : tensor<64xf32> to tensor<32xf32>
    %d = tensor.extract_slice %o[%off] [32] [1] : tensor<64xf32> to tensor<32xf32>
    %n = linalg.negf ins(%s : tensor<32xf32>) outs(%d : tensor<32xf32>) -> tensor<32xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %n into %o[%off] [32] [1] : tensor<32xf32> into tensor<64xf32>
    }
  }
  return %r : tensor<64xf32>
}

func.func @gelu(%a: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
       ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.erf %x : f32
    linalg.yield %y : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
