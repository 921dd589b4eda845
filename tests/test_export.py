"""drive.export: the TorchScript vehicle file equals its checkpoint, loads without drive, fails safe."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from drive.checkpoint import load_policy, policy_meta, save_policy
from drive.cli import main as drive_main
from drive.data.preprocess import Preprocessing
from drive.export import (
    STATUS,
    DeployedPolicy,
    build_deployed,
    decode_status,
    export_policy,
    load_exported,
    read_metadata,
)
from drive.export.formats import _export_program
from drive.nn.closed_form import convert
from drive.nn.families import build_policy
from drive.nn.policy import Policy
from drive.policy_drivers import PolicyDriver

FPS = 30.0


pytestmark = pytest.mark.usefixtures("one_thread")
CAMERA = (96, 240)  # native frame (H, W): cropped to 90x220, resized to the network's 78x200
CROP = (6, 96, 10, 230)


def make_checkpoint(path: Path, family: str, seed: int = 0, closed_form: bool = False, **opts) -> Path:
    torch.manual_seed(seed)
    units = {"units": 16} if family in ("cfc", "lstm", "ctrnn") else {}  # the families with a units option
    policy = build_policy(family, frame_period_s=1.0 / FPS, **units, **opts)
    norm = getattr(policy.head, "feature_norm", None)
    if isinstance(norm, torch.nn.BatchNorm1d):  # trained-like statistics, so the export's folding shows
        with torch.no_grad():
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
            norm.weight.uniform_(0.5, 1.5)
    if closed_form:
        policy = Policy(policy.head, convert(policy.rnn, "exact"), frame_period_s=1.0 / FPS)
    meta = policy_meta(policy, Preprocessing(size=(78, 200), crop=CROP), FPS, family, frame_size=list(CAMERA))
    return save_policy(path, policy, meta)


def camera_frames(n: int, seed: int = 0) -> torch.Tensor:
    """uint8 [n, H, W, 3]: a moving gradient (a road-like scene changes smoothly) plus noise."""
    g = torch.Generator().manual_seed(seed)
    h, w = CAMERA
    yy, xx = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    t = torch.arange(n, dtype=torch.float32).view(n, 1, 1)
    base = 0.5 + 0.3 * torch.sin(6.0 * xx + 3.0 * yy + 0.1 * t)
    rgb = torch.stack([base, base * 0.8, 1.0 - base], dim=-1) + 0.1 * torch.rand(n, h, w, 3, generator=g)
    return (rgb.clamp(0, 1) * 255).round().to(torch.uint8)


@pytest.fixture(scope="module")
def lstm_file(tmp_path_factory) -> tuple:
    d = tmp_path_factory.mktemp("lstm")
    ckpt = make_checkpoint(d / "lstm.ckpt", "lstm")
    return ckpt, export_policy(ckpt, d / "lstm.ts")


FAMILIES = [
    ("ncp_ltc", {}),
    ("cfc", {}),
    ("cfc", {"wired": True, "mode": "pure"}),
    ("lstm", {}),
    ("ctrnn", {}),
    ("cnn", {}),
    ("ncp_ltc", {"closed_form": True}),
    ("ncp_ltc", {"feature_norm": "batch"}),
    ("ncp_ltc", {"closed_form": True, "feature_norm": "batch"}),
]


@pytest.mark.parametrize(
    "family,opts",
    FAMILIES,
    ids=[f + ("_" + "_".join(map(str, o.values())) if o else "") for f, o in FAMILIES],
)
@pytest.mark.kernels  # the file's TorchScript graph vs the eager policy: other kernels, a tolerance
def test_scripted_file_matches_checkpoint_over_300_steps(tmp_path, family, opts):
    ckpt = make_checkpoint(tmp_path / "p.ckpt", family, **opts)
    exported = load_exported(export_policy(ckpt, tmp_path / "p.ts"))
    reference = PolicyDriver(*load_policy(ckpt))  # the checkpoint as the world drives it
    hidden = exported.initial_state()
    s = exported.meta["state_size"]
    worst_cmd = worst_state = 0.0
    for frame in camera_frames(300):
        obs = type("Obs", (), {"image": frame.numpy(), "dt_s": 1.0 / FPS})
        expected = reference.act(obs)
        command, hidden, status = exported.step(frame, hidden)
        assert int(status[0]) == 0
        worst_cmd = max(worst_cmd, abs(float(command[0]) - expected) * 1000.0)  # in 1/km, the network's units
        worst_state = max(worst_state, float((hidden[0, :s] - reference.hidden[0]).abs().max()) if s else 0.0)
    assert worst_cmd < 1e-5 and worst_state < 1e-5, (worst_cmd, worst_state)


VALUE_READS = ("aten::Float", "aten::Bool", "aten::Int", "aten::item")  # a tensor's value to the host


@pytest.mark.parametrize(
    "family,opts",
    FAMILIES,
    ids=[f + ("_" + "_".join(map(str, o.values())) if o else "") for f, o in FAMILIES],
)
def test_deployed_step_never_reads_a_value_back_mid_step(tmp_path, family, opts):
    """The module guarantees its cell's inputs (finite features and state, dt > 0), so the cell's own
    value checks are off: the frozen step reads no tensor value to the host (a GPU would sync there
    mid-step) and torch.export captures the step without specialising it to the example's values
    (which broke the CUDA AOTInductor export: a float64 sum on the GPU differs between passes)."""
    ckpt = make_checkpoint(tmp_path / "p.ckpt", family, **opts)
    graph = load_exported(export_policy(ckpt, tmp_path / "p.ts"))._module.step_with_status.graph
    reads = [
        n
        for kind in VALUE_READS
        for n in graph.findAllNodes(kind)
        if any(isinstance(i.type(), torch._C.TensorType) for i in n.inputs())
    ]
    assert reads == []
    program = _export_program(build_deployed(*load_policy(ckpt)), torch.device("cpu"))
    scalar_ops = (
        torch.ops.aten.item.default,
        torch.ops.aten._local_scalar_dense.default,
        torch.ops.aten._assert_scalar.default,
    )
    assert [n for n in program.graph.nodes if n.target in scalar_ops] == []


def test_a_hidden_row_with_a_negative_gap_steps_one_frame_period(tmp_path):
    """The cell's dt is at least one frame period whatever the caller's hidden holds (its value
    checks are off inside the module)."""
    module = torch.jit.load(
        str(export_policy(make_checkpoint(tmp_path / "p.ckpt", "cfc"), tmp_path / "p.ts"))
    )
    frame, hidden = camera_frames(1)[0], module.initial_state(1)
    odd = hidden.clone()
    odd[0, -1] = -5.0  # the seconds-since-last-good-frame slot
    assert torch.equal(module.step_with_status(frame, odd)[0], module.step_with_status(frame, hidden)[0])


def test_metadata_is_readable_from_the_file_and_its_methods(lstm_file):
    _, path = lstm_file
    meta = read_metadata(path)
    assert meta["frame_size"] == list(CAMERA) and meta["crop"] == list(CROP)
    assert (
        meta["model_input_size"] == [78, 200]
        and meta["fps"] == FPS
        and meta["dt_s"] == pytest.approx(1 / FPS)
    )
    assert meta["label_units"] == "1/m" and meta["family"] == "lstm" and meta["drive_version"]
    assert meta["hidden_size"] == meta["state_size"] + 3 == 2 * 16 + 3  # LSTM packs h and c
    assert meta["curvature_limit_per_m"] == 0.2 and meta["status_bits"] == STATUS
    module = torch.jit.load(str(path))
    assert json.loads(module.metadata()) == meta
    assert (module.frame_height, module.frame_width, module.hidden_size) == (96, 240, 35)
    assert module.initial_state(4).shape == (4, 35)


def test_file_loads_and_steps_with_torch_alone(lstm_file, tmp_path):
    ckpt, path = lstm_file
    frame = camera_frames(1)[0]
    np.save(tmp_path / "frame.npy", frame.numpy())
    expected, _, _ = load_exported(path).step(frame, load_exported(path).initial_state())
    repo = str(Path(__file__).resolve().parents[1])
    script = f"""
