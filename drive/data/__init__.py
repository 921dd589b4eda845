"""Driving logs -> training sequences: readers, preprocessing cache, windows, augmentation, DataModule.

Entry points: :func:`drive.data.readers.read_logs` (any supported log -> canonical recordings),
:class:`drive.data.datamodule.DriveDataModule` (Lightning), ``drive data inspect|convert`` (CLI).
Submodules are imported lazily so ``import drive.data`` stays cheap.
"""

__all__ = [
    "readers",
    "cache",
    "sequences",
    "augment",
    "viewpoint",
    "dataset",
    "datamodule",
    "errors",
    "labels",
]
