"""Fixed CPU targets for tests whose schedule decisions must not depend on the machine running
them (the CPU differs between machines: AVX2-only Zen and AVX-512 Xeon/Zen 4 both occur).

* ``AVX2``: 2 cores, 16 ymm registers, 32 KiB L1d, 512 KiB L2 (a Zen 1 EPYC): Goto register
  tile 4 x 16, KC 512.
* ``AVX512``: 2 cores, 32 zmm registers, 48 KiB L1d, 2 MiB L2 (a Sapphire Rapids Xeon):
  register tile 8 x 32.
"""

from mlc_mlir.target import Target

AVX2 = Target("cpu", cpu="znver1", features=("avx", "avx2", "fma"), vector_bits=256,
              vector_registers=16, l1d_bytes=32 << 10, l2_bytes=512 << 10, cores=2)
AVX512 = Target("cpu", cpu="sapphirerapids", features=("avx512f", "avx2", "fma"), vector_bits=512,
                vector_registers=32, l1d_bytes=48 << 10, l2_bytes=2 << 20, cores=2)
