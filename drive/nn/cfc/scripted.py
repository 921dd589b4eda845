"""The per-step loops of the hand-written BPTT (``drive.nn.cfc.bptt``) as TorchScript-able functions.

They are compiled once on first use (``compiled``): at CfC's sizes each step is a dozen tiny ops
and the interpreter's dispatch is 1.3-1.7x cheaper than Python's. Inputs are time-major
([L, B, ...]); weights arrive pre-transposed so every product is one ``addmm``/``mm``.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from drive.nn.cfc.cell import activate, dropout_mask, lstm_update, saves_input, update
from drive.nn.torchscript import script

_COMPILED: Dict[str, Any] = {}


def compiled(fn: Callable) -> Callable:
    """``torch.jit.script(fn)``, compiled once; the plain function where TorchScript is unavailable."""
    if fn.__name__ not in _COMPILED:
        try:
            _COMPILED[fn.__name__] = script(fn)
        except Exception:  # noqa: BLE001 - any scripting failure: run the same code eagerly
            _COMPILED[fn.__name__] = fn
    return _COMPILED[fn.__name__]


def _steps(seq: List[Tensor]) -> List[List[Tensor]]:
    """Each [L, ...] tensor as its L steps (one ``unbind`` instead of one ``select`` per step)."""
    out: List[List[Tensor]] = []
    for v in seq:
        out.append(v.unbind(0))
    return out


def _lists(k: int) -> List[List[Tensor]]:
    out: List[List[Tensor]] = []
    for _ in range(k):
        out.append(torch.jit.annotate(List[Tensor], []))
    return out


def _lstm_step(i: int, dh: Tensor, dc: Tensor, lstm: List[List[Tensor]]) -> Tuple[Tensor, Tensor]:
    """(d loss / d z_i [B, 4n], d loss / d c_{i-1}) from the gradients of step i's new (h, c);
    lstm = per-step (dc/dh, dz[:3n]/dc [B, 3, n], dz[3n:]/dh, forget gate) from ``lstm_jacobian``."""
    dc = torch.addcmul(dc, dh, lstm[0][i])
    dz = torch.cat([(dc.unsqueeze(1) * lstm[1][i]).flatten(1), dh * lstm[2][i]], 1)
    return dz, dc * lstm[3][i]


def dense_forward(
    x_part: Tensor,
    m_part: Tensor,
    h: Tensor,
    c: Tensor,
    ts: Tensor,
    w_h: Tensor,
    ws_t: List[Tensor],
    bs: List[Tensor],
    wr_t: Tensor,
    w_tau: Tensor,
    a: Tensor,
    n: int,
    mode: str,
    kind: str,
    p: float,
    mixed: bool,
    one: float = 1.0,
):
    """Dense CfC steps keeping activations. ws_t/bs: backbone layers 2.. and heads (W^T, b);
    returns (outs, h, c, h_in, mem_in, mem_saved, acts, ins, masks, heads), per-layer lists indexed
    by the layer that consumes them minus one. ``one`` (= 1.0) is an argument, not a constant, so that
    TorchScript keeps each ``addmm`` fused instead of splitting it into ``mm`` + ``add``."""
    mem_in: List[Tensor] = []
    h_in: List[Tensor] = []
    outs: List[Tensor] = []
    mem_saved: List[List[Tensor]] = []
    heads: List[List[Tensor]] = []
    acts, ins, masks = _lists(len(ws_t)), _lists(len(ws_t)), _lists(len(ws_t))
    xs, ms, tss = x_part.unbind(0), m_part.unbind(0), ts.unbind(0)  # one op instead of one per step
    for i in range(len(xs)):
        if mixed:
            mem_in.append(h)
            h, c, sv = lstm_update(torch.addmm(ms[i], h, wr_t, beta=one), c, n)
            mem_saved.append(sv)
        h_in.append(h)
        z = torch.addmm(xs[i], h, w_h, beta=one)
        for k in range(len(ws_t)):
            y = activate(z, kind)
            acts[k].append(z if saves_input(kind) else y)
            if p > 0.0:
                m = dropout_mask(y, p)
                masks[k].append(m)
                y = y * m
            ins[k].append(y)
            z = torch.addmm(bs[k], y, ws_t[k], beta=one)
        h, sv = update(z, tss[i], n, mode, w_tau, a)
        heads.append(sv)
        outs.append(h)
    return outs, h, c, h_in, mem_in, mem_saved, acts, ins, masks, heads


def dense_backward(
    dh: Tensor,
    dc: Tensor,
    g_seq: Optional[Tensor],
    jac: Tensor,
    dact: List[Tensor],
    ws: List[Tensor],
    w_h: Tensor,
    wr: Tensor,
    lstm: List[Tensor],
    keep_dh: bool,
    g_scale: float,
):
    """Reverse recurrence for the state gradients. g_seq [L, B, n] time-major; jac [L, B, K, n];
    dact[k] [L, B, D] and ws[k] [out, in] for backbone layers 2.. and heads; w_h = W_1[:, F:];
    g_seq enters scaled by g_scale (2 in the sigmoid form, whose state is L = (x + 1) / 2).
    Returns (dz per layer 1..heads, dz of the LSTM, state gradients (if keep_dh), dh0, dc0), each
    list in reverse time order."""
    last = len(ws)
    dzs = _lists(last + 1)
    dzm: List[Tensor] = []
    dH: List[Tensor] = []
    jacs, dacts, lstms = jac.unbind(0), _steps(dact), _steps(lstm)
    gs = g_seq.unbind(0) if g_seq is not None else jacs
    for i in range(len(jacs) - 1, -1, -1):
        if keep_dh:
            dH.append(dh)
        dz = (dh.unsqueeze(1) * jacs[i]).flatten(1)
        dzs[last].append(dz)
        for k in range(last, 0, -1):
            dz = dz.mm(ws[k - 1]) * dacts[k - 1][i]
            dzs[k - 1].append(dz)
        if len(lstms) > 0:
            dz, dc = _lstm_step(i, dz.mm(w_h), dc, lstms)
            dzm.append(dz)
            w = wr
        else:
            w = w_h
        if g_seq is not None and i > 0:  # the output gradient of the step before joins in the product
            dh = torch.addmm(gs[i - 1], dz, w, beta=g_scale)
        else:
            dh = dz.mm(w)
    return dzs, dzm, dH, dh, dc


def wired_forward(
    x_part: Tensor,
    m_part: Tensor,
    h: Tensor,
    c: Tensor,
    ts: Tensor,
    w_rec: Tensor,
    blocks: List[Tensor],
    bounds: List[int],
    src: List[int],
    dst: List[int],
    k: int,
    wr_t: Tensor,
    w_tau: Tensor,
    a: Tensor,
    mode: str,
    mixed: bool,
    one: float = 1.0,
):
    """Wired CfC steps (layer order) keeping activations: (outs, h, c, h_in, mem_in, mem_saved,
    saved[layer][step]); ``one`` as in ``dense_forward``."""
    mem_in: List[Tensor] = []
    h_in: List[Tensor] = []
    outs: List[Tensor] = []
    mem_saved: List[List[Tensor]] = []
    layers = len(bounds) - 1
    saved: List[List[List[Tensor]]] = []
    for _ in range(layers):
        saved.append(torch.jit.annotate(List[List[Tensor]], []))
    xs, ms, tss = x_part.unbind(0), m_part.unbind(0), ts.unbind(0)
    for i in range(len(xs)):
        if mixed:
            mem_in.append(h)
            h, c, sv = lstm_update(torch.addmm(ms[i], h, wr_t, beta=one), c, n=h.size(1))
            mem_saved.append(sv)
        h_in.append(h)
        pre = torch.addmm(xs[i], h, w_rec, beta=one)
        news: List[Tensor] = []
        for layer in range(layers):
            lo, hi = bounds[layer], bounds[layer + 1]
            z = pre[:, k * lo : k * hi]
            for j in range(len(blocks)):
                if dst[j] == layer:
                    z = torch.addmm(z, news[src[j]], blocks[j], beta=one)
            if mode == "pure":  # per-neuron parameters of this layer
                new, sv = update(z, tss[i], hi - lo, mode, w_tau[lo:hi], a[lo:hi])
            else:
                new, sv = update(z, tss[i], hi - lo, mode, w_tau, a)
            news.append(new)
            saved[layer].append(sv)
        h = torch.cat(news, 1)
        outs.append(h)
    return outs, h, c, h_in, mem_in, mem_saved, saved


def wired_backward(
    dh: Tensor,
    dc: Tensor,
    g_seq: Optional[Tensor],
    jac: List[Tensor],
    blocks_t: List[Tensor],
    bounds: List[int],
    src: List[int],
    dst: List[int],
    w_rec_t: Tensor,
    wr: Tensor,
    lstm: List[Tensor],
    keep_dh: bool,
):
    """Reverse recurrence of the wired cell: jac[l] [L, B, K, n_l]; dh must be a fresh tensor
    (block gradients add into it in place). Returns (dz [B, K n] per step, LSTM dz, state
    gradients (if keep_dh), dh0, dc0), lists in reverse time order."""
    layers = len(bounds) - 1
    dZ: List[Tensor] = []
    dzm: List[Tensor] = []
    dH: List[Tensor] = []
    jacs, lstms = _steps(jac), _steps(lstm)
    gs = g_seq.unbind(0) if g_seq is not None else jacs[0]
    for i in range(len(jacs[0]) - 1, -1, -1):
        dzs: List[Tensor] = []
        for _ in range(layers):
            dzs.append(dh)
        for layer in range(layers - 1, -1, -1):
            dz = (dh[:, bounds[layer] : bounds[layer + 1]].unsqueeze(1) * jacs[layer][i]).flatten(1)
            dzs[layer] = dz
            for j in range(len(blocks_t)):
                if dst[j] == layer:
                    dh[:, bounds[src[j]] : bounds[src[j] + 1]].addmm_(dz, blocks_t[j])
        if keep_dh:
            dH.append(dh)
        dz = torch.cat(dzs, 1)
        dZ.append(dz)
        d = dz.mm(w_rec_t)
        if len(lstms) > 0:
            dz, dc = _lstm_step(i, d, dc, lstms)
            dzm.append(dz)
            d = dz.mm(wr)
        if g_seq is not None and i > 0:
            d = d + gs[i - 1]
        dh = d
    return dZ, dzm, dH, dh, dc
