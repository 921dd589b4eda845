"""On a CPU the conv head trains on channels-last frames (:attr:`PolicyModule.channels_last`): the
convolutions really see that layout, and the features, loss and every gradient are those of the frames
as they come (NCHW), within float rounding (1e-4 relative: the two layouts sum in other orders)."""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest
import torch

from drive.train.loss import channels_last_frames, weighted_mse
from drive.train.module import PolicyModule

HW = {"ncp_ltc": (40, 100), "cnn": (78, 200)}  # the PilotNet baseline's VALID convs need the paper's size


def _frames(hw: Tuple[int, int], seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (2, 3, 3, *hw), generator=g, dtype=torch.uint8)


def _step(
    module: PolicyModule, frames: torch.Tensor
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor], List[bool]]:
    """(features, gradients of a weighted MSE, whether each conv's input was channels-last)."""
    seen: List[bool] = []
    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    hooks = [
        c.register_forward_pre_hook(
            lambda _m, args: seen.append(args[0].is_contiguous(memory_format=torch.channels_last))
        )
        for c in convs
    ]
    try:
        module.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # the same dropout masks (the PilotNet baseline) in both layouts
        features = module._encode(frames)
        pred, _ = module.policy.decode(features, None, None)
        target = torch.linspace(-40.0, 40.0, pred.numel()).reshape(pred.shape)
        weighted_mse(pred, target, torch.ones_like(target)).backward()
    finally:
        for h in hooks:
            h.remove()
    grads = {n: p.grad.detach().clone() for n, p in module.named_parameters() if p.grad is not None}
    return features.detach(), grads, seen


@pytest.mark.parametrize("family", ["ncp_ltc", "cnn"])
def test_channels_last_frames_train_the_same_network_in_the_fast_layout(family: str) -> None:
    torch.manual_seed(0)
    module = PolicyModule(family=family, input_hw=HW[family])
    assert module.channels_last  # the default on a CPU
    frames = _frames(HW[family])
    feats_cl, grads_cl, seen_cl = _step(module, frames)
    module.channels_last = False
    feats_nchw, grads_nchw, seen_nchw = _step(module, frames)

    assert seen_cl and all(seen_cl), "every convolution reads channels-last input"
    assert not any(seen_nchw), "with channels_last False the frames stay NCHW"
    torch.testing.assert_close(feats_cl, feats_nchw, rtol=1e-4, atol=1e-5)
    assert grads_cl.keys() == grads_nchw.keys()
    assert {n for n, _ in module.named_parameters() if ".convs." in n} <= grads_cl.keys()
    for name, grad in grads_cl.items():
        scale = grads_nchw[name].abs().max().item()
        assert scale > 0.0, f"{name} got no gradient"
        torch.testing.assert_close(grad, grads_nchw[name], rtol=1e-4, atol=1e-4 * scale, msg=name)


def test_channels_last_frames_keeps_values_and_shape_and_flattens_without_a_copy() -> None:
    frames = _frames(HW["ncp_ltc"], 1)
    cl = channels_last_frames(frames)
    assert cl.shape == frames.shape and torch.equal(cl, frames)
    flat = cl.flatten(0, 1)
    assert flat.is_contiguous(memory_format=torch.channels_last)
    assert flat.data_ptr() == cl.data_ptr()  # a view: the head's reshape copies nothing
