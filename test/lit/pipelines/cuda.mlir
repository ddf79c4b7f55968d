// pipelines/cuda_kernels.pipeline then pipelines/cuda.pipeline on a bound elementwise op: the
// payload is what the CUDA lowering of
// mlc_mlir/pipeline/cuda.py hands the pipeline (bufferized, scf.forall mapped to a gpu.launch
// of 2x64 blocks of 128 threads by transform.gpu.map_forall_to_blocks /
// map_nested_forall_to_threads). One kernel, compiled to PTX for sm_90, launched asynchronously
// (gpu-async-region) on a stream the call creates and waits for once.
// RUN: mlir-opt %s --pass-pipeline=%cuda_kernels_pipeline | mlir-opt --pass-pipeline=%cuda_pipeline | FileCheck %s
// CHECK: llvm.func @main
// CHECK-DAG: %[[C64:.*]] = llvm.mlir.constant(64 : index) : i64
// CHECK-DAG: %[[C2:.*]] = llvm.mlir.constant(2 : index) : i64
// CHECK-DAG: %[[C128:.*]] = llvm.mlir.constant(128 : index) : i64
// CHECK: %[[S:.*]] = llvm.call @mgpuStreamCreate()
// CHECK-NEXT: gpu.launch_func <%[[S]] : !llvm.ptr> @main_kernel::@main_kernel blocks in (%[[C2]], %[[C64]], %{{.*}}) threads in (%[[C128]], %{{.*}}, %{{.*}})
// CHECK-NEXT: llvm.call @mgpuStreamSynchronize(%[[S]])
// CHECK-NEXT: llvm.call @mgpuStreamDestroy(%[[S]])
// CHECK-NEXT: llvm.return
// CHECK: gpu.binary @main_kernel
// CHECK-SAME: #nvvm.target<chip = "sm_90"
// CHECK-SAME: .target sm_90
// CHECK-SAME: max.NaN.f32
#map = affine_map<()[s0] -> (s0 * 128)>
#map1 = affine_map<()[s0, s1] -> (s0 + s1 * 128)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: memref<64x256xf32> {mlc.arg_name = "x"}, %arg1: memref<64x256xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %c1 = arith.constant 1 : index
    %c128 = arith.constant 128 : index
    %c2 = arith.constant 2 : index
    %c64 = arith.constant 64 : index
    gpu.launch blocks(%arg2, %arg3, %arg4) in (%arg8 = %c2, %arg9 = %c64, %arg10 = %c1) threads(%arg5, %arg6, %arg7) in (%arg11 = %c128, %arg12 = %c1, %arg13 = %c1) {
      %block_id_x = gpu.block_id  x
      %block_id_y = gpu.block_id  y
      %0 = affine.apply #map()[%block_id_x]
      %subview = memref.subview %arg1[%block_id_y, %0] [1, 128] [1, 1] : memref<64x256xf32> to memref<1x128xf32, strided<[256, 1], offset: ?>>
      %thread_id_x = gpu.thread_id  x
      %1 = affine.apply #map1()[%thread_id_x, %block_id_x]
      %subview_0 = memref.subview %arg0[%block_id_y, %1] [1, 1] [1, 1] : memref<64x256xf32> to memref<1x1xf32, strided<[256, 1], offset: ?>>
      %subview_1 = memref.subview %subview[0, %thread_id_x] [1, 1] [1, 1] : memref<1x128xf32, strided<[256, 1], offset: ?>> to memref<1x1xf32, strided<[256, 1], offset: ?>>
      linalg.generic {indexing_maps = [#map2, #map2], iterator_types = ["parallel", "parallel"]} ins(%subview_0 : memref<1x1xf32, strided<[256, 1], offset: ?>>) outs(%subview_1 : memref<1x1xf32, strided<[256, 1], offset: ?>>) attrs =  {mlc.name = "relu"} {
      ^bb0(%in: f32, %out: f32):
        %2 = arith.maximumf %in, %cst : f32
        linalg.yield %2 : f32
      }
      gpu.barrier
      gpu.terminator
    }
    return
  }
}

