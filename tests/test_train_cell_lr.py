"""``--model.cell_lr_scale``: the recurrent cell learns at its own rate, the rest of the policy at
``lr``; at the default scale of 1 the optimizer is the one group it always was (earlier runs resume)."""

from __future__ import annotations

import pytest
import torch

from drive.train.module import PolicyModule

HW = (40, 100)


def _one_step(module: PolicyModule) -> dict:
    """Every parameter's change after one Adam step with a gradient of ones (Adam's first step moves
    each by its group's learning rate)."""
    config = module.configure_optimizers()
    optimizer = config["optimizer"]
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    for p in module.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    return {n: (p.detach() - before[n]).abs().max().item() for n, p in module.named_parameters()}


def test_the_cell_steps_at_its_own_rate_and_the_head_at_lr() -> None:
    module = PolicyModule(family="ncp_ltc", input_hw=HW, lr=1e-3, cell_lr_scale=5.0)
    groups = module.configure_optimizers()["optimizer"].param_groups
    assert [g["lr"] for g in groups] == pytest.approx([1e-3, 5e-3])
    assert sum(len(g["params"]) for g in groups) == len(list(module.parameters()))  # each once
    moved = _one_step(module)
    cell = {f"policy.rnn.{n}" for n, _ in module.policy.rnn.named_parameters()}
    assert cell and len(cell) < len(moved)
    for name, change in moved.items():
        assert change == pytest.approx(5e-3 if name in cell else 1e-3, rel=1e-3), name


def test_the_default_and_a_model_without_a_cell_are_one_group_and_a_bad_scale_is_named() -> None:
    module = PolicyModule(family="lstm", input_hw=HW, lr=1e-3)
    (group,) = module.configure_optimizers()["optimizer"].param_groups
    assert group["lr"] == pytest.approx(1e-3)
    assert all(v == pytest.approx(1e-3, rel=1e-3) for v in _one_step(module).values())
    # a feed-forward model has no cell: one group at lr whatever the scale
    cnn = PolicyModule(family="cnn", input_hw=(78, 200), lr=1e-3, cell_lr_scale=5.0)
    assert [g["lr"] for g in cnn.configure_optimizers()["optimizer"].param_groups] == [1e-3]
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="--model.cell_lr_scale"):
            PolicyModule(family="ncp_ltc", input_hw=HW, cell_lr_scale=bad)
