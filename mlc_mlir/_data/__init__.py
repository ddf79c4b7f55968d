"""Package data: the lowering pipelines, IRDL dialects and the runtime code linked into compiled
modules, shipped inside the wheel.

``pipelines`` and ``dialects`` here are links to the repository's top-level ``pipelines/`` and
``dialects/`` folders (the source of truth, usable by ``mlir-opt`` directly); building a wheel
copies their files in, so a non-editable install finds them at :data:`PIPELINES_DIR` and
:data:`DIALECTS_DIR` too.
"""

import os

#: Folder of the ``*.pipeline`` files.
PIPELINES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipelines")
#: Folder of the ``*.irdl.mlir`` dialect definitions.
DIALECTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dialects")
#: Folder of the runtime code linked into compiled modules (``buffer_cache.mlir``).
RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
