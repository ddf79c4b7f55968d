// The mlc dialect: ops that upstream MLIR lacks. Loaded at run time by Python
// (mlir.dialects.irdl.load_dialects) and by `mlir-opt --irdl-file=dialects/mlc.irdl.mlir`.
irdl.dialect @mlc {
  // mlc.call_library: destination-passing call of an external kernel by symbol, the
  // counterpart of TVM's call_dps_packed / call_tir to a registered function.
  //   %r = "mlc.call_library"(%a, %b, %init) <{callee = "openblas.sgemm",
  //          operandSegmentSizes = array<i32: 2, 1>}>
  //        : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  // Lowered before bufferization to a func.call of the C-ABI symbol.
  irdl.operation @call_library {
    %tensor = irdl.base "!builtin.tensor"
    %str = irdl.base "#builtin.string"
    irdl.operands(ins: variadic %tensor, outs: variadic %tensor)
    irdl.results(results: variadic %tensor)
    irdl.attributes {"callee" = %str}
  }
}
