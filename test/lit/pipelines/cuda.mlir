// pipelines/cuda.pipeline on a bound elementwise op (the payload is what Schedule.bind
// produces: scf.forall nests annotated mlc.bind): one kernel, launched on a 64x2 grid of
// 128-thread blocks, compiled to PTX for sm_90.
// RUN: mlir-opt %s --pass-pipeline=%cuda_pipeline | FileCheck %s
// CHECK: llvm.func @main
// CHECK-DAG: %[[C64:.*]] = llvm.mlir.constant(64 : index) : i64
// CHECK-DAG: %[[C2:.*]] = llvm.mlir.constant(2 : index) : i64
// CHECK-DAG: %[[C128:.*]] = llvm.mlir.constant(128 : index) : i64
// CHECK: gpu.launch_func @main_kernel::@main_kernel blocks in (%[[C64]], %[[C2]], %{{.*}}) threads in (%[[C128]], %{{.*}}, %{{.*}})
// CHECK: gpu.binary @main_kernel
// CHECK-SAME: #nvvm.target<chip = "sm_90"
// CHECK-SAME: .target sm_90
#map = affine_map<(d0) -> (d0 * 128)>
#map1 = affine_map<(d0)[s0] -> (d0 * 128 + s0)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<64x256xf32> {mlc.arg_name = "x"}) -> tensor<64x256xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<64x256xf32>
    %1 = scf.forall (%arg1, %arg2) in (64, 2) shared_outs(%arg3 = %0) -> (tensor<64x256xf32>) {
      %2 = affine.apply #map(%arg2)
      %extracted_slice = tensor.extract_slice %arg3[%arg1, %2] [1, 128] [1, 1] : tensor<64x256xf32> to tensor<1x128xf32>
      %3 = scf.forall (%arg4) in (128) shared_outs(%arg5 = %extracted_slice) -> (tensor<1x128xf32>) {
        %4 = affine.apply #map1(%arg2)[%arg4]
        %extracted_slice_0 = tensor.extract_slice %arg0[%arg1, %4] [1, 1] [1, 1] : tensor<64x256xf32> to tensor<1x1xf32>
        %extracted_slice_1 = tensor.extract_slice %arg5[0, %arg4] [1, 1] [1, 1] : tensor<1x128xf32> to tensor<1x1xf32>
        %5 = linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%extracted_slice_0 : tensor<1x1xf32>) outs(%extracted_slice_1 : tensor<1x1xf32>) attrs =  {mlc.name = "relu"} {
        ^bb0(%in: f32, %out: f32):
          %6 = arith.maximumf %in, %cst : f32
          linalg.yield %6 : f32
        } -> tensor<1x1xf32>
        scf.forall.in_parallel {
          tensor.parallel_insert_slice %5 into %arg5[0, %arg4] [1, 1] [1, 1] : tensor<1x1xf32> into tensor<1x128xf32>
        }
      } {mlc.bind = "threadIdx.x"}
      scf.forall.in_parallel {
        tensor.parallel_insert_slice %3 into %arg3[%arg1, %2] [1, 128] [1, 1] : tensor<1x128xf32> into tensor<64x256xf32>
      }
    } {mlc.bind = "blockIdx.x,blockIdx.y"}
    return %1 : tensor<64x256xf32>
  }
}
