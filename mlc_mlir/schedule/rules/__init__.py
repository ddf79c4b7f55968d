"""Default schedule rules, one concept per module: contractions (:mod:`.matmul`), convolution
(:mod:`.conv`), pooling (:mod:`.pooling`), reductions (:mod:`.reduction`), elementwise
(:mod:`.elementwise`); shared target-derived choices (:mod:`.common`) and payload facts
(:mod:`.payload`). The table and driver are :mod:`mlc_mlir.schedule.default_rules`."""
