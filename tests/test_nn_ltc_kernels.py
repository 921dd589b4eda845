"""The LTC's fused Triton kernels (drive/nn/ltc/kernels/) against the TorchScript solver.

On a machine without CUDA the kernels run on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1`` before the kernels are defined, ``DRIVE_TRITON=interpret`` to let the LTC
dispatch to them); with CUDA they run compiled on the GPU. Sizes are small: the interpreter
executes every block operation in numpy."""

from __future__ import annotations

import os

import pytest
import torch

from drive.nn import LTC
from drive.nn.wiring import lane_keeping_ncp

CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if CUDA else "cpu")
triton = pytest.importorskip("triton")


@pytest.fixture(scope="module", autouse=True)
def kernels():
    """The kernel module; without a GPU, tests/conftest.py has set TRITON_INTERPRET=1 before
    triton was first imported (Triton reads it when it defines its language and each kernel)."""
    if not CUDA and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and TRITON_INTERPRET is not 1: the kernels cannot run here")
    import drive.nn.ltc.kernels.recurrence as module

    return module


@pytest.fixture
def kernels_on(monkeypatch):
    monkeypatch.setenv("DRIVE_TRITON", "1" if CUDA else "interpret")


def calls_to(name: str, monkeypatch) -> list:
    """A list that grows by one per call of ``drive.nn.ltc.kernels.<name>`` (the real function runs)."""
    import drive.nn.ltc.kernels as kernel_api

    original = getattr(kernel_api, name)
    seen: list = []
    monkeypatch.setattr(kernel_api, name, lambda *a: seen.append(1) or original(*a))
    return seen


def run(m: LTC, x, h0, ts):
    """Outputs and the gradients of every parameter and every input that asks for one."""
    m.zero_grad()
    inputs = {"x": x, "h0": h0, "ts": ts}
    for t in inputs.values():
        if t is not None:
            t.grad = None
    y, h = m(x, h0, ts)
    (y.sin().sum() + h.square().sum()).backward()
    grads = {k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None}
    grads.update({k: t.grad.clone() for k, t in inputs.items() if t is not None and t.grad is not None})
    return y.detach(), h.detach(), grads


@pytest.mark.parametrize("positivity", ["softplus", "clip"])
def test_kernels_match_the_torchscript_solver_forward_and_gradients(kernels_on, monkeypatch, positivity):
    torch.manual_seed(0)
    m = LTC(lane_keeping_ncp(), positivity=positivity).to(DEVICE)
    x = torch.randn(3, 4, m.input_size, device=DEVICE, requires_grad=True)
    ts = (torch.rand(3, 4, device=DEVICE) + 0.5).requires_grad_()  # irregular elapsed time per row and step
    h0 = (torch.randn(3, m.state_size, device=DEVICE) * 0.1).requires_grad_()
    y, h, grads = run(m, x, h0, ts)
    monkeypatch.setenv("DRIVE_TRITON", "0")  # the TorchScript path with the hand-written backward
    y_ref, h_ref, ref = run(m, x, h0, ts)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h, h_ref, rtol=1e-5, atol=1e-6)
    # every parameter (the raw ones: the kernels apply positivity and masks) and x, h0 and ts
    assert set(grads) == set(ref) == {n for n, _ in m.named_parameters()} | {"x", "h0", "ts"}
    for name, g in ref.items():
        scale = float(g.abs().max())
        assert float((grads[name] - g).abs().max()) <= 1e-5 * scale + 1e-12, name


def test_ltc_dispatches_to_the_kernels_only_where_they_apply(kernels_on, monkeypatch):
    from drive.nn.ltc.kernels import use_kernels

    torch.manual_seed(1)
    m = LTC(lane_keeping_ncp()).to(DEVICE)
    x = torch.randn(2, 3, m.input_size, device=DEVICE)

    seen = calls_to("ltc_sequence", monkeypatch)
    y, _ = m(x)
    assert seen == [1] and y.shape == (2, 3, 1)
    import drive.nn.ltc.kernels.recurrence as triton_kernels

    saves = []
    forward = triton_kernels.ltc_forward
    monkeypatch.setattr(triton_kernels, "ltc_forward", lambda *a, **k: saves.append(a[6]) or forward(*a, **k))
    with torch.no_grad():  # inference uses them too, keeping no per-unfold states
        y2, _ = m(x)
    m(x)[0].sum().backward()  # training keeps them
    assert len(seen) == 3 and saves == [False, True]
    torch.testing.assert_close(y, y2)
    assert not use_kernels(x.double(), m.state_size)  # fp64 (gradcheck) keeps the TorchScript path
    assert not use_kernels(x, 65)  # the [N, N] tile must fit in registers
    monkeypatch.setenv("DRIVE_TRITON", "0")
    assert not use_kernels(x, m.state_size)
    # a scripted LTC never sees the kernels and still runs (CPU and deployed modules)
    scripted = torch.jit.script(m.cpu())
    out, _ = scripted(x.cpu())
    torch.testing.assert_close(out, y.cpu(), rtol=1e-5, atol=1e-6)


