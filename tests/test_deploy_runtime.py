"""drive/deploy/ (shipped with the package: ``drive export --print-runtime-dir``): the C++ runtime
(built here with CMake against the wheel's libtorch, from where the package ships it) and the
Python runner give the same commands as Python on PPM folders, raw dumps and videos (decoded by the
static ffmpeg of imageio-ffmpeg); the AOTInductor package matches TorchScript.

The C++ build takes ~20-60 s and the AOTInductor compile ~60-90 s on a 2-core machine; both run
once per session. Set DRIVE_DEPLOY_BUILD=/some/dir to reuse a build directory between runs. Every
test can run alone: what several compare against is a module-scoped fixture, never a file another
test wrote.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, List, Optional, Tuple

import cv2
import numpy as np
import pytest
import torch

from drive.checkpoint import policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.export import export_policy, load_exported, read_metadata
from drive.export.vehicle import runtime_dir
from drive.nn.families import build_policy

RUNNER = runtime_dir() / "run_policy.py"
CAMERA = (80, 208)  # cropped to 79x204, then resized (antialiased) to 78x200 inside every runtime
FPS = 20.0
BLACK = 17  # a black frame: held and flagged in every runtime
HAS_MKL = torch._C.has_mkl  # before any export: the CPU AOTInductor export flips it while it compiles

Commands = List[Tuple[float, int]]  # (curvature_per_m, status) per frame


pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.skipif(
        shutil.which("cmake") is None or shutil.which("c++") is None, reason="needs cmake and a C++ compiler"
    ),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("deploy")
    torch.manual_seed(3)
    policy = build_policy("ncp_ltc", frame_period_s=1.0 / FPS)
    meta = policy_meta(
        policy, Preprocessing(size=(78, 200), crop=(1, 80, 2, 206)), FPS, "ncp_ltc", frame_size=list(CAMERA)
    )
    ckpt = save_policy(d / "ncp.ckpt", policy, meta)
    g = torch.Generator().manual_seed(1)
    frames = torch.randint(0, 256, (40, *CAMERA, 3), dtype=torch.uint8, generator=g)
    frames[BLACK] = 0
    ppm = d / "frames"
    ppm.mkdir()
    for i, f in enumerate(frames):
        (ppm / f"{i:06d}.ppm").write_bytes(b"P6\n%d %d\n255\n" % (CAMERA[1], CAMERA[0]) + f.numpy().tobytes())
    raw = d / "frames.rgb"
    frames.numpy().tofile(raw)
    return {
        "ckpt": ckpt,
        "ts": export_policy(ckpt, d / "policy.ts"),
        "frames": frames,
        "ppm": ppm,
        "raw": raw,
    }


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> Path:
    build = Path(os.environ.get("DRIVE_DEPLOY_BUILD") or tmp_path_factory.mktemp("build"))
    prefix = torch.utils.cmake_prefix_path
    subprocess.run(
        [
            "cmake",
            "-S",
            str(runtime_dir()),  # where the package ships it, as a user of the wheel builds it
            "-B",
            str(build),
            f"-DCMAKE_PREFIX_PATH={prefix}",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    done = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return build / "drive_runtime"


def python_reference(
    path: Path, frames: torch.Tensor, optimize: bool = True, device: str = "cpu"
) -> Commands:
    model = load_exported(path, optimize=optimize, device=device)
    hidden, rows = model.initial_state(), []
    for frame in frames:
        c, hidden, status = model.step(frame.to(device), hidden)
        rows.append((float(c[0]), int(status[0])))
    return rows


@pytest.fixture(scope="module")
def portable_reference(exported) -> Commands:
    """Python's commands from the file as saved (no load-time specialisation)."""
    return python_reference(exported["ts"], exported["frames"], optimize=False)


@pytest.fixture(scope="module")
def reference(exported) -> Commands:
    """Python's commands from the file specialised at load, as load_exported and run_policy.py run it."""
    return python_reference(exported["ts"], exported["frames"])


def read_commands(path: Path) -> Commands:
    with open(path) as f:
        return [(float(r["curvature_per_m"]), int(r["status"])) for r in csv.DictReader(f)]


