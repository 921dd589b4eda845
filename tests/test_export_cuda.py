"""drive.export on a GPU (skipped without CUDA): the CUDA file matches CPU eager within 1e-4 (fp32),
and the fp16 conv head stays within a stated tolerance while the cell and hidden stay fp32."""
from __future__ import annotations

import pytest
import torch

from drive.export import build_deployed, export_policy, load_exported
from drive.policy_io import load_policy, policy_meta, save_policy
from drive.preprocess import Preprocessing
from drive.train.families import build_policy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

FP16_STATE_ATOL = 5e-3  # LTC state in [-1, 1]; fp16 features carry ~1e-3 relative error


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    policy = build_policy("ncp_ltc", frame_period_s=1 / 30)
    meta = policy_meta(policy, Preprocessing(size=(78, 200), crop=(10, 130, 20, 300)), 30.0, "ncp_ltc",
                       frame_size=[160, 320])
    return save_policy(tmp_path_factory.mktemp("cuda") / "p.ckpt", policy, meta)


def frames(n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, 160, 320, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def run(step, hidden, xs):
    out = []
    for x in xs:
        c, hidden, _ = step(x, hidden)
        out.append((float(c[0]) * 1000, hidden.cpu()))
    return out


@pytest.mark.parametrize("half,atol", [(False, 1e-4), (True, FP16_STATE_ATOL)], ids=["fp32", "fp16"])
def test_cuda_file_matches_cpu_eager_over_300_steps(ckpt, tmp_path, half, atol, monkeypatch):
    # fp32 means fp32: cuDNN would otherwise run the convolutions in TF32 (10-bit mantissa)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    path = export_policy(ckpt, tmp_path / "p.ts", device="cuda", half=half)
    gpu = load_exported(path, device="cuda")
    cpu = build_deployed(*load_policy(ckpt))
    xs = frames(300)
    with torch.no_grad():
        want = run(cpu.step_with_status, cpu.initial_state(1), xs)
    got = run(gpu.step, gpu.initial_state(), [x.cuda() for x in xs])
    assert got[-1][1].dtype == torch.float32
    worst_state = max(float((g[1] - w[1]).abs().max()) for g, w in zip(got, want))
    worst_cmd = max(abs(g[0] - w[0]) for g, w in zip(got, want))  # 1/km
    assert worst_state < atol and worst_cmd < atol, (worst_state, worst_cmd)
