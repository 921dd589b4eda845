"""SHA-256 of every family's policy forward + backward on fixed inputs: is a refactor a pure move?

Prints one hash per case and one over all of them. Run it before and after a change on the same
machine (one thread): equal hashes mean bitwise equal outputs and gradients. For an earlier commit,
unpack it beside the checkout and put it first on the path:

    git archive <commit> | tar -x -C /tmp/base && PYTHONPATH=/tmp/base python tools/hash_policies.py
    python tools/hash_policies.py

(the earlier commit needs the names imported here; before issue 34 the conversion was
``drive.nn.closed_form.ltc.convert``).

Cases: every family (and CfC variant), eager and TorchScript; the closed-form LTC (exact with two
substeps, approx; per-row and shared elapsed times, with and without gradients, scripted); the LTC's
and the exact closed form's Triton kernels through Triton's interpreter (when triton imports).
Files (checkpoints, exports) are not involved: the compat fixtures test those.
"""

import hashlib
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

import drive
from drive.nn.closed_form import convert
from drive.nn.families import build_policy

torch.set_num_threads(1)
HW = (66, 80)
CASES = [
    ("ncp_ltc", {}),
    ("ncp_ltc", {"positivity": "softplus", "ode_unfolds": 3}),
    ("cfc", {"units": 8}),
    ("cfc", {"units": 8, "mode": "no_gate", "mixed_memory": True}),
    ("cfc", {"units": 8, "mode": "pure"}),
    ("cfc", {"wired": True}),
    ("cfc", {"wired": True, "mode": "no_gate", "mixed_memory": True}),
    ("cfc", {"wired": True, "mode": "pure"}),
    ("lstm", {"units": 8}),
    ("ctrnn", {"units": 8}),
    ("cnn", {}),
]


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    frames = torch.rand(2, 5, 3, *HW, generator=g).requires_grad_()
    ts = torch.rand(2, 5, generator=g) + 0.5
    return frames, ts


def _digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


def run_policy(policy, seed):
    frames, ts = _inputs(seed)
    y, hidden = policy(frames, None, ts)
    (y.sin().sum() + hidden.square().sum()).backward()
    grads = [p.grad if p.grad is not None else torch.zeros(0) for _, p in sorted(policy.named_parameters())]
    return _digest([y, hidden, frames.grad, *grads])


def run_rnn(rnn, seed, grad=True, shared_dt=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, rnn.input_size, generator=g).requires_grad_(grad)
    ts = torch.rand(3, 4, generator=g) + 0.5
    if shared_dt:
        ts = torch.full((3, 4), 0.7)
    h0 = (torch.randn(3, rnn.state_size, generator=g) * 0.1).requires_grad_(grad)
    y, h = rnn(x, h0, ts)
    out = [y, h]
    if grad:
        (y.sin().sum() + h.square().sum()).backward()
        out += [x.grad, h0.grad] + [p.grad for _, p in sorted(rnn.named_parameters()) if p.grad is not None]
    return _digest(out)


def main():
    print("drive from", os.path.dirname(drive.__file__), file=sys.stderr)
    results = []
    for i, (family, opts) in enumerate(CASES):
        torch.manual_seed(i)
        policy = build_policy(family, input_hw=HW, **opts)
        results.append((f"{family} {opts} eager", run_policy(policy, i)))
        torch.manual_seed(i)
        policy = build_policy(family, input_hw=HW, **opts)
        scripted = torch.jit.script(policy)
        results.append((f"{family} {opts} scripted", run_policy(scripted, i)))
    torch.manual_seed(100)
    ltc = build_policy("ncp_ltc", input_hw=HW, positivity="softplus").rnn
    for method in ("exact", "approx"):
        cf = convert(ltc, method, 2 if method == "exact" else 1)
        results.append((f"closed_form {method} grad", run_rnn(cf, 101)))
        with torch.no_grad():
            results.append((f"closed_form {method} no_grad", run_rnn(cf, 102, grad=False)))
            results.append((f"closed_form {method} no_grad shared dt", run_rnn(cf, 105, False, True)))
            results.append(
                (f"closed_form {method} scripted", run_rnn(torch.jit.script(cf), 106, False, True))
            )
        results.append((f"closed_form {method} grad shared dt", run_rnn(cf, 107, True, True)))
    try:
        import triton  # noqa: F401

        os.environ["DRIVE_TRITON"] = "interpret"
        results.append(("ltc triton (interpreted)", run_rnn(ltc, 103)))
        with torch.no_grad():
            results.append(("closed_form exact triton (interpreted)", run_rnn(convert(ltc), 104, grad=False)))
        os.environ["DRIVE_TRITON"] = "0"
    except ImportError:
        pass
    total = hashlib.sha256()
    for name, digest in results:
        print(f"{digest}  {name}")
        total.update(digest.encode())
    print(f"{total.hexdigest()}  ALL ({len(results)} cases)")


if __name__ == "__main__":
    main()