import sys, importlib.abc
sys.path = [p for p in sys.path if p.rstrip('/') != {repo!r} and p not in ('', '.')]
class NoDrive(importlib.abc.MetaPathFinder):  # the editable install's finder must not help either
    def find_spec(self, name, path=None, target=None):
        if name == 'drive' or name.startswith('drive.'):
            raise ImportError('drive is not installed on the vehicle')
sys.meta_path.insert(0, NoDrive())
try:
    import drive
    raise SystemExit('drive importable')
except ImportError:
    pass
import numpy, torch
m = torch.jit.load({str(path)!r})
c, h = m.step(torch.from_numpy(numpy.load({str(tmp_path / "frame.npy")!r})), m.initial_state(1))
assert not any(k == 'drive' or k.startswith('drive.') for k in sys.modules)
print(repr(float(c[0])))
"""
    out = subprocess.run(
        [sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) == pytest.approx(float(expected[0]), abs=1e-9)


def test_file_names_only_the_resize_op_it_runs(lstm_file):
    """A file loads only on a torch that knows every op its code names, run or not. Scripted,
    F.interpolate put its branches for every mode into the file: one exported with torch 2.14 named
    aten::_upsample_lanczos2d_aa, which torch 2.11 (the GPU machines', the oldest drive supports)
    lacks, and did not load there ("Unknown builtin op", seen on an H100). The frame resize calls
    the one op it runs; no other resize op and no F.interpolate body is in the file."""
    import re
    import zipfile

    _, path = lstm_file
    with zipfile.ZipFile(path) as z:
        code = "".join(z.read(n).decode() for n in z.namelist() if "/code/" in n and n.endswith(".py"))
    assert "_upsample_bilinear2d_aa" in code  # the resize is there ...
    assert set(re.findall(r"upsample_\w+", code)) == {"upsample_bilinear2d_aa"}  # ... and alone
    assert "interpolate" not in code


def test_a_file_naming_an_op_this_torch_lacks_says_so_with_both_versions(lstm_file, tmp_path):
    """What a file exported with a newer torch does on an older one (seen: torch 2.14's files on
    torch 2.11): the error names the op and both versions, not "truncated or corrupt". Made here by
    renaming the resize op in a real file's code to one no torch has."""
    import zipfile

    _, path = lstm_file
    edited = tmp_path / "newer.ts"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(edited, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if "/code/" in item.filename and item.filename.endswith(".py"):
                data = data.replace(b"torch._upsample_bilinear2d_aa(", b"torch._upsample_future2d_aa(")
            zout.writestr(item, data)
    with pytest.raises(ValueError) as err:
        load_exported(edited)
    message = str(err.value)
    assert message.startswith(f"{edited}: cannot load: it names the op aten::_upsample_future2d_aa")
    assert f"this torch ({torch.__version__}) lacks" in message
    assert f"exported with torch {torch.__version__.split('+')[0]}" in message  # its metadata
    assert "\n" not in message


def test_wrong_shape_or_dtype_is_a_clear_error(lstm_file):
    module = torch.jit.load(str(lstm_file[1]))
    h = module.initial_state(1)
    with pytest.raises(Exception, match=r"native size.*\[97, 240, 3\]"):
        module.step(torch.zeros(97, 240, 3, dtype=torch.uint8), h)
    with pytest.raises(Exception, match=r"uint8.*float32.*torch.int32"):
        module.step(torch.zeros(96, 240, 3, dtype=torch.int32), h)
    with pytest.raises(Exception, match=r"hidden must be \[B, 35\]"):
        module.step(torch.zeros(96, 240, 3, dtype=torch.uint8), torch.zeros(1, 34))


@pytest.mark.parametrize("bad", ["nan", "black"])
def test_unusable_frame_holds_last_command_and_flags_it(lstm_file, bad):
    module = torch.jit.load(str(lstm_file[1]))
    frames = camera_frames(3)
    c0, h0, st0 = module.step_with_status(frames[0], module.initial_state(1))
    image = (
        torch.full((96, 240, 3), float("nan")) if bad == "nan" else torch.zeros(96, 240, 3, dtype=torch.uint8)
    )
    c1, h1, st1 = module.step_with_status(image, h0)
    assert float(c1) == float(c0) and int(st0) == 0
    assert decode_status(int(st1)) == (["FRAME_NONFINITE"] if bad == "nan" else ["FRAME_BLACK"])
    assert torch.equal(h1[:, :32], h0[:, :32])  # recurrent state kept
    assert float(h1[0, 33]) == int(st1) and float(h1[0, 34]) == pytest.approx(
        1 / FPS
    )  # skipped time remembered
    # the next good frame integrates both periods: same as the policy stepping with dt = 2 / fps
    c2, h2, st2 = module.step_with_status(frames[1], h1)
    policy, meta = load_policy(lstm_file[0])
    x = Preprocessing.from_dict(meta["preprocessing"])(frames[1].numpy()).float() / 255
    with torch.no_grad():
        ref_c, ref_h = policy.step(x, h0[:, :32], torch.tensor([2 / FPS]))
    assert int(st2) == 0 and float(c2) == pytest.approx(float(ref_c), abs=1e-9)
    assert torch.allclose(h2[:, :32], ref_h, atol=1e-6)


def test_float_frames_outside_0_1_are_flagged_and_held_not_driven_white(lstm_file):
    """A 0-255 frame passed as float32 used to clamp to a white frame and drive with status 0 (two
    different frames gave the same command): it is now flagged FRAME_RANGE and the last command
    held, per row; a float frame in [0, 1] still drives exactly like its uint8 frame."""
    module = torch.jit.load(str(lstm_file[1]))
    frames = camera_frames(3)
    c0, h0, st0 = module.step_with_status(frames[0], module.initial_state(1))
    for wrong in (frames[1].float(), frames[2].float(), frames[1].float() / 255.0 * 2.0 - 1.0):
        c1, h1, st1 = module.step_with_status(wrong, h0)
        assert decode_status(int(st1)) == ["FRAME_RANGE"] and int(st0) == 0
        assert float(c1) == float(c0) and torch.equal(h1[:, :32], h0[:, :32])
        assert float(h1[0, 33]) == STATUS["FRAME_RANGE"] and float(h1[0, 34]) == pytest.approx(1 / FPS)
    # in range (rounding slack of half a uint8 step included): the same as the uint8 frame
    as_float = frames[1].float() / 255.0
    as_float[0, 0, 0] = 1.0 + 0.4 / 255.0
    ref = module.step_with_status(frames[1], h0)
    got = module.step_with_status(as_float, h0)
    assert int(got[2]) == 0 and float(got[0]) == float(ref[0])
    # per row: a batch with one bad stream holds only that stream
    batch = torch.stack([frames[1].float() / 255.0, frames[1].float()])
    c, h, st = module.step_with_status(batch, torch.cat([h0, h0]))
    assert (
        st.tolist() == [0, STATUS["FRAME_RANGE"]]
        and float(c[1]) == float(c0)
        and float(c[0]) == float(ref[0])
    )


def test_an_empty_batch_is_a_clear_error(lstm_file):
    module = torch.jit.load(str(lstm_file[1]))
    eager = build_deployed(*load_policy(lstm_file[0]))
    for m in (module, eager):
        for dtype in (torch.uint8, torch.float32):
            with pytest.raises(Exception, match=r"frame batch is empty \(got \[0, 96, 240, 3\]\)"):
                m.step_with_status(torch.zeros(0, 96, 240, 3, dtype=dtype), m.initial_state(0))


def test_command_is_clamped_to_the_curvature_limit(tmp_path):
    ckpt = make_checkpoint(tmp_path / "p.ckpt", "lstm")
    policy, meta = load_policy(ckpt)
    frames = camera_frames(5)
    free = torch.jit.script(build_deployed(policy, meta, curvature_limit_per_m=1e3))
    tight = torch.jit.script(build_deployed(policy, meta, curvature_limit_per_m=1e-5))
    raw, _, _ = free.step_with_status(frames, free.initial_state(5))
    c, _, status = tight.step_with_status(frames, tight.initial_state(5))
    assert (raw.abs() > 1e-5).all()  # untrained outputs are ~1e-4 1/m
    assert torch.equal(c, torch.sign(raw) * torch.tensor(1e-5)) and status.tolist() == [STATUS["CLAMPED"]] * 5


def test_non_finite_hidden_row_is_reset_without_touching_other_rows(lstm_file):
    module = torch.jit.load(str(lstm_file[1]))
    frames = camera_frames(4)
    _, warm, _ = module.step_with_status(frames[:2], module.initial_state(2))
    corrupted = warm.clone()
    corrupted[0, 5] = float("nan")
    c, h, status = module.step_with_status(frames[2:], corrupted)
    fresh_c, fresh_h, _ = module.step_with_status(frames[2:3], module.initial_state(1))
    clean_c, clean_h, _ = module.step_with_status(frames[3:4], warm[1:])
    assert status.tolist() == [STATUS["HIDDEN_RESET"], 0]
    assert float(c[0]) == pytest.approx(float(fresh_c), abs=1e-9) and torch.allclose(
        h[0, :32], fresh_h[0, :32], atol=1e-6
    )
    assert float(c[1]) == pytest.approx(float(clean_c), abs=1e-9) and torch.allclose(
        h[1], clean_h[0], atol=1e-6
    )


def test_non_finite_network_output_holds_and_restarts_the_state(tmp_path):
    ckpt = make_checkpoint(tmp_path / "p.ckpt", "lstm")
    policy, meta = load_policy(ckpt)
    module = torch.jit.script(build_deployed(policy, meta))
    c0, h0, _ = module.step_with_status(camera_frames(1)[0], module.initial_state(1))
    with torch.no_grad():
        policy.head.convs[0].weight.fill_(float("inf"))  # e.g. an fp16 overflow in the head
    broken = torch.jit.script(build_deployed(policy, meta))
    c1, h1, status = broken.step_with_status(camera_frames(2)[1], h0)
    assert decode_status(int(status)) == ["OUTPUT_NONFINITE"] and float(c1) == float(c0)
    assert torch.equal(h1[:, :32], torch.zeros(1, 32)) and torch.isfinite(h1).all()


def test_half_precision_head_keeps_cell_and_hidden_in_fp32(tmp_path):
    ckpt = make_checkpoint(tmp_path / "p.ckpt", "ncp_ltc")
    path = export_policy(ckpt, tmp_path / "half.ts", half=True)
    module = torch.jit.load(str(path))
    assert read_metadata(path)["half"] is True
    named = {
        n: t
        for n, t in list(module.named_parameters()) + list(module.named_buffers())
        if t.is_floating_point()
    }
    assert {t.dtype for n, t in named.items() if n.startswith("head.")} == {torch.float16}
    assert {t.dtype for n, t in named.items() if n.startswith("policy.rnn.")} == {torch.float32}
    full = load_exported(export_policy(ckpt, tmp_path / "full.ts"))
    h_half, h_full = module.initial_state(1), full.initial_state()
    for frame in camera_frames(30):
        c_half, h_half = module.step(frame, h_half)
        c_full, h_full, _ = full.step(frame, h_full)
    assert h_half.dtype == torch.float32
    # fp16 head on CPU: features agree to ~1e-3 relative; the LTC state to a few 1e-3
    assert torch.allclose(h_half, h_full, atol=5e-3), (h_half - h_full).abs().max()


@pytest.mark.parametrize(
    "family", ["ncp_ltc", "cnn"]
)  # NCPConvHead -> DeployedNCPHead; PilotNet -> DeployedHead
def test_building_the_module_leaves_the_callers_policy_untouched(family):
    torch.manual_seed(0)
    policy = build_policy(family, frame_period_s=1.0 / FPS)
    frame = camera_frames(1)[0, :78, :200].permute(2, 0, 1)[None].float() / 255
    hidden, dt = policy.initial_state(1), torch.tensor([1.0 / FPS])
    with torch.no_grad():
        before = policy.eval().step(frame, hidden, dt)
    policy.train()
    tensors = {
        n: (t.detach().clone(), t.stride(), t.requires_grad)
        for n, t in list(policy.named_parameters()) + list(policy.named_buffers())
    }
    head = policy.head
    # half=True converts the deployed head to fp16 and channels-last in place: it must be a copy's
    DeployedPolicy(policy, (78, 200), [], FPS, 0.2, half=True)
    assert policy.head is head and type(head).__name__ != "Identity" and policy.training
    assert all(m.check_values for m in policy.modules() if hasattr(m, "check_values"))  # off in the copy only
    now = {n: t for n, t in list(policy.named_parameters()) + list(policy.named_buffers())}
    assert now.keys() == tensors.keys()
    for name, (value, stride, requires_grad) in tensors.items():
        assert now[name].dtype == value.dtype and now[name].stride() == stride, name
        assert now[name].requires_grad == requires_grad and torch.equal(now[name], value), name
    with torch.no_grad():
        after = policy.eval().step(frame, hidden, dt)
    assert all(torch.equal(a, b) for a, b in zip(before, after))


def test_pickled_payload_checkpoint_is_rejected_without_running_it(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (builtins.open, (str(marker), "w"))

    bad = tmp_path / "bad.ckpt"
    torch.save({"drive": {}, "state_dict": {}, "x": Payload()}, bad)
    with pytest.raises(ValueError, match="refusing to load"):
        export_policy(bad, tmp_path / "out.ts")
    assert drive_main(["export", "--ckpt", str(bad), "--out", str(tmp_path / "out.ts")]) == 2
    assert not marker.exists() and not (tmp_path / "out.ts").exists()


def test_cli_exports_verifies_and_reports(tmp_path, capsys):
    ckpt = make_checkpoint(tmp_path / "p.ckpt", "cfc")
    out = tmp_path / "deploy" / "policy.ts"
    assert drive_main(["export", "--ckpt", str(ckpt), "--out", str(out), "--curvature-limit", "0.1"]) == 0
    text = capsys.readouterr().out
    assert (
        "frames uint8 240x96 RGB at 30 fps" in text
        and "verify: torchscript vs eager" in text
        and "(ok" in text
    )
    assert read_metadata(out)["curvature_limit_per_m"] == 0.1
    assert [p.name for p in out.parent.iterdir()] == ["policy.ts"]  # no temporary left behind


def test_bare_policy_exports_with_network_size_frames_and_its_frame_period(tmp_path):
    torch.manual_seed(0)
    policy = build_policy("cnn", frame_period_s=0.05)
    meta = read_metadata(export_policy(policy, tmp_path / "p.ts"))
    assert meta["frame_size"] == [78, 200] and meta["crop"] is None and meta["fps"] == pytest.approx(20.0)
