"""The check that a schedule replays in upstream ``mlir-opt``: its transform script (the
trace's ``transform`` dialect form) applied to the payload by ``--transform-interpreter``."""

import os
import subprocess

from mlc_mlir._mlir import MLIR_BIN_DIR


def applied_in_mlir_opt(payload, sch, tmp_path) -> str:
    """The text ``mlir-opt`` prints after applying ``sch`` 's transform script to ``payload``
    (a Module or its text; files in ``tmp_path``), stripped; compare with ``str(sch.mod)``.
    Raises ``CalledProcessError`` when mlir-opt fails."""
    (tmp_path / "payload.mlir").write_text(str(payload))
    (tmp_path / "script.mlir").write_text(str(sch.as_transform_script()))
    return subprocess.run(
        [os.path.join(MLIR_BIN_DIR, "mlir-opt"), str(tmp_path / "payload.mlir"),
         f"--transform-preload-library=transform-library-paths={tmp_path / 'script.mlir'}",
         "--transform-interpreter"], capture_output=True, text=True, check=True).stdout.strip()