def test_kernel_handles_batches_that_do_not_fill_a_block_and_long_unfolds(kernels_on, kernels, monkeypatch):
    """Blocks of rows (BLOCK_B > 1) with a ragged last block, a single-unfold solver, and more
    (row, step) pairs than one program of the input kernels takes (ragged too)."""
    torch.manual_seed(2)
    m = LTC(lane_keeping_ncp(), ode_unfolds=1).to(DEVICE)
    x = torch.randn(5, 7, m.input_size, device=DEVICE, requires_grad=True)
    from drive.nn.ltc.kernels.inputs import BLOCK_R

    assert 35 > BLOCK_R and 35 % BLOCK_R
    monkeypatch.setattr(kernels, "_launch_config", lambda batch, n: (32, 2, 2))
    y, h, grads = run(m, x, None, None)
    monkeypatch.setenv("DRIVE_TRITON", "0")
    y_ref, h_ref, ref = run(m, x, None, None)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    for name, g in ref.items():
        assert float((grads[name] - g).abs().max()) <= 1e-5 * float(g.abs().max()) + 1e-12, name


def test_the_unfold_count_is_a_runtime_argument(kernels):
    """Unfolds as a compile-time constant unrolled the loop: one kernel per ``ode_unfolds``, and the
    256 unfolds bench_closed_form uses as the converged ODE took ~2 minutes to compile (sm_90, here).
    As a runtime loop bound any count is the same kernel, compiled once in about a second."""
    import inspect

    for kernel in (kernels._ltc_fwd_kernel, kernels._ltc_bwd_kernel):
        fn = getattr(kernel, "fn", kernel)  # the Python function (jitted, or under the interpreter)
        params = inspect.signature(fn).parameters
        assert "U" in params and "constexpr" not in str(params["U"].annotation), params["U"]
        assert "constexpr" in str(params["N"].annotation)  # what the check tells apart


COMPILE = r"""
import json, pathlib, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import drive.nn.ltc.kernels.inputs as I
import drive.nn.ltc.kernels.recurrence as K

ptxas = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
report = []

def compile(kernel, warps, **consts):
    names = kernel.arg_names  # pointers end in _ptr; B, L, U, F are ints, UF and eps floats
    kinds = {"B": "i32", "L": "i32", "U": "i32", "F": "i32", "UF": "fp32", "eps": "fp32"}
    signature = {n: "*fp32" if n.endswith("_ptr") else kinds.get(n, "constexpr") for n in names}
    constexprs = {(names.index(k),): v for k, v in consts.items()}
    src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    with tempfile.TemporaryDirectory() as d:
        ptx = pathlib.Path(d) / "k.ptx"
        ptx.write_text(compiled.asm["ptx"])
        cmd = [str(ptxas), "-v", "--gpu-name=sm_90a", str(ptx), "-o", str(ptx.with_suffix(".o"))]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    spills = [int(part.split()[0]) for line in out.splitlines() for part in line.split(",")
              if "spill stores" in part]
    report.append({"kernel": kernel.__name__, **consts, "warps": warps, "spill_stores": sum(spills)})

for batch in (16, 256, 2048):
    np_, block_b, warps = K._launch_config(batch, 19)
    rec = dict(N=19, NP=np_, M=1, BLOCK_B=block_b)
    compile(K._ltc_fwd_kernel, warps, **rec, SAVE=True, CLOSED_FORM=False, SOFTPLUS=True)
    compile(K._ltc_fwd_kernel, warps, **rec, SAVE=False, CLOSED_FORM=True, SOFTPLUS=False)
    compile(K._ltc_bwd_kernel, min(8, 2 * warps), **rec, SOFTPLUS=True)
for kernel in (I._inputs_fwd_kernel, I._inputs_bwd_kernel):
    compile(kernel, 4, N=19, NP=32, BLOCK_R=I.BLOCK_R, SOFTPLUS=True)
print(json.dumps(report))
"""


