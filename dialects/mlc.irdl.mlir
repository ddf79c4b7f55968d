// The mlc dialect: ops that upstream MLIR lacks. Loaded at run time by Python
// (mlir.dialects.irdl.load_dialects) and by `mlir-opt --irdl-file=dialects/mlc.irdl.mlir`.
irdl.dialect @mlc {
  // mlc.call_library: destination-passing call of an external kernel by symbol (TVM's
  // call_dps_packed / Relax call_tir to a registered function). Up to 6 inputs of any types,
  // one init tensor whose type is the result type:
  //   %r = "mlc.call_library"(%a, %b, %init) {callee = "openblas.sgemm",
  //          operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0, 1>}
  //        : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // Each input has its own constraint variable: IRDL unifies the types of all elements of a
  // variadic (llvm-project issue 158085), so a variadic input list would force equal types.
  // Lowered before bufferization (graph.LowerCallLibrary) to a func.call of the C-ABI symbol.
  irdl.operation @call_library {
    %in0 = irdl.any
    %in1 = irdl.any
    %in2 = irdl.any
    %in3 = irdl.any
    %in4 = irdl.any
    %in5 = irdl.any
    %out = irdl.any
    %str = irdl.base "#builtin.string"
    irdl.operands(in0: optional %in0, in1: optional %in1, in2: optional %in2, in3: optional %in3,
                  in4: optional %in4, in5: optional %in5, init: %out)
    irdl.results(result: %out)
    irdl.attributes {"callee" = %str}
  }
}
