# lit configuration of the mlc-mlir FileCheck suite.
# The wheels' tools come first on PATH: the system llc/FileCheck (LLVM 14) cannot read this IR.
import os
import sys

import lit.formats

config.name = "mlc-mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["lit.cfg.py", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.test_source_root, "Output")

repo = os.path.dirname(os.path.dirname(config.test_source_root))
sys.path.insert(0, repo)
from mlc_mlir._mlir import MLIR_BIN_DIR, llvm_bin_dir  # noqa: E402

config.environment["PATH"] = os.pathsep.join([MLIR_BIN_DIR, llvm_bin_dir(), os.environ.get("PATH", "")])
config.environment["PYTHONPATH"] = os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")])
for var in ("HOME", "TMPDIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

config.substitutions.append(("%PYTHON", sys.executable))
config.substitutions.append(("%mlc-opt", f"{sys.executable} -m mlc_mlir.cli.mlc_opt"))
config.substitutions.append(("%pipelines", os.path.join(repo, "pipelines")))
# %<name>_pipeline: the text of pipelines/<name>.pipeline, quoted, so that a RUN line reads
# `mlir-opt --pass-pipeline=%cpu_pipeline` (what `--pass-pipeline="$(cat ...)"` does in a shell;
# lit's internal shell has no command substitution).
for fname in sorted(os.listdir(os.path.join(repo, "pipelines"))):
    if fname.endswith(".pipeline"):
        with open(os.path.join(repo, "pipelines", fname)) as fh:
            text = " ".join(fh.read().split())
        config.substitutions.append((f"%{fname[:-len('.pipeline')]}_pipeline", f"'{text}'"))
config.substitutions.append(("%irdl", os.path.join(repo, "dialects", "mlc.irdl.mlir")))