def test_kernels_compile_for_an_h100_without_register_spills(tmp_path):
    """The interpreter accepts code the compiler rejects: compile the kernels (the LTC's input and
    recurrence kernels forward and backward, the closed form's forward) for sm_90 (Triton's
    compiler and the ptxas it ships; no GPU needed) at the launch configurations the NCP uses, and
    require that the state, the synapse tiles and the backward's accumulators fit in registers."""
    import json
    import pathlib
    import subprocess
    import sys

    if not (pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists():
        pytest.skip("this triton has no bundled ptxas")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "DRIVE_TRITON")}
    env["PYTHONPATH"] = str(pathlib.Path(__file__).parents[1])
    env["TRITON_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-c", COMPILE], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report) == 11
    assert all(r["spill_stores"] == 0 for r in report), report


def test_the_kernel_path_launches_a_fixed_number_of_ops_whatever_the_sequence_length(kernels_on, monkeypatch):
    """The point of the kernels on a GPU is launches: a forward+backward must cost a few torch ops
    (on CUDA each a kernel launch, or an allocation) around the six Triton launches, whatever the
    sequence length, where the TorchScript solver costs ~20 per step (4 per unfold) and the ops
    around it ~100 more. Counted at the dispatcher (every aten op of the forward and of autograd's
    backward) for two sequence lengths, on both paths; under the interpreter, the interpreter's own
    copies of the kernels' arguments are not counted (no such copies run on a GPU)."""
    import sys

    from torch.utils._python_dispatch import TorchDispatchMode

    def in_triton() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if f"{os.sep}triton{os.sep}" in frame.f_code.co_filename:
                return True
            frame = frame.f_back
        return False

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not in_triton():
                self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    def ops(m: LTC, length: int) -> list:
        x = torch.randn(4, length, m.input_size, device=DEVICE, requires_grad=True)
        m.zero_grad()
        with Count() as count:
            y, h = m(x)
            (y.sum() + h.sum()).backward()
        return count.ops

    torch.manual_seed(3)
    m = LTC(lane_keeping_ncp()).to(DEVICE)
    fused = [ops(m, 2), ops(m, 12)]
    monkeypatch.setenv("DRIVE_TRITON", "0")
    solver = [len(ops(m, 2)), len(ops(m, 12))]
    assert fused[0] == fused[1], fused
    assert solver[1] - solver[0] >= 10 * 4 * m.ode_unfolds, solver  # grows with every step
    assert solver[0] > 300  # and ~100 ops around the solver
    # ~25 that launch: the loss, input checks, buffers, two sums of partial gradients; the rest
    # are views and autograd taking the gradients over (measured: 65)
    assert len(fused[1]) <= 70 and len(fused[1]) * 6 < solver[0], (fused[1], solver)


@pytest.mark.parametrize("substeps", [1, 3])
@pytest.mark.parametrize("times", ["shared", "per_row", "none"])
def test_closed_form_kernel_matches_the_scripted_kernels(kernels_on, monkeypatch, substeps, times):
    """The closed-form LTC's exact method in the fused forward kernel (inference) against its
    scripted kernels (shared dt: exact_shared; per-row dt and substeps: exact_sequence)."""
    from drive.nn.closed_form import convert

    torch.manual_seed(4)
    ltc = LTC(lane_keeping_ncp()).to(DEVICE)
    cf = convert(ltc, "exact", substeps=substeps)
    x = torch.randn(3, 5, cf.input_size, device=DEVICE)
    ts = {
        "shared": torch.full((3, 5), 0.1, device=DEVICE),
        "per_row": torch.rand(3, 5, device=DEVICE) * 0.3 + 0.02,
        "none": None,
    }[times]
    h0 = torch.randn(3, cf.state_size, device=DEVICE) * 0.2

    seen = calls_to("closed_form_solve", monkeypatch)
    with torch.no_grad():
        y, h = cf(x, h0, ts)
        assert seen == [1]
        monkeypatch.setenv("DRIVE_TRITON", "0")
        y_ref, h_ref = cf(x, h0, ts)
    assert len(seen) == 1
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, h_ref, rtol=1e-5, atol=1e-6)


def test_closed_form_kernel_only_without_gradients_and_for_the_exact_method(kernels_on, monkeypatch):
    from drive.nn.closed_form import convert

    seen = calls_to("closed_form_solve", monkeypatch)
    torch.manual_seed(5)
    ltc = LTC(lane_keeping_ncp()).to(DEVICE)
    x = torch.randn(2, 3, ltc.input_size, device=DEVICE)
    exact, approx = convert(ltc, "exact"), convert(ltc, "approx")
    y, _ = exact(x)  # parameters require grad: the differentiable scripted path
    assert seen == [] and y.requires_grad
    with torch.no_grad():
        approx(x)
        assert seen == []
        exact(x)
        assert seen == [1]
        with pytest.raises(ValueError, match="non-finite"):  # the same checks as the scripted path
            exact(torch.full_like(x, float("nan")))
