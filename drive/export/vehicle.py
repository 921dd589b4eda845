"""Where the vehicle runtime ships: ``drive/deploy/`` inside the installed package (package data).

It holds the one-file C++ runtime (``drive_runtime.cpp``, ``CMakeLists.txt``: CMake against the
pip wheel's libtorch), the torch-only Python runner (``run_policy.py``) and their guide
(``README.md``). Neither needs the drive package on the car; they ship with it so that an
installed wheel, not only a checkout, can build them::

    drive export --print-runtime-dir
    cmake -S "$(drive export --print-runtime-dir)" -B build/deploy \\
          -DCMAKE_PREFIX_PATH="$(python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["runtime_dir", "RUNTIME_FILES"]

RUNTIME_FILES = ("CMakeLists.txt", "drive_runtime.cpp", "run_policy.py", "README.md")


def runtime_dir() -> Path:
    """The folder holding the C++ runtime's sources, the Python runner and their README."""
    return Path(str(files("drive") / "deploy"))
