"""Mixed precision on a GPU, end to end in training (skipped without CUDA): the conv head runs in
bf16 (or fp16 with Lightning's 16-mixed scaler), the LTC cell in fp32 through the fused Triton
kernels, parameters and the cell's state stay fp32, and the run learns."""
from __future__ import annotations

from pathlib import Path
from typing import List

import lightning.pytorch as pl
import pytest
import torch

from drive.data.datamodule import DriveDataModule
from drive.sim.record import simulate
from drive.sim.render import Camera
from drive.train.module import PolicyModule

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

SMALL = Camera.default(width=100, height=40)


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("amp")
    simulate(root / "train", minutes=1.0, seed=3, fps=10.0, camera=SMALL, recording_minutes=0.5,
             conditions=["summer", "noon", "marked"])
    return root


class _Record(pl.Callback):
    """Loss per step; the dtypes the head's first conv and the cell produce on the first batch."""

    def __init__(self) -> None:
        self.losses: List[float] = []
        self.dtypes: dict = {}

    def on_train_start(self, trainer, module) -> None:
        conv = next(m for m in module.policy.head.modules() if isinstance(m, torch.nn.Conv2d))
        conv.register_forward_hook(lambda m, i, o: self.dtypes.setdefault("head", o.dtype))
        module.policy.rnn.register_forward_hook(lambda m, i, o: self.dtypes.setdefault("cell", o[0].dtype))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


@pytest.mark.parametrize("head_precision,trainer_precision,dtype", [
    ("bf16", "32-true", torch.bfloat16), ("fp16", "16-mixed", torch.float16)], ids=["bf16", "fp16"])
def test_mixed_precision_head_fp32_cell_trains_on_gpu(logs, tmp_path, monkeypatch, head_precision,
                                                      trainer_precision, dtype):
    import drive.nn.kernels as kernels

    calls = []
    original = kernels.ltc_fused_solve
    monkeypatch.setattr(kernels, "ltc_fused_solve", lambda *a: calls.append(a[1].dtype) or original(*a))
    pl.seed_everything(0)
    module = PolicyModule(family="ncp_ltc", input_hw=(40, 100), lr=3e-3, head_precision=head_precision)
    dm = DriveDataModule(train=[str(logs / "train")], image_size=[40, 100], seq_len=16, stride=8, batch_size=8,
                         num_workers=0, cache_dir=str(tmp_path / "cache"), curve_factor=0.0)
    record = _Record()
    trainer = pl.Trainer(default_root_dir=tmp_path, accelerator="gpu", devices=1, precision=trainer_precision,
                         max_steps=60, logger=False, enable_progress_bar=False, enable_checkpointing=False,
                         gradient_clip_val=10.0, callbacks=[record], enable_model_summary=False)
    trainer.fit(module, datamodule=dm)
    assert record.dtypes["head"] == dtype  # the conv head ran in reduced precision
    assert record.dtypes["cell"] == torch.float32  # the cell did not
    assert calls and set(calls) == {torch.float32}  # through the fused kernels, in fp32
    assert all(p.dtype == torch.float32 for p in module.parameters())
    assert all(torch.isfinite(torch.tensor(record.losses)))
    first, last = sum(record.losses[:10]) / 10, sum(record.losses[-10:]) / 10
    assert last < 0.6 * first, (first, last)  # it learns
