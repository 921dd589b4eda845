"""AOTInductor packages (``.pt2``) in this process: what the archive says, whether this process
can run it, a probe in a child process before a CUDA package is loaded here, and the loader's
flat entry point. :class:`drive.export.runtime.ExportedPolicy` uses these; damaged archives are
refused by :mod:`drive.export.integrity`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch.utils import _pytree as pytree

__all__ = ["read_aoti_strings", "check_aoti_loadable", "probe_aoti", "init_cuda", "flat_runner"]

PathLike = Union[str, os.PathLike]


def read_aoti_strings(path: PathLike) -> Dict[str, str]:
    """The string map an AOTInductor package was compiled with (``aot_inductor.metadata``), read
    from the ``.pt2`` zip archive itself: nothing is loaded, so a package built for a device this
    process cannot run (or whose loader would crash) can still be inspected.

    AOTInductor stores the map as JSON beside the compiled model,
    ``<archive>/data/aotinductor/<model>/*_metadata.json``: the map
    ``AOTIModelPackageLoader::get_metadata()`` returns, with the compiler's ``AOTI_DEVICE_KEY``
    (``cpu`` / ``cuda``), ``AOTI_COMPUTE_CAPABILITY`` and ``AOTI_CPU_ISA`` added."""
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ValueError(f"{path}: not an AOTInductor package (not a zip archive: {e})") from None
    with zf:
        names = [n for n in zf.namelist() if n.endswith("_metadata.json") and "/aotinductor/" in n]
        for name in sorted(names):
            try:
                strings = json.loads(zf.read(name))
            except ValueError:
                continue
            if isinstance(strings, dict) and "metadata_json" in strings:
                return {str(k): str(v) for k, v in strings.items()}
    raise ValueError(f"{path}: no drive metadata in the package's archive: not exported by drive")


def init_cuda(device: torch.device) -> None:
    """Create the CUDA context (and make ``device`` current) before a native loader touches CUDA:
    an AOTInductor CUDA package opened first thing in a fresh process meets no context."""
    torch.cuda.init()
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_device(index)
    torch.zeros(1, device=torch.device("cuda", index))
    torch.cuda.synchronize(index)


def check_aoti_loadable(path: PathLike, meta: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """Refuse (``ValueError``, the reason in one line) an AOTInductor package this process cannot
    run, before loading it.

    Read from the archive (:func:`read_aoti_strings`), not by loading: the package's device
    (a CUDA package needs a visible GPU of the compute capability it was compiled for), the torch
    that compiled it (a package is native code against that libtorch's ABI) and, for CPU
    packages, the vector instruction set its kernels use. Returns the package's string map."""
    path = Path(path)
    strings = read_aoti_strings(path)
    meta = meta if meta is not None else json.loads(strings["metadata_json"])
    built = str(meta.get("torch_version", ""))
    here = torch.__version__.split("+")[0]
    if built and built != here:
        raise ValueError(
            f"{path}: AOTInductor package compiled by torch {built}, this is torch {here}: "
            "a package is native code for the torch that built it; export it again here "
            "(or use the TorchScript file, which is portable)"
        )
    device = strings.get("AOTI_DEVICE_KEY", str(meta.get("device", "cpu")))
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{path}: AOTInductor package compiled for CUDA, but torch sees no CUDA device in "
                "this process; export with --device cpu for this machine, or use the TorchScript file"
            )
        built_cc = strings.get("AOTI_COMPUTE_CAPABILITY", "")
        major, minor = torch.cuda.get_device_capability()
        if built_cc and built_cc.isdigit() and built_cc != f"{major}{minor}":
            raise ValueError(
                f"{path}: AOTInductor package compiled for CUDA compute capability {built_cc}, "
                f"this GPU ({torch.cuda.get_device_name()}) is {major}{minor}; export it again on this GPU"
            )
    elif device == "cpu":
        built_isa = strings.get("AOTI_CPU_ISA", "")
        if built_isa and built_isa not in ("", "INVALIDVECISA", "NONE"):
            # torch._inductor takes ~5 s to import: only CPU .pt2 packages need it (start-up time)
            from torch._inductor import cpu_vec_isa

            supported = {str(isa).upper() for isa in cpu_vec_isa.valid_vec_isa_list()}
            if built_isa.upper() not in supported:
                raise ValueError(
                    f"{path}: AOTInductor CPU package compiled for the {built_isa} instruction set, "
                    f"which this CPU lacks (it has: {', '.join(sorted(supported)) or 'none'}); "
                    "export it again on this machine"
                )
    else:
        raise ValueError(
            f"{path}: AOTInductor package compiled for device {device!r}; drive runs cpu or cuda packages"
        )
    return strings


_PROBED: Dict[Tuple[str, int, int], Optional[str]] = {}
_PROBE = """
import sys, torch
from drive.export.runtime import load_exported
p = load_exported(sys.argv[1], probe=False, cuda_graph=False)
h, w = p.frame_size
out = p.step(torch.full((1, h, w, 3), 128, dtype=torch.uint8, device=p.device), p.initial_state(1))
if p.device.type == "cuda":
    torch.cuda.synchronize()
assert all(torch.isfinite(o.float()).all() for o in out), "non-finite output on a grey frame"
print("ok")
"""


def probe_failure(path: PathLike, timeout_s: float = 600.0) -> Optional[str]:
    """Load an AOTInductor package and step it once in a child process: None if that worked, else
    how it failed ("killed by SIGSEGV", ...). A native loader that crashes (a segfault kills the
    process, no exception reaches Python) then costs a clear error instead of the caller's process.
    Remembered per file (path, size, mtime) in this process."""
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _PROBED:
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _PROBE, str(path)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            if proc.returncode == 0:
                _PROBED[key] = None
            else:
                tail = [line for line in (proc.stderr or proc.stdout).strip().splitlines() if line.strip()]
                if proc.returncode < 0:
                    how = f"killed by {signal.Signals(-proc.returncode).name}"
                else:
                    how = f"exit {proc.returncode}: {tail[-1] if tail else 'no message'}"
                _PROBED[key] = how
        except subprocess.TimeoutExpired:
            _PROBED[key] = f"no answer within {timeout_s:.0f} s"
    return _PROBED[key]


USE_TORCHSCRIPT = (
    "use the TorchScript export (`drive export --format torchscript --device cuda`), "
    "which steps in a CUDA graph"
)


def probe_aoti(path: PathLike, timeout_s: float = 600.0) -> None:
    """:func:`probe_failure` as a ``ValueError`` naming the file (a CUDA package made elsewhere,
    before this process loads it)."""
    failure = probe_failure(path, timeout_s)
    if failure is not None:
        raise ValueError(
            f"{Path(path).resolve()}: loading and stepping this AOTInductor CUDA package in a probe "
            f"process failed ({failure}); refused rather than risk this process: {USE_TORCHSCRIPT}"
        )


def flat_runner(package: Any) -> Optional[Callable[[List[torch.Tensor]], List[torch.Tensor]]]:
    """The package loader's own ``boxed_run`` when the program takes exactly ``(frame, hidden)``
    and returns three tensors, else None. ``AOTICompiledModel.__call__`` parses the package's
    pytree specs again on every call (~0.04 ms of a ~1.3 ms CPU step); our step's inputs and
    outputs are flat, so the specs are checked once here instead."""
    loader = getattr(package, "loader", None)
    if loader is None or not hasattr(loader, "boxed_run") or not hasattr(loader, "get_call_spec"):
        return None
    in_spec, out_spec = (pytree.treespec_loads(s) for s in loader.get_call_spec())
    x = torch.empty(0)
    expected_in = pytree.tree_flatten(((x, x), {}))[1]
    expected_out = pytree.tree_flatten((x, x, x))[1]
    return loader.boxed_run if in_spec == expected_in and out_spec == expected_out else None
