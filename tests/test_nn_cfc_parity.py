"""cfc_from_ncps: drive's CfC reproduces ncps.torch.CfC (the oracle) within 1e-5."""

import pytest
import torch

ncps_torch = pytest.importorskip("ncps.torch")
from ncps import wirings  # noqa: E402

from drive.nn.cfc import MODES, CfC, WiredCfC, cfc_from_ncps  # noqa: E402


def ncps_forward(m, x, ts):
    """ncps's batched timespans are broken (its issues #81-#83): run each sequence alone."""
    return torch.cat([m(x[b : b + 1], None, ts[b : b + 1])[0] for b in range(x.size(0))])


def check(ncps_module, features, target_type):
    torch.manual_seed(0)
    ncps_module.eval()
    with torch.no_grad():
        for p in ncps_module.parameters():  # move off the init so every weight matters
            if p.requires_grad:  # (ncps keeps its sparsity masks as frozen Parameters)
                p.add_(0.1 * torch.randn_like(p))
    ours = cfc_from_ncps(ncps_module).eval()
    assert isinstance(ours, target_type)
    x, ts = torch.randn(3, 6, features), torch.rand(3, 6) * 2.5 + 0.02
    with torch.no_grad():
        want = ncps_forward(ncps_module, x, ts)
        got, _ = ours(x, None, ts)
        scripted, _ = torch.jit.script(ours)(x, None, ts)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    torch.testing.assert_close(scripted, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mixed", [False, True])
def test_dense_cfc_parity(mode, mixed):
    check(
        ncps_torch.CfC(
            5,
            12,
            proj_size=2,
            mixed_memory=mixed,
            mode=mode,
            activation="silu",
            backbone_units=16,
            backbone_layers=2,
            backbone_dropout=0.2,
        ),
        5,
        CfC,
    )


def test_dense_cfc_without_backbone_parity():
    check(ncps_torch.CfC(5, 8, mode="default", backbone_layers=0), 5, CfC)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mixed", [False, True])
def test_wired_autoncp_parity(mode, mixed):
    check(ncps_torch.CfC(7, wirings.AutoNCP(19, 2, seed=5), mixed_memory=mixed, mode=mode), 7, WiredCfC)


def test_wired_fully_connected_parity_with_projection():
    check(ncps_torch.CfC(4, wirings.FullyConnected(6), proj_size=3, mode="no_gate"), 4, WiredCfC)


def test_wired_hidden_state_is_in_neuron_order_with_mixed_memory_packed():
    torch.manual_seed(1)
    wiring = wirings.NCP(4, 3, 1, 2, 2, 3, 2)
    n = ncps_torch.CfC(3, wiring, mixed_memory=True).eval()
    ours = cfc_from_ncps(n).eval()
    x, ts = torch.randn(1, 4, 3), torch.rand(1, 4) + 0.1
    with torch.no_grad():
        _, (h, c) = n(x, None, ts)
        _, flat = ours(x, None, ts)
    order = [i for layer in range(3) for i in wiring.get_neurons_of_layer(layer)]
    torch.testing.assert_close(flat[:, :8][:, order], h, rtol=0, atol=1e-5)
    torch.testing.assert_close(flat[:, 8:][:, order], c, rtol=0, atol=1e-5)
