"""Export a trained policy for the vehicle, and run exported files.

* :func:`export_policy` -- checkpoint -> TorchScript ``.ts`` / AOTInductor ``.pt2`` / ONNX
  ``.onnx``, raw camera frame in, safe curvature command out (``drive export``).
* :class:`DeployedPolicy` -- the module inside those files: preprocessing, network, safety layer
  (status bits :data:`STATUS`, :func:`decode_status`).
* :func:`load_exported`, :class:`ExportedDriver` -- run an exported file from Python, or drive the
  built-in world with it (``drive evaluate --policy policy.ts``).

See docs/deploy.md and drive/deploy/README.md; :func:`drive.export.vehicle.runtime_dir` is where the
vehicle runtime's sources are in the installed package (``drive export --print-runtime-dir``).
"""

from drive.export.formats import (
    DEFAULT_CURVATURE_LIMIT_PER_M,
    FORMATS,
    build_deployed,
    export_metadata,
    export_policy,
)
from drive.export.module import STATUS, DeployedPolicy, decode_status
from drive.export.runtime import (
    PRESERVED,
    ExportedDriver,
    ExportedPolicy,
    load_exported,
    optimize_loaded,
    read_metadata,
)

__all__ = [
    "export_policy",
    "build_deployed",
    "export_metadata",
    "FORMATS",
    "DEFAULT_CURVATURE_LIMIT_PER_M",
    "DeployedPolicy",
    "STATUS",
    "decode_status",
    "ExportedPolicy",
    "ExportedDriver",
    "load_exported",
    "optimize_loaded",
    "PRESERVED",
    "read_metadata",
]
