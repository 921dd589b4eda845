"""What decides which float32 kernels this machine runs, as a JSON-able dict.

oneDNN, MKL and ATen's vectorised paths choose their kernels, blockings and summation orders by
CPU micro-architecture, instruction set, cache sizes and thread count, so two machines with the
same torch version and the same ``get_cpu_capability()`` can differ in the last bits of a float32
result. A bitwise comparison with numbers recorded elsewhere holds only where all of this is the
same: ``tools/make_compat_fixtures.py`` stores the fingerprint beside the references it records
(``tests/fixtures/compat/machine.json``) and ``tests/test_compat_fixtures.py`` compares bitwise only
when asked to (``DRIVE_COMPAT_BITWISE=1``) on a machine whose fingerprint is that one.

    python tools/machine_fingerprint.py          # print this machine's fingerprint
"""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path
from typing import Any, Dict, List

# environment variables that change kernel choice (instruction set caps, MKL code paths); the thread
# count is recorded as the number the results were computed with, not as OMP_NUM_THREADS
KERNEL_ENV = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "MKL_DEBUG_CPU_TYPE",
)


def _cpuinfo() -> Dict[str, str]:
    """The first processor's block of /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: Dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def _caches() -> List[str]:
    """``L1d 48K``, ``L2 2048K`` ... of CPU 0 (oneDNN sizes its blocks by them)."""
    out = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        out.append(f"L{level}{'' if kind == 'Unified' else kind[0].lower()} {size}")
    return out


def _build_line(config: str, name: str) -> str:
    """The line of ``torch.__config__.show()`` naming ``name``'s build (MKL, oneDNN), or ''."""
    for line in config.splitlines():
        if name in line:
            return re.sub(r"\s+", " ", line.strip(" -"))
    return ""


def machine_fingerprint(threads: int) -> Dict[str, Any]:
    """This machine's kernel-relevant facts, with ``threads`` (the torch threads the numbers used)."""
    import numpy as np  # here: the tool prints without importing drive
    import torch

    cpu = _cpuinfo()
    config = torch.__config__.show()
    return {
        "machine": platform.machine(),
        "cpu_model": cpu.get("model name", platform.processor()),
        "cpu_vendor": cpu.get("vendor_id", ""),
        "cpu_family_model_stepping": "/".join(cpu.get(k, "") for k in ("cpu family", "model", "stepping")),
        "cpu_flags": " ".join(sorted(cpu.get("flags", "").split())),
        "caches": _caches(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl": _build_line(config, "Intel(R) oneAPI Math Kernel Library")
        or _build_line(config, "Math Kernel Library"),
        "onednn": _build_line(config, "oneDNN") or _build_line(config, "MKL-DNN"),
        "openmp": _build_line(config, "OpenMP"),
        "numpy": np.__version__,
        "threads": threads,
        "env": {k: os.environ[k] for k in KERNEL_ENV if k in os.environ},
    }


def differences(recorded: Dict[str, Any], here: Dict[str, Any]) -> List[str]:
    """The keys on which two fingerprints differ, each as ``key: recorded -> here`` (flags: counts)."""
    out = []
    for key in sorted(set(recorded) | set(here)):
        a, b = recorded.get(key), here.get(key)
        if a == b:
            continue
        if key == "cpu_flags" and isinstance(a, str) and isinstance(b, str):
            only_a, only_b = set(a.split()) - set(b.split()), set(b.split()) - set(a.split())
            out.append(f"cpu_flags: {len(only_a)} only recorded, {len(only_b)} only here")
        else:
            out.append(f"{key}: {a!r} -> {b!r}")
    return out


if __name__ == "__main__":
    print(json.dumps(machine_fingerprint(threads=1), indent=2))
