// Destination-passing rewrites of slices (pipeline/prepare_passes/destination_style.py).
// RUN: %mlc-opt %s --mlc-pad-to-insert-slice | FileCheck %s --check-prefix=PAD
// RUN: %mlc-opt %s --mlc-pad-to-insert-slice --mlc-fill-pad-border | FileCheck %s --check-prefix=BORDER
// RUN: %mlc-opt %s --mlc-pad-to-insert-slice --mlc-copy-into-slices | FileCheck %s --check-prefix=COPY
// RUN: %mlc-opt %s --mlc-read-inserted-slices | FileCheck %s --check-prefix=READ
// RUN: %mlc-opt %s --mlc-write-reshaped-into-slices | FileCheck %s --check-prefix=RESHAPED

// PAD-LABEL: func.func @pool_pad(
// PAD-NOT: tensor.pad
// PAD: %[[F:.*]] = linalg.fill {mlc.name = "pad.fill"} ins(%{{.*}} : f32) outs(%{{.*}} : tensor<1x6x6x8xf32>)
// PAD: tensor.insert_slice %arg0 into %[[F]][0, 1, 1, 0] [1, 4, 4, 8] [1, 1, 1, 1]

// one fill per side and padded dim (H: two 1x6 rows, W: two 4x1 columns), no full-buffer fill
// BORDER-LABEL: func.func @pool_pad(
// BORDER-NOT: {mlc.name = "pad.fill"}
// BORDER-COUNT-4: linalg.fill {mlc.name = "pad.fill.border"}
// BORDER: tensor.insert_slice %arg0 into %{{.*}}[0, 1, 1, 0] [1, 4, 4, 8] [1, 1, 1, 1]

// the inserted argument is copied by an identity generic into the interior slice
// COPY-LABEL: func.func @pool_pad(
// COPY: %[[F:.*]] = linalg.fill {mlc.name = "pad.fill"}
// COPY: %[[S:.*]] = tensor.extract_slice %[[F]][0, 1, 1, 0] [1, 4, 4, 8] [1, 1, 1, 1]
// COPY: %[[C:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<1x4x4x8xf32>) outs(%[[S]] : tensor<1x4x4x8xf32>) attrs = {mlc.name = "insert_slice.copy"}
// COPY: tensor.insert_slice %[[C]] into %[[F]][0, 1, 1, 0]

// the later reader of the inserted value reads the slice of the insert
// READ-LABEL: func.func @residual(
// READ: %[[Y:.*]] = linalg.generic {{.*}}mlc.name = "relu"
// READ: %[[P:.*]] = tensor.insert_slice %[[Y]] into
// READ: %[[S:.*]] = tensor.extract_slice %[[P]][0, 1, 1, 0] [1, 4, 4, 8] [1, 1, 1, 1]
// READ: linalg.generic {{.*}} ins(%[[S]] : tensor<1x4x4x8xf32>) {{.*}}mlc.name = "double"

// the producer of the collapsed value writes into the expanded interior of the padded buffer
// RESHAPED-LABEL: func.func @tiles(
// RESHAPED: %[[F:.*]] = linalg.fill {mlc.name = "pad.fill"}
// RESHAPED: %[[S:.*]] = tensor.extract_slice %[[F]][0, 1, 1, 0] [1, 4, 4, 8] [1, 1, 1, 1]
// RESHAPED: %[[E:.*]] = tensor.expand_shape %[[S]] {{\[\[}}0], [1, 2], [3, 4], [5]] output_shape [1, 2, 2, 2, 2, 8]
// RESHAPED: linalg.generic {{.*}} outs(%[[E]] : tensor<1x2x2x2x2x8xf32>) attrs = {mlc.name = "out_transform"}
// RESHAPED: tensor.insert_slice %{{.*}} into %[[F]][0, 1, 1, 0]

// a concatenation built after the producer (its empty tensor and its first input's insert)
// moves before it, and the producer writes into the second input's expanded slice
// RESHAPED-LABEL: func.func @concat_tiles(
// RESHAPED: %[[CE:.*]] = tensor.empty() : tensor<1x4x4x16xf32>
// RESHAPED: %[[P0:.*]] = tensor.insert_slice %arg0 into %[[CE]][0, 0, 0, 0] [1, 4, 4, 8] [1, 1, 1, 1]
// RESHAPED: %[[S1:.*]] = tensor.extract_slice %[[P0]][0, 0, 0, 8] [1, 4, 4, 8] [1, 1, 1, 1]
// RESHAPED: %[[E1:.*]] = tensor.expand_shape %[[S1]]
// RESHAPED: linalg.generic {{.*}} outs(%[[E1]] : tensor<1x2x2x2x2x8xf32>) attrs = {mlc.name = "out_transform"}
// RESHAPED: tensor.insert_slice %{{.*}} into %[[P0]][0, 0, 0, 8]