def run_runtime(
    binary: Path, model: Path, frames: Optional[Path], out: Path, *extra: str, device: str = "cpu", **run: Any
) -> subprocess.CompletedProcess:
    """drive_runtime on FRAMES (None: the source is in ``extra``, e.g. --video); ``run``: e.g. env, stdin."""
    source = [str(frames)] if frames is not None else []
    return subprocess.run(
        [
            str(binary),
            str(model),
            *source,
            "--no-pace",
            "--quiet",
            "--warmup",
            "3",
            "--device",
            device,
            "--out",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        **run,
    )


def assert_same_commands(got: Commands, want: Commands, tol_per_km: float) -> None:
    assert len(got) == len(want) and [s for _, s in got] == [s for _, s in want]
    assert max(abs(a - b) for (a, _), (b, _) in zip(got, want)) * 1000 < tol_per_km  # 1/km


@pytest.fixture(scope="module")
def cpp_ppm(runtime, exported, tmp_path_factory) -> Tuple[subprocess.CompletedProcess, Commands]:
    """The C++ runtime run once on the PPM folder: (its process, its commands)."""
    out = tmp_path_factory.mktemp("cpp_ppm") / "cpp.csv"
    done = run_runtime(runtime, exported["ts"], exported["ppm"], out)
    assert done.returncode == 0, done.stderr
    return done, read_commands(out)


@pytest.mark.slow
@pytest.mark.kernels  # another process, libtorch frozen with oneDNN convolutions, vs Python
def test_cpp_runtime_matches_python_on_a_ppm_folder(cpp_ppm, portable_reference):
    done, got = cpp_ppm
    # the runtime freezes the module and uses oneDNN convolutions; Python's reference is the portable file
    assert_same_commands(got, portable_reference, 1e-6)
    assert got[BLACK][1] == 2 and got[BLACK][0] == got[BLACK - 1][0]
    assert "latency p50" in done.stderr and "p99" in done.stderr and "family ncp_ltc" in done.stderr


@pytest.mark.slow
def test_cpp_runtime_reads_raw_frames_and_rejects_a_wrong_size(runtime, exported, cpp_ppm, tmp_path):
    done = run_runtime(runtime, exported["ts"], exported["raw"], tmp_path / "raw.csv")
    assert done.returncode == 0, done.stderr
    assert read_commands(tmp_path / "raw.csv") == cpp_ppm[1]
    # a file's partial frame is refused before the first step, naming the file
    frame_bytes = CAMERA[0] * CAMERA[1] * 3
    short = tmp_path / "short.rgb"
    short.write_bytes(exported["raw"].read_bytes()[: frame_bytes - 5])
    done = run_runtime(runtime, exported["ts"], short, tmp_path / "x.csv")
    assert (
        done.returncode == 1
        and f"{short}: 49915 bytes is not a whole number of 80x208x3 frames" in done.stderr
    )
    # a pipe's when it comes, by the reader a video's ffmpeg pipe goes through too
    short.write_bytes(exported["raw"].read_bytes()[: 2 * frame_bytes + 1000])
    with open(short, "rb") as f:
        camera = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
        done = run_runtime(
            runtime, exported["ts"], Path("/dev/stdin"), tmp_path / "pipe.csv", stdin=camera.stdout
        )
        camera.stdout.close()
        camera.wait()
    assert done.returncode == 1, done.stderr
    assert (
        "/dev/stdin: 100840 bytes is not a whole number of 80x208x3 frames: the stream ended mid-frame"
        in done.stderr
    )
    assert read_commands(tmp_path / "pipe.csv") == cpp_ppm[1][:2]


def road_scene(n: int, size: Tuple[int, int]) -> np.ndarray:
    """uint8 RGB ``[n, H, W, 3]``: a smooth moving pattern (what a video codec keeps well) whose
    channels differ, so a decoder that swapped them would be far off."""
    h, w = size
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    base = 0.5 + 0.3 * np.sin(6 * xx + 3 * yy + 0.2 * np.arange(n).reshape(n, 1, 1))
    return (np.stack([base, 0.8 * base, 1 - base], axis=-1) * 255).round().astype(np.uint8)


def write_mp4(path: Path, frames: np.ndarray) -> Path:
    """An MPEG-4 (mp4v) file of RGB frames, written by OpenCV as a camera recorder might."""
    writer = cv2.VideoWriter(
        str(path), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (frames.shape[2], frames.shape[1])
    )
    assert writer.isOpened(), "OpenCV cannot write mp4v here"
    for frame in frames:
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


@pytest.fixture(scope="module")
def ffmpeg() -> str:
    """The static ffmpeg binary of the imageio-ffmpeg wheel (a dev dependency): no system ffmpeg needed.
    Imported here, so that a machine without the wheel (the lent GPU machine) still runs the rest."""
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


@pytest.mark.slow
def test_cpp_runtime_decodes_a_video_with_ffmpeg(runtime, exported, ffmpeg, tmp_path):
    scene = road_scene(40, CAMERA)
    scene[BLACK] = 0
    video = write_mp4(tmp_path / "drive.mp4", scene)
    # the frames the runtime gets: the same ffmpeg binary, decoding to raw RGB in Python
    raw = subprocess.run(
        [ffmpeg, "-v", "error", "-i", str(video), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
        capture_output=True,
        check=True,
    ).stdout
    decoded = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(-1, *CAMERA, 3)
    assert decoded.shape[0] == len(scene)
    # lossy, but the scene in RGB order (swapped channels would be ~100 levels off on average)
    assert float((decoded.float() - torch.from_numpy(scene).float()).abs().mean()) < 8

    done = run_runtime(
        runtime, exported["ts"], None, tmp_path / "video.csv", "--video", str(video), "--ffmpeg", ffmpeg
    )
    assert done.returncode == 0, done.stderr
    got = read_commands(tmp_path / "video.csv")
    assert_same_commands(got, python_reference(exported["ts"], decoded, optimize=False), 1e-6)
    assert got[BLACK][1] == 2 and "40 steps" in done.stderr


@pytest.mark.slow
def test_cpp_runtime_refuses_a_video_of_another_size_or_without_ffmpeg(runtime, exported, ffmpeg, tmp_path):
    video = write_mp4(tmp_path / "small.mp4", road_scene(3, (64, CAMERA[1])))
    out = tmp_path / "x.csv"
    done = run_runtime(runtime, exported["ts"], None, out, "--video", str(video), "--ffmpeg", ffmpeg)
    assert done.returncode == 1
    assert (
        f"{video}: video frames are 208x64 (width x height), the model expects the camera's 208x80"
        in done.stderr
    )
    done = run_runtime(runtime, exported["ts"], None, out, "--video", str(video), env={"PATH": str(tmp_path)})
    assert done.returncode == 1 and "--ffmpeg ffmpeg: not found on PATH" in done.stderr
    missing = tmp_path / "bin" / "ffmpeg"
    done = run_runtime(runtime, exported["ts"], None, out, "--video", str(video), "--ffmpeg", str(missing))
    assert done.returncode == 1 and f"--ffmpeg {missing}: no such executable" in done.stderr


@pytest.mark.kernels  # another process, without this one's environment
def test_python_runner_needs_only_torch_and_matches(exported, reference, tmp_path):
    """The runner runs in an interpreter that cannot import drive: without `site` (so no .pth file
    and no editable-install finder), the venv's site-packages on PYTHONPATH for torch, from an
    empty folder. That same process first shows `import drive` fails, then runs the runner."""
    out = tmp_path / "py.csv"
    args = [
        str(exported["ts"]),
        str(exported["ppm"]),
        "--device",
        "cpu",
        "--no-pace",
        "--quiet",
        "--warmup",
        "2",
        "--out",
        str(out),
    ]  # cpu: the reference ran on the CPU (auto would pick a GPU where there is one)
    script = f"""
import runpy, sys
try:
    import drive
except ModuleNotFoundError:
    pass
else:
    sys.exit('drive is importable here: ' + drive.__file__)
sys.argv = [{str(RUNNER)!r}, *{args!r}]
runpy.run_path(sys.argv[0], run_name='__main__')
"""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(torch.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-S", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    # Another process, and one that sees none of this process's environment: with the kernel caps
    # of the CI step (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2) here, the runner still runs
    # AVX-512 kernels and its commands differ by 1.5e-8 1/km; with the same kernels, bitwise.
    assert_same_commands(read_commands(out), reference, 1e-6)


def load_runner():
    """drive/deploy/run_policy.py as a module (it is a script, not part of the drive package)."""
    spec = importlib.util.spec_from_file_location("run_policy", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_python_runner_names_bad_input(exported, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(exported["ts"]), str(empty), "--no-pace", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and f"{empty}: no frames" in done.stderr and "Traceback" not in done.stderr
    runner = load_runner()
    odd = tmp_path / "odd"
    odd.mkdir()
    runner.write_ppm(odd / "000000.ppm", torch.zeros(CAMERA[0] - 2, CAMERA[1], 3, dtype=torch.uint8))
    with pytest.raises(
        SystemExit, match=r"000000.ppm: frame is 208x78, the model expects the camera's 208x80"
    ):
        list(runner.frames_from(odd, CAMERA))
    model = runner.Model(exported["ts"], torch.device("cpu"))
    frame, size = exported["frames"][:1], model.hidden_size
    with pytest.raises(
        ValueError, match=rf"hidden must be float32 \[1, {size}\].*got torch.float32 \[1, {size - 1}\]"
    ):
        model.step(frame, torch.zeros(1, size - 1))
    with pytest.raises(ValueError, match=rf"hidden must be float32 \[1, {size}\].*got torch.float64"):
        model.step(frame, torch.zeros(1, size, dtype=torch.float64))
    assert model.step(frame, model.initial_state())[0].shape == (1,)


@pytest.fixture(scope="module")
def cpu_aoti(exported, tmp_path_factory) -> Path:
    return export_policy(exported["ckpt"], tmp_path_factory.mktemp("aoti") / "policy.pt2", format="aoti")


@pytest.mark.slow
def test_the_probe_process_steps_a_sound_package_and_reports_how_a_bad_one_failed(cpu_aoti, tmp_path):
    """The child process that loads and steps a package before anyone risks their own (loading
    CUDA packages; refusing a CUDA export whose package the loader crashes on): a sound package
    passes, a damaged one comes back as the child's last error line, and the answer is kept per
    file (path, size, mtime)."""
    from drive.export.aoti import _PROBED, probe_failure

    assert probe_failure(cpu_aoti) is None
    cut = tmp_path / "cut.pt2"
    cut.write_bytes(cpu_aoti.read_bytes()[: cpu_aoti.stat().st_size // 2])
    failure = probe_failure(cut)
    assert failure is not None and failure.startswith("exit 1: ValueError: ") and str(cut) in failure, failure
    assert any(k[0] == str(cut.resolve()) and v == failure for k, v in _PROBED.items())


@pytest.mark.slow
def test_cpu_aoti_package_is_frozen_with_prepacked_convs_and_blas_matmuls(cpu_aoti):
    """The CPU package's generated C++ (Inductor stores it in the package): weights frozen, the five
    convolutions prepacked for oneDNN with ReLU fused, every matmul a plain BLAS ``addmm`` (oneDNN's
    per-call setup made the cell's tiny products cost more than the prepacked convs saved)."""
    with zipfile.ZipFile(cpu_aoti) as z:
        wrappers = [n for n in z.namelist() if n.endswith(".wrapper.cpp")]
        assert len(wrappers) == 1, z.namelist()
        code = z.read(wrappers[0]).decode()
    assert code.count("aoti_torch_cpu_mkldnn__convolution_pointwise(") == 5
    assert "_linear_pointwise" not in code and "_mkl_linear" not in code
    assert code.count("aoti_torch_cpu_addmm_out(") >= 2  # the head's dense layer and the cell's products
    assert torch._C.has_mkl == HAS_MKL  # restored after the export


@pytest.mark.slow
def test_aoti_package_matches_torchscript_and_loads_in_cpp(runtime, exported, reference, cpu_aoti, tmp_path):
    pt2 = cpu_aoti
    assert_same_commands(python_reference(pt2, exported["frames"]), reference, 1e-5)
    # Python steps through the loader's flat call (no pytree specs parsed per step), same outputs
    model = load_exported(pt2)
    assert model._run is not None
    frame, hidden = exported["frames"][:1], model.initial_state()
    for fast, wrapped in zip(model.step(frame, hidden), model._module(frame, hidden)):
        assert torch.equal(fast, wrapped)
    # the torch-only Python runner steps the package the same way
    runner, rows = load_runner().Model(pt2, torch.device("cpu")), []
    hidden = runner.initial_state()
    for frame in exported["frames"]:
        c, hidden, status = runner.step(frame.unsqueeze(0), hidden)
        rows.append((float(c[0]), int(status[0])))
    assert_same_commands(rows, reference, 1e-5)
    with pytest.raises(ValueError, match=r"\[1, H, W, 3\] with H, W = 80, 208"):
        load_exported(pt2).step(exported["frames"][:2], torch.zeros(2, load_exported(pt2).hidden_size))
    done = run_runtime(runtime, pt2, exported["raw"], tmp_path / "aoti.csv")
    assert done.returncode == 0, done.stderr
    assert_same_commands(read_commands(tmp_path / "aoti.csv"), reference, 1e-5)
    # the package itself accepts any shape; the runtime refuses a frame of another size, naming it
    odd = tmp_path / "odd"
    odd.mkdir()
    for i, height in enumerate((CAMERA[0], CAMERA[0] - 2)):
        (odd / f"{i:06d}.ppm").write_bytes(
            b"P6\n%d %d\n255\n" % (CAMERA[1], height) + bytes(CAMERA[1] * height * 3)
        )
    done = run_runtime(runtime, pt2, odd, tmp_path / "odd.csv")
    assert done.returncode == 1
    assert f"{odd / '000001.ppm'}: frame is 208x78, the model expects the camera's 208x80" in done.stderr
    assert len(read_commands(tmp_path / "odd.csv")) == 1  # the good frame before it was stepped


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("half", [False, True], ids=["fp32", "fp16"])
def test_cpp_runtime_on_cuda_matches_python_on_cuda(runtime, exported, tmp_path, half):
    """The file exported for CUDA (fp16 conv head on request) steps on the GPU in the C++ runtime
    with Python's commands on the same GPU, and reports its device, precision and latency."""
    path = export_policy(exported["ckpt"], tmp_path / "cuda.ts", device="cuda", half=half)
    want = python_reference(path, exported["frames"], device="cuda")
    done = run_runtime(runtime, path, exported["ppm"], tmp_path / "cuda.csv", device="cuda")
    assert done.returncode == 0, done.stderr
    # same file, same GPU, same kernels: only cuDNN's algorithm choice may differ between processes
    assert_same_commands(read_commands(tmp_path / "cuda.csv"), want, 1e-3)
    assert "cuda" in done.stderr and ("fp16" if half else "fp32") in done.stderr
    # the default on CUDA: the step captured in a CUDA graph (at::cuda::CUDAGraph); plain stepping
    # in another process gives the same commands (up to cuDNN's per-process algorithm choice)
    assert "# stepping in a CUDA graph" in done.stderr, done.stderr
    plain = run_runtime(
        runtime, path, exported["ppm"], tmp_path / "plain.csv", "--no-cuda-graph", device="cuda"
    )
    assert plain.returncode == 0 and "CUDA graph" not in plain.stderr, plain.stderr
    assert_same_commands(read_commands(tmp_path / "plain.csv"), read_commands(tmp_path / "cuda.csv"), 1e-3)
    for run in (done, plain):  # shown by `pytest -rP`
        print(
            "graph" if run is done else "plain",
            *(line for line in run.stderr.splitlines() if "latency p50" in line),
        )


def _edited_package(src: Path, dst: Path, **changes: str) -> Path:
    """A copy of a real package with entries of its compiled-in string map changed (what a package
    built by another torch, for another device or CPU would carry)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith("_metadata.json") and "/aotinductor/" in item.filename:
                strings = json.loads(data)
                meta = json.loads(strings["metadata_json"])
                for key, value in changes.items():
                    if key in strings and key.startswith("AOTI_"):
                        strings[key] = value
                    elif key in meta:
                        meta[key] = value
                strings["metadata_json"] = json.dumps(meta, sort_keys=True)
                data = json.dumps(strings).encode()
            zout.writestr(item, data)
    return dst


@pytest.mark.slow
def test_aoti_metadata_is_read_from_the_archive_and_unrunnable_packages_are_refused(cpu_aoti, tmp_path):
    # metadata in a fresh process: the package's loader (native code) is never imported or run
    script = (
        f"import sys; from drive.export import read_metadata; m = read_metadata({str(cpu_aoti)!r}); "
        "assert m['format'] == 'aoti' and m['device'] == 'cpu', m; "
        "assert 'torch._inductor.package' not in sys.modules, 'the package loader was imported'; print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    from drive.export.runtime import check_aoti_loadable, read_aoti_strings

    strings = read_aoti_strings(cpu_aoti)
    assert strings["AOTI_DEVICE_KEY"] == "cpu" and json.loads(strings["metadata_json"])["format"] == "aoti"
    check_aoti_loadable(cpu_aoti)  # this package runs here
    other_torch = _edited_package(cpu_aoti, tmp_path / "old.pt2", torch_version="2.11.0")
    with pytest.raises(
        ValueError, match=r"old.pt2: AOTInductor package compiled by torch 2.11.0, this is torch"
    ):
        load_exported(other_torch)
    other_isa = _edited_package(cpu_aoti, tmp_path / "isa.pt2", AOTI_CPU_ISA="NEON")
    with pytest.raises(
        ValueError, match=r"isa.pt2: .*compiled for the NEON instruction set, which this CPU lacks"
    ):
        load_exported(other_isa)
    if not torch.cuda.is_available():
        gpu = _edited_package(cpu_aoti, tmp_path / "gpu.pt2", AOTI_DEVICE_KEY="cuda", device="cuda")
        with pytest.raises(
            ValueError, match=r"gpu.pt2: AOTInductor package compiled for CUDA, but torch sees no CUDA"
        ):
            load_exported(gpu)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "drive.cli",
                "evaluate",
                "--policy",
                str(gpu),
                "--km",
                "0.1",
                "--out",
                str(tmp_path / "eval"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "gpu.pt2: AOTInductor package compiled for CUDA, but torch sees no CUDA device" in done.stderr
    not_zip = tmp_path / "junk.pt2"
    not_zip.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"junk.pt2: cannot load: not a policy exported by drive"):
        read_metadata(not_zip)
