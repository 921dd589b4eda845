"""Baselines: LSTM and CT-RNN follow the recurrent contract and the papers' sizes."""

import numpy as np
import pytest
import torch

from drive.nn.baselines import CTRNN, LSTM


def count(module):
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def test_parameter_counts_match_the_papers():
    ct = CTRNN(32, 64, 1)
    assert count(ct) == 6273  # slides: CT-RNN 6,273 trainable
    assert count(ct) - count(ct.readout) == 6208  # 64 x (32 + 64 + 1) without the readout
    lstm = LSTM(32, 64, 1)
    assert count(lstm) == 24897  # slides: one bias per gate (Keras)
    assert not lstm.lstm.bias_hh_l0.any()  # torch's redundant second bias stays zero


def test_ctrnn_matches_explicit_euler_by_hand():
    torch.manual_seed(0)
    m = CTRNN(3, 5, 2, ode_unfolds=4, tau=0.7).double()
    x = torch.randn(2, 6, 3, dtype=torch.double)
    dts = torch.rand(2, 6, dtype=torch.double) + 0.1
    w_in, b = m.input_map.weight.detach().numpy(), m.input_map.bias.detach().numpy()
    w_rec = m.recurrent.weight.detach().numpy()
    h = np.zeros((2, 5))
    for t in range(6):
        step = dts[:, t].numpy()[:, None] / 4
        for _ in range(4):
            h = h + step * (np.tanh(x[:, t].numpy() @ w_in.T + b + h @ w_rec.T) - h / 0.7)
    with torch.no_grad():
        _, h_ours = m(x, timespans=dts)
    np.testing.assert_allclose(h_ours.numpy(), h, atol=1e-12)


@pytest.mark.parametrize("cls", [LSTM, CTRNN])
def test_step_equals_forward_and_scripted_equals_eager(cls):
    torch.manual_seed(1)
    m = cls(4, 8, 2)
    s = torch.jit.script(m)
    x, dts = torch.randn(3, 5, 4), torch.rand(3, 5) + 0.2
    with torch.no_grad():
        y, h = m(x, None, dts)
        y_s, h_s = s(x, None, dts)
        hidden = s.initial_state(3)
        steps = []
        for t in range(5):
            out, hidden = s.step(x[:, t], hidden, dts[:, t])
            steps.append(out)
    assert y.shape == (3, 5, 2) and h.shape == (3, m.state_size) and h.dtype == torch.float32
    torch.testing.assert_close(y_s, y, rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.stack(steps, 1), y, rtol=0, atol=1e-6)
    torch.testing.assert_close(hidden, h, rtol=0, atol=1e-6)


def test_lstm_flat_hidden_carries_h_and_c_across_windows():
    torch.manual_seed(2)
    m = LSTM(4, 6, 1)
    x = torch.randn(2, 8, 4)
    with torch.no_grad():
        y_full, h_full = m(x)
        y1, h1 = m(x[:, :3])
        y2, h2 = m(x[:, 3:], h1)
    assert h1.shape == (2, 12)
    torch.testing.assert_close(torch.cat([y1, y2], 1), y_full)
    torch.testing.assert_close(h2, h_full)


@pytest.mark.parametrize("cls", [LSTM, CTRNN])
def test_bad_inputs_are_clear_errors(cls):
    m = cls(4, 8, 1)
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="elapsed time"):
        m(x, timespans=torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        m(x.index_fill(1, torch.tensor([1]), float("nan")))
    with pytest.raises(ValueError, match="expected x"):
        m(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="hidden"):
        m(x, torch.zeros(2, 3))


@pytest.mark.parametrize("cls", [LSTM, CTRNN])
def test_config_rebuilds_the_architecture(cls):
    torch.manual_seed(4)
    m = cls(4, 8, 3, **({"ode_unfolds": 2, "tau": 0.5} if cls is CTRNN else {}))
    torch.manual_seed(5)  # another init: equal outputs below come from the loaded weights
    rebuilt = cls(**m.config())
    x, dts = torch.randn(2, 6, 4), torch.rand(2, 6) + 0.2
    with torch.no_grad():
        assert not torch.equal(rebuilt(x, None, dts)[0], m(x, None, dts)[0])
        rebuilt.load_state_dict(m.state_dict())  # strict: the config gave every parameter's shape
        y, h = m(x, None, dts)
        y2, h2 = rebuilt(x, None, dts)
    assert rebuilt.config() == m.config()
    assert torch.equal(y2, y) and torch.equal(h2, h)