#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#id6 = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3, d4, d5)>
func.func @pool_pad(%y: tensor<1x4x4x8xf32>) -> tensor<1x6x6x8xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %p = tensor.pad %y low[0, 1, 1, 0] high[0, 1, 1, 0] {
  ^bb0(%i: index, %j: index, %k: index, %l: index):
    tensor.yield %ninf : f32
  } : tensor<1x4x4x8xf32> to tensor<1x6x6x8xf32>
  return %p : tensor<1x6x6x8xf32>
}
func.func @residual(%x: tensor<1x4x4x8xf32>) -> (tensor<1x6x6x8xf32>, tensor<1x4x4x8xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4x4x8xf32>
  %y = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%x : tensor<1x4x4x8xf32>) outs(%e : tensor<1x4x4x8xf32>) attrs = {mlc.name = "relu"} {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<1x4x4x8xf32>
  %eb = tensor.empty() : tensor<1x6x6x8xf32>
  %b = linalg.fill {mlc.name = "pad.fill"} ins(%z : f32) outs(%eb : tensor<1x6x6x8xf32>) -> tensor<1x6x6x8xf32>
  %p = tensor.insert_slice %y into %b[0, 1, 1, 0] [1, 4, 4, 8] [1, 1, 1, 1] : tensor<1x4x4x8xf32> into tensor<1x6x6x8xf32>
  %e2 = tensor.empty() : tensor<1x4x4x8xf32>
  %r = linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%y : tensor<1x4x4x8xf32>) outs(%e2 : tensor<1x4x4x8xf32>) attrs = {mlc.name = "double"} {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %a : f32
    linalg.yield %s : f32
  } -> tensor<1x4x4x8xf32>
  return %p, %r : tensor<1x6x6x8xf32>, tensor<1x4x4x8xf32>
}
func.func @tiles(%t: tensor<1x2x2x2x2x8xf32>) -> tensor<1x6x6x8xf32> {
  %z = arith.constant 0.0 : f32
  %eb = tensor.empty() : tensor<1x6x6x8xf32>
  %b = linalg.fill {mlc.name = "pad.fill"} ins(%z : f32) outs(%eb : tensor<1x6x6x8xf32>) -> tensor<1x6x6x8xf32>
  %e = tensor.empty() : tensor<1x2x2x2x2x8xf32>
  %y = linalg.generic {indexing_maps = [#id6, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%t : tensor<1x2x2x2x2x8xf32>) outs(%e : tensor<1x2x2x2x2x8xf32>) attrs = {mlc.name = "out_transform"} {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x2x2x8xf32>
  %c = tensor.collapse_shape %y [[0], [1, 2], [3, 4], [5]] : tensor<1x2x2x2x2x8xf32> into tensor<1x4x4x8xf32>
  %p = tensor.insert_slice %c into %b[0, 1, 1, 0] [1, 4, 4, 8] [1, 1, 1, 1] : tensor<1x4x4x8xf32> into tensor<1x6x6x8xf32>
  return %p : tensor<1x6x6x8xf32>
}
func.func @concat_tiles(%x0: tensor<1x4x4x8xf32>, %t: tensor<1x2x2x2x2x8xf32>) -> tensor<1x4x4x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x2x2x2x2x8xf32>
  %y = linalg.generic {indexing_maps = [#id6, #id6], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%t : tensor<1x2x2x2x2x8xf32>) outs(%e : tensor<1x2x2x2x2x8xf32>) attrs = {mlc.name = "out_transform"} {
  ^bb0(%a: f32, %o: f32):
    %m = arith.maximumf %a, %z : f32
    linalg.yield %m : f32
  } -> tensor<1x2x2x2x2x8xf32>
  %c = tensor.collapse_shape %y [[0], [1, 2], [3, 4], [5]] : tensor<1x2x2x2x2x8xf32> into tensor<1x4x4x8xf32>
  %ce = tensor.empty() : tensor<1x4x4x16xf32>
  %p0 = tensor.insert_slice %x0 into %ce[0, 0, 0, 0] [1, 4, 4, 8] [1, 1, 1, 1] : tensor<1x4x4x8xf32> into tensor<1x4x4x16xf32>
  %p1 = tensor.insert_slice %c into %p0[0, 0, 0, 8] [1, 4, 4, 8] [1, 1, 1, 1] : tensor<1x4x4x8xf32> into tensor<1x4x4x16xf32>
  return %p1 : tensor<1x4x4x16xf32>
}
