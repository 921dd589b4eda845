"""deploy/: the C++ runtime (built here with CMake against the wheel's libtorch) and the Python
runner give the same commands as Python; the AOTInductor package matches TorchScript.

The C++ build takes ~20-60 s and the AOTInductor compile ~60-90 s on a 2-core machine; both run
once per session. Set DRIVE_DEPLOY_BUILD=/some/dir to reuse a build directory between runs.
"""
from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drive.export import export_policy, load_exported
from drive.policy_io import policy_meta, save_policy
from drive.preprocess import Preprocessing
from drive.train.families import build_policy

REPO = Path(__file__).resolve().parents[1]
CAMERA = (80, 208)  # cropped to 79x204, then resized (antialiased) to 78x200 inside every runtime
FPS = 20.0


pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                       reason="needs cmake and a C++ compiler"),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("deploy")
    torch.manual_seed(3)
    policy = build_policy("ncp_ltc", frame_period_s=1.0 / FPS)
    meta = policy_meta(policy, Preprocessing(size=(78, 200), crop=(1, 80, 2, 206)), FPS, "ncp_ltc", frame_size=list(CAMERA))
    ckpt = save_policy(d / "ncp.ckpt", policy, meta)
    g = torch.Generator().manual_seed(1)
    frames = torch.randint(0, 256, (40, *CAMERA, 3), dtype=torch.uint8, generator=g)
    frames[17] = 0  # a black frame: held and flagged in every runtime
    ppm = d / "frames"
    ppm.mkdir()
    for i, f in enumerate(frames):
        (ppm / f"{i:06d}.ppm").write_bytes(b"P6\n%d %d\n255\n" % (CAMERA[1], CAMERA[0]) + f.numpy().tobytes())
    raw = d / "frames.rgb"
    frames.numpy().tofile(raw)
    return {"dir": d, "ckpt": ckpt, "ts": export_policy(ckpt, d / "policy.ts"), "frames": frames, "ppm": ppm, "raw": raw}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> Path:
    build = Path(os.environ.get("DRIVE_DEPLOY_BUILD") or tmp_path_factory.mktemp("build"))
    prefix = torch.utils.cmake_prefix_path
    subprocess.run(["cmake", "-S", str(REPO / "deploy"), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True, text=True)
    done = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return build / "drive_runtime"


def python_reference(path: Path, frames: torch.Tensor, optimize: bool = True):
    model = load_exported(path, optimize=optimize)
    hidden, rows = model.initial_state(), []
    for frame in frames:
        c, hidden, status = model.step(frame, hidden)
        rows.append((float(c[0]), int(status[0])))
    return rows


def read_commands(path: Path):
    with open(path) as f:
        return [(float(r["curvature_per_m"]), int(r["status"])) for r in csv.DictReader(f)]


def run_runtime(binary: Path, model: Path, frames: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), str(model), str(frames), "--no-pace", "--quiet", "--warmup", "3",
                           "--device", "cpu", "--out", str(out), *extra], capture_output=True, text=True, timeout=300)


def test_cpp_runtime_matches_python_on_a_ppm_folder(runtime, exported):
    done = run_runtime(runtime, exported["ts"], exported["ppm"], exported["dir"] / "cpp.csv")
    assert done.returncode == 0, done.stderr
    # the runtime freezes the module and uses oneDNN convolutions; Python's reference is the portable file
    got, want = read_commands(exported["dir"] / "cpp.csv"), python_reference(exported["ts"], exported["frames"], False)
    assert [s for _, s in got] == [s for _, s in want] and got[17][1] == 2 and got[17][0] == got[16][0]
    assert max(abs(a - b) for (a, _), (b, _) in zip(got, want)) * 1000 < 1e-6  # 1/km
    assert "latency p50" in done.stderr and "p99" in done.stderr and "family ncp_ltc" in done.stderr


def test_cpp_runtime_reads_raw_frames_and_rejects_a_wrong_size(runtime, exported):
    done = run_runtime(runtime, exported["ts"], exported["raw"], exported["dir"] / "raw.csv")
    assert done.returncode == 0, done.stderr
    assert read_commands(exported["dir"] / "raw.csv") == read_commands(exported["dir"] / "cpp.csv")
    short = exported["dir"] / "short.rgb"
    short.write_bytes(exported["raw"].read_bytes()[: CAMERA[0] * CAMERA[1] * 3 - 5])
    done = run_runtime(runtime, exported["ts"], short, exported["dir"] / "x.csv")
    assert done.returncode == 1 and "not a whole number of 80x208x3 frames" in done.stderr


def test_python_runner_needs_only_torch_and_matches(exported, tmp_path):
    out = tmp_path / "py.csv"
    done = subprocess.run([sys.executable, "-I", str(REPO / "deploy" / "run_policy.py"), str(exported["ts"]),
                           str(exported["ppm"]), "--no-pace", "--quiet", "--warmup", "2", "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    want = python_reference(exported["ts"], exported["frames"])
    got = read_commands(out)
    assert [s for _, s in got] == [s for _, s in want]
    assert max(abs(a - b) for (a, _), (b, _) in zip(got, want)) < 1e-12


def test_aoti_package_matches_torchscript_and_loads_in_cpp(runtime, exported):
    pt2 = export_policy(exported["ckpt"], exported["dir"] / "policy.pt2", format="aoti")
    want = python_reference(exported["ts"], exported["frames"])
    got = python_reference(pt2, exported["frames"])
    assert [s for _, s in got] == [s for _, s in want]
    assert max(abs(a - b) for (a, _), (b, _) in zip(got, want)) * 1000 < 1e-5
    with pytest.raises(ValueError, match=r"\[1, H, W, 3\] with H, W = 80, 208"):
        load_exported(pt2).step(exported["frames"][:2], torch.zeros(2, load_exported(pt2).hidden_size))
    done = run_runtime(runtime, pt2, exported["raw"], exported["dir"] / "aoti.csv")
    assert done.returncode == 0, done.stderr
    cpp = read_commands(exported["dir"] / "aoti.csv")
    assert [s for _, s in cpp] == [s for _, s in want]
    assert max(abs(a - b) for (a, _), (b, _) in zip(cpp, want)) * 1000 < 1e-5
