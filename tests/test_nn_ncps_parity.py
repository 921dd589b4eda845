"""from_ncps: an ncps LTC and the converted drive LTC compute the same thing (within 1e-5)."""

import numpy as np
import pytest
import torch
from ncps import wirings
from ncps.torch import LTC as NcpsLTC
from ncps.torch import CfC as NcpsCfC
from ncps.torch import LTCCell

from drive.nn import LTC, CfC, from_ncps, wiring_from_ncps


def trained_looking(module, seed):
    """Move every ncps parameter away from its init (but keep masks), as training would."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "mask" not in name:
                p.add_(torch.randn(p.shape, generator=g) * 0.3)
    return module


def ncps_per_sample(module, x, timespans):
    """ncps's wrapper cannot take batched timespans (its issues #81-#83): run sample by sample."""
    ys, hs = [], []
    for i in range(x.size(0)):
        y, h = module(x[i : i + 1], timespans=timespans[i : i + 1])
        ys.append(y)
        hs.append(h)
    return torch.cat(ys), torch.cat(hs)


WIRINGS = {
    "ncp": lambda: wirings.NCP(6, 4, 2, 3, 2, 4, 2, seed=5),
    "autoncp": lambda: wirings.AutoNCP(12, 3, sparsity_level=0.6, seed=3),
    "fully_connected": lambda: wirings.FullyConnected(7, 2, erev_init_seed=4),
    "random": lambda: wirings.Random(8, 3, sparsity_level=0.5, random_seed=9),
}


@pytest.mark.parametrize("name", sorted(WIRINGS))
def test_ltc_parity_with_irregular_batched_timespans(name):
    torch.manual_seed(0)
    theirs = trained_looking(NcpsLTC(5, WIRINGS[name]()), seed=1).eval()
    ours = from_ncps(theirs)
    x = torch.randn(3, 9, 5)
    dts = torch.rand(3, 9) * 1.5 + 0.05
    with torch.no_grad():
        y_ref, h_ref = ncps_per_sample(theirs, x, dts)
        y, h = ours(x, timespans=dts)
    assert y.shape == y_ref.shape and h.shape == h_ref.shape
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(h, h_ref, rtol=0, atol=1e-5)


def test_ltc_parity_in_clip_mode_with_linear_maps_and_initial_state():
    torch.manual_seed(1)
    theirs = NcpsLTC(
        4,
        wirings.AutoNCP(10, 2, seed=7),
        implicit_param_constraints=False,
        input_mapping="linear",
        output_mapping="linear",
        ode_unfolds=3,
    )
    theirs = trained_looking(theirs, seed=2)
    theirs.rnn_cell.apply_weight_constraints()
    ours = from_ncps(theirs)
    assert ours.positivity == "clip" and ours.ode_unfolds == 3
    x, h0 = torch.randn(2, 6, 4), torch.randn(2, 10)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, h0)[0], theirs(x, h0)[0], rtol=0, atol=1e-5)


def test_ltc_cell_converts_and_steps_like_ncps():
    torch.manual_seed(2)
    wiring = wirings.NCP(5, 3, 1, 2, 2, 2, 2)
    cell = trained_looking(LTCCell(wiring, in_features=3), seed=3)
    ours = from_ncps(cell)
    x, h = torch.randn(4, 3), torch.randn(4, 9)
    dt = torch.rand(4) + 0.1
    with torch.no_grad():
        y_ref, h_ref = cell(x, h, dt.unsqueeze(1))
        y, h_new = ours.step(x, h, dt)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-5)
    torch.testing.assert_close(h_new, h_ref, rtol=0, atol=1e-5)


def test_converted_wiring_keeps_matrices_and_layers():
    w = wirings.NCP(6, 4, 2, 3, 2, 4, 2)
    w.build(5)
    ours = wiring_from_ncps(w)
    assert np.array_equal(ours.adjacency, w.adjacency_matrix)
    assert np.array_equal(ours.sensory_adjacency, w.sensory_adjacency_matrix)
    assert ours.neurons_of_layer(1) == list(w.get_neurons_of_layer(1))
    assert ours.sensory_synapse_count == int(np.abs(w.sensory_adjacency_matrix).sum())


def test_cfc_is_dispatched_to_cfc_from_ncps():
    torch.manual_seed(3)
    theirs = NcpsCfC(5, 16, proj_size=2).eval()
    ours = from_ncps(theirs)
    assert isinstance(ours, CfC)
    x = torch.randn(2, 4, 5)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], theirs(x)[0], rtol=0, atol=1e-5)


def test_unsupported_modules_are_refused():
    with pytest.raises(NotImplementedError, match="mixed_memory"):
        from_ncps(NcpsLTC(3, 6, mixed_memory=True))
    with pytest.raises(TypeError, match="LTC"):
        from_ncps(torch.nn.Linear(2, 2))
    assert isinstance(from_ncps(NcpsLTC(3, 6)), LTC)
