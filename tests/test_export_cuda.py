"""drive.export on a GPU (skipped without CUDA): the CUDA file matches CPU eager within 1e-4 (fp32),
and the fp16 conv head stays within a stated tolerance while the cell and hidden stay fp32."""

from __future__ import annotations

import pytest
import torch

from drive.checkpoint import load_policy, policy_meta, save_policy
from drive.data.preprocess import Preprocessing
from drive.export import build_deployed, export_policy, load_exported
from drive.nn.families import build_policy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

FP16_STATE_ATOL = 5e-3  # LTC state in [-1, 1]; fp16 features carry ~1e-3 relative error


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    torch.manual_seed(0)
    policy = build_policy("ncp_ltc", frame_period_s=1 / 30)
    meta = policy_meta(
        policy, Preprocessing(size=(78, 200), crop=(10, 130, 20, 300)), 30.0, "ncp_ltc", frame_size=[160, 320]
    )
    return save_policy(tmp_path_factory.mktemp("cuda") / "p.ckpt", policy, meta)


def frames(n: int) -> torch.Tensor:
    return torch.randint(
        0, 256, (n, 160, 320, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )


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


def test_cuda_graph_stepping_is_bitwise_plain_stepping_over_1000_steps(ckpt, tmp_path):
    """The default on CUDA: the step captured once per batch size and replayed (static frame and
    hidden buffers, outputs copied out) gives bitwise the outputs of plain stepping."""
    path = export_policy(ckpt, tmp_path / "p.ts", device="cuda")
    graphed = load_exported(path, device="cuda")
    plain = load_exported(path, device="cuda", cuda_graph=False)
    assert graphed.cuda_graph and not plain.cuda_graph
    xs = frames(50).cuda()
    warm = plain.initial_state(1)
    for x in xs[:5]:  # plain stepping past TorchScript's profiling runs, as the capture's warm-up does
        plain.step(x, warm)
    h_graph, h_plain = graphed.initial_state(1), plain.initial_state(1)
    for i in range(1000):
        x = xs[i % len(xs)]
        if i % 97 == 13:
            x = torch.zeros_like(x)  # black frames: the held-command branch, inside the graph
        c_g, h_graph, s_g = graphed.step(x, h_graph)
        c_p, h_plain, s_p = plain.step(x, h_plain)
        assert torch.equal(c_g, c_p) and torch.equal(h_graph, h_plain) and torch.equal(s_g, s_p), i
    assert graphed.graph_batches() == [1] and not graphed.graph_failures
    # outputs are copies: the next replay does not overwrite what the caller holds
    before = h_graph.clone()
    graphed.step(xs[0], h_graph)
    assert torch.equal(before, h_graph)
    # a second batch size gets its own graph; host (CPU) frames are copied in
    c2, h2, _ = graphed.step(frames(2), graphed.initial_state(2))
    for _ in range(5):  # plain stepping past the profiling runs of the new shape, as the capture did
        c2p, h2p, _ = plain.step(frames(2).cuda(), plain.initial_state(2))
    assert graphed.graph_batches() == [1, 2] and torch.equal(h2, h2p) and torch.equal(c2, c2p)


def test_aoti_cuda_package_loads_and_steps_or_is_refused_before_it_is_written(ckpt, tmp_path):
    """An AOTInductor CUDA package: metadata from the archive, loaded (after a probe process
    loaded and stepped it) and stepped, in a graph, close to the TorchScript file -- or, where this
    torch's loader crashes on its own package (torch 2.11+cu130 on an H100: SIGSEGV), the export
    is refused with that reason and writes nothing."""
    from drive.export import read_metadata

    try:
        pt2 = export_policy(ckpt, tmp_path / "p.pt2", format="aoti", device="cuda")
    except ValueError as err:
        message = str(err)
        print("refused:", message)  # shown by pytest -rP
        assert message.startswith(f"{tmp_path / 'p.pt2'}: not written: the AOTInductor CUDA package")
        assert "probe process failed" in message and "--format torchscript" in message
        assert "\n" not in message and list(tmp_path.iterdir()) == []
        return
    assert read_metadata(pt2)["device"] == "cuda"
    aoti = load_exported(pt2)
    ts = load_exported(export_policy(ckpt, tmp_path / "p.ts", device="cuda"), device="cuda")
    h_a, h_t = aoti.initial_state(1), ts.initial_state(1)
    for x in frames(20).cuda():
        c_a, h_a, _ = aoti.step(x, h_a)
        c_t, h_t, _ = ts.step(x, h_t)
    assert float((h_a - h_t).abs().max()) < 1e-3
    assert aoti.graph_batches() == [1] or aoti.graph_failures  # captured, or fell back with a reason
