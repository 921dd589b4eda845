"""Mixed precision on a GPU, end to end in training (skipped without CUDA): the conv head runs in
bf16 (or fp16 with Lightning's 16-mixed scaler), the LTC cell in fp32 through the fused Triton
kernels, parameters stay fp32, and the trained policy drives: the recipe of
tests/test_train_fit.py (same data, steps and threshold), on the GPU in reduced precision."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from drive.checkpoint import load_policy
from drive.data.datamodule import DriveDataModule
from drive.policy_drivers import PolicyDriver
from drive.sim.camera import Camera
from drive.sim.closed_loop import evaluate
from drive.sim.driver import ConstantDriver
from drive.sim.record import simulate
from drive.train.module import PolicyModule

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

FPS = 10.0
SMALL = Camera.default(width=100, height=40)
CONDITIONS = ["summer", "noon", "marked"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("amp")
    simulate(
        root / "train",
        minutes=3.0,
        seed=3,
        fps=FPS,
        camera=SMALL,
        recording_minutes=0.5,
        noise_std=0.015,
        conditions=CONDITIONS,
    )
    simulate(
        root / "val", minutes=0.5, seed=9, fps=FPS, camera=SMALL, recording_minutes=0.5, conditions=CONDITIONS
    )
    return root


class _Record(pl.Callback):
    """The dtypes the head's first conv and the cell produce on the first training batch."""

    def __init__(self) -> None:
        self.dtypes: dict = {}

    def on_train_start(self, trainer, module) -> None:
        conv = next(m for m in module.policy.head.modules() if isinstance(m, torch.nn.Conv2d))

        def head_hook(m, inputs, out) -> None:  # a hook returning a value would replace the output
            self.dtypes.setdefault("head", out.dtype)

        def cell_hook(m, inputs, out) -> None:
            self.dtypes.setdefault("cell", out[0].dtype)

        conv.register_forward_hook(head_hook)
        module.policy.rnn.register_forward_hook(cell_hook)


@pytest.mark.parametrize(
    "head_precision,trainer_precision,dtype",
    [("bf16", "32-true", torch.bfloat16), ("fp16", "16-mixed", torch.float16)],
    ids=["bf16", "fp16"],
)
def test_mixed_precision_head_fp32_cell_trains_a_policy_that_drives(
    logs, tmp_path, monkeypatch, head_precision, trainer_precision, dtype
):
    import drive.nn.ltc.kernels as kernels

    calls = []
    original = kernels.ltc_sequence
    monkeypatch.setattr(kernels, "ltc_sequence", lambda *a: calls.append(a[0].dtype) or original(*a))
    pl.seed_everything(0)
    module = PolicyModule(
        family="ncp_ltc", input_hw=(40, 100), lr=3e-3, lr_schedule="cosine", head_precision=head_precision
    )
    dm = DriveDataModule(
        train=[str(logs / "train")],
        val=[str(logs / "val")],
        image_size=[40, 100],
        seq_len=16,
        stride=4,
        batch_size=16,
        eval_batch_size=8,
        num_workers=0,
        cache_dir=str(tmp_path / "cache"),
        curve_factor=0.0,
    )
    last = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "checkpoints", monitor=None, save_top_k=0, save_last=True
    )
    record = _Record()
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        accelerator="gpu",
        devices=1,
        precision=trainer_precision,
        max_epochs=12,
        logger=False,
        enable_progress_bar=False,
        gradient_clip_val=10.0,
        callbacks=[record, last],
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=dm)
    assert record.dtypes["head"] == dtype  # the conv head ran in reduced precision
    assert record.dtypes["cell"] == torch.float32  # the cell did not
    assert calls and set(calls) == {torch.float32}  # through the fused kernels, in fp32
    assert all(p.dtype == torch.float32 for p in module.parameters())
    policy, meta = load_policy(tmp_path / "checkpoints" / "last.ckpt")
    held_out = dict(seed=1, split="test", fps=FPS, camera=SMALL, conditions=CONDITIONS)
    learned = evaluate(PolicyDriver(policy, meta), 0.5, **held_out).metrics
    constant = evaluate(ConstantDriver(0.0), 0.5, **held_out).metrics
    print(
        head_precision,
        "learned",
        learned["interventions_per_km"],
        "constant",
        constant["interventions_per_km"],
    )
    assert constant["interventions_per_km"] > 20
    assert learned["interventions_per_km"] <= 0.25 * constant["interventions_per_km"]
