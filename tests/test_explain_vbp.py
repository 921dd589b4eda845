"""VisualBackProp: the published algorithm on drive's heads, checked against an independent loop."""

import pytest
import torch
from torch import nn

from drive.explain.visual_backprop import VisualBackPropError, conv_geometry, visual_backprop
from drive.nn.heads import NCPConvHead, PilotNetCNN


def _reference_vbp(head: nn.Module, frame: torch.Tensor) -> torch.Tensor:
    """Bojarski et al. for ONE frame [3, H, W], written out: every deep unit spreads its value over
    its receptive field in the shallower map (what a ones-kernel transposed conv does)."""
    x = head.standardize(frame[None]) if hasattr(head, "standardize") else frame[None]
    convs = [m for m in head.convs if isinstance(m, nn.Conv2d)]
    means, sizes = [], [tuple(x.shape[-2:])]
    for conv in convs:
        x = torch.relu(conv(x))
        means.append(x[0].mean(dim=0))
        sizes.append(tuple(x.shape[-2:]))
    mask = means[-1]
    for layer in range(len(convs) - 1, -1, -1):
        (kh, kw), (sh, sw), (ph, pw) = convs[layer].kernel_size, convs[layer].stride, convs[layer].padding
        up = torch.zeros(sizes[layer])
        for i in range(mask.shape[0]):
            for j in range(mask.shape[1]):
                top, left = i * sh - ph, j * sw - pw
                up[max(top, 0) : max(top + kh, 0), max(left, 0) : max(left + kw, 0)] += mask[i, j]
        mask = up * means[layer - 1] if layer > 0 else up
    return (mask - mask.min()) / (mask.max() - mask.min())


def _patch_frames(batch: int, hw=(78, 200), top=30, left=120, size=12) -> torch.Tensor:
    frames = torch.zeros(batch, 3, *hw)
    frames[:, :, top : top + size, left : left + size] = 1.0
    return frames


def _positive_head(head: nn.Module) -> nn.Module:
    """Hand-set weights: every conv averages its receptive field (w = 1/fan_in, b = 0). After the
    per-frame standardisation the dark background is negative, so only units that see the bright
    patch are active, at every layer."""
    with torch.no_grad():
        for conv in head.convs:
            if isinstance(conv, nn.Conv2d):
                conv.weight.fill_(1.0 / conv.weight[0].numel())
                conv.bias.zero_()
    return head.eval()


def test_ncp_head_geometry_matches_the_reference_output_paddings():
    head = NCPConvHead()
    sizes = [(78, 200), (39, 100), (20, 50), (10, 25), (10, 25), (10, 25)]
    paddings = [g.output_padding(sizes[i], sizes[i + 1]) for i, g in enumerate(conv_geometry(head))]
    assert paddings == [(1, 1), (0, 1), (1, 1), (0, 0), (0, 0)]


@pytest.mark.parametrize("method", ["bojarski", "ncp"])
@pytest.mark.parametrize("cls", [NCPConvHead, PilotNetCNN])
def test_mask_peaks_on_the_only_region_that_drives_the_activations(cls, method):
    head = _positive_head(cls())
    top, left, size = 30, 120, 12
    mask = visual_backprop(head, _patch_frames(2, top=top, left=left, size=size), method=method)
    peak = divmod(int(mask[0].argmax()), 200)
    assert top <= peak[0] < top + size and left <= peak[1] < left + size
    inside = mask[0, top : top + size, left : left + size].mean()
    outside = mask[0].clone()
    outside[max(top - 20, 0) : top + size + 20, left - 20 : left + size + 20] = 0
    assert inside > 0.3 and outside.max() < 0.05


@pytest.mark.parametrize(
    "head",
    [NCPConvHead(), PilotNetCNN(), NCPConvHead(input_hw=(61, 97))],
    ids=["ncp-78x200", "pilotnet-78x200", "ncp-61x97"],
)
def test_batched_masks_equal_the_straightforward_reference(head):
    head.eval()
    torch.manual_seed(0)
    frames = torch.rand(2, 3, *head.input_size)
    masks = visual_backprop(head, frames)
    for b in range(2):
        torch.testing.assert_close(masks[b], _reference_vbp(head, frames[b]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method", ["bojarski", "ncp"])
@pytest.mark.parametrize(
    "cls, hw",
    [
        (NCPConvHead, (78, 200)),
        (NCPConvHead, (66, 200)),
        (NCPConvHead, (120, 161)),
        (PilotNetCNN, (78, 200)),
        (PilotNetCNN, (77, 199)),
    ],
)
def test_masks_have_the_input_size_and_span_exactly_0_to_1(cls, hw, method):
    head = cls(input_hw=hw).eval()
    mask = visual_backprop(head, torch.rand(3, 3, *hw), method=method)
    assert mask.shape == (3, *hw) and mask.dtype == torch.float32
    assert torch.allclose(mask.amin(dim=(1, 2)), torch.zeros(3)) and torch.allclose(
        mask.amax(dim=(1, 2)), torch.ones(3)
    )


def test_each_image_is_normalised_on_its_own():
    head = NCPConvHead().eval()
    frames = torch.rand(3, 3, 78, 200)
    batched = visual_backprop(head, frames)
    single = torch.cat([visual_backprop(head, frames[i : i + 1]) for i in range(3)])
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-6)


def _constant_head(bias: float) -> nn.Module:
    """Zero weights, one bias everywhere: every post-ReLU map is the constant relu(bias)."""
    head = NCPConvHead().eval()
    with torch.no_grad():
        for conv in head.convs[::2]:
            conv.weight.zero_()
            conv.bias.fill_(bias)
    return head


def test_constant_maps_leave_only_the_overlap_ridges_of_the_reference():
    """Bojarski on constant maps: the mask is the ones-kernel overlap count, exactly as the reference
    spreads it; it is not constant, so the guard must not zero it."""
    head, frames = _constant_head(0.5), torch.rand(2, 3, 78, 200)
    masks = visual_backprop(head, frames)
    for b in range(2):
        torch.testing.assert_close(masks[b], _reference_vbp(head, frames[b]), rtol=1e-4, atol=1e-5)
    assert masks.amax(dim=(1, 2)).tolist() == [1.0, 1.0]


def test_ncp_variant_of_constant_maps_is_exactly_zero():
    """The NCP variant's per-channel max and bilinear scaling keep a constant map constant: min-max
    has no range and the guard gives zeros, not 0/0."""
    mask = visual_backprop(_constant_head(0.5), torch.rand(2, 3, 78, 200), method="ncp")
    assert torch.equal(mask, torch.zeros(2, 78, 200))


@pytest.mark.parametrize("method", ["bojarski", "ncp"])
def test_dead_maps_give_an_all_zero_mask(method):
    """ReLU kills everything: every map is exactly zero, so is the mask (not NaN)."""
    mask = visual_backprop(_constant_head(-1.0), torch.rand(2, 3, 78, 200), method=method)
    assert torch.equal(mask, torch.zeros(2, 78, 200))


class _Head(nn.Module):
    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.convs = nn.Sequential(*layers)


@pytest.mark.parametrize(
    "head, message",
    [
        (_Head(nn.Conv2d(3, 4, 3), nn.Tanh()), "needs a ReLU"),
        (_Head(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3)), "alternate Conv2d and ReLU"),
        (_Head(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.BatchNorm2d(4), nn.ReLU()), "expected Conv2d"),
        (_Head(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), nn.ReLU()), "expected Conv2d"),
        (_Head(nn.Conv2d(3, 4, 3, dilation=2), nn.ReLU()), "dilated"),
        (nn.Linear(3, 4), "Linear has no Conv2d layer"),
    ],
    ids=["tanh", "missing-relu", "batchnorm", "branch", "dilated", "no-convs"],
)
def test_heads_vbp_cannot_explain_are_a_clear_error(head, message):
    with pytest.raises(VisualBackPropError, match=message):
        visual_backprop(head, torch.rand(1, 3, 16, 16))


def test_unknown_method_is_an_error():
    with pytest.raises(ValueError, match="unknown VisualBackProp method"):
        visual_backprop(NCPConvHead(), torch.rand(1, 3, 78, 200), method="gradcam")


def _paper_vbp(layers: nn.Sequential, frames: torch.Tensor) -> torch.Tensor:
    """Bojarski et al. 2017, as the paper states it, for a plain Sequential of Conv2d, ReLU pairs:
    average each ReLU's feature maps over channels; from the deepest, scale the mask up to the
    shallower map's size with a transposed conv of the producing conv's kernel and stride (and
    padding), unit weights and no bias (nn.ConvTranspose2d with output_size, not the library's
    output_padding arithmetic); multiply point-wise with the shallower average; repeat down to the
    input; normalise each mask to [0, 1]."""
    x, convs, means, sizes = frames, [], [], [tuple(frames.shape[-2:])]
    with torch.no_grad():
        for layer in layers:
            x = layer(x)
            if isinstance(layer, nn.Conv2d):
                convs.append(layer)
            elif isinstance(layer, nn.ReLU):
                means.append(x.mean(dim=1, keepdim=True))
                sizes.append(tuple(x.shape[-2:]))
        mask = means[-1]
        for i in reversed(range(len(convs))):
            c = convs[i]
            up = nn.ConvTranspose2d(1, 1, c.kernel_size, c.stride, c.padding, bias=False)
            up.weight.fill_(1.0)
            mask = up(mask, output_size=sizes[i])
            if i > 0:
                mask = mask * means[i - 1]
        mask = mask[:, 0]
        lo = mask.flatten(1).min(1).values.view(-1, 1, 1)
        hi = mask.flatten(1).max(1).values.view(-1, 1, 1)
        return (mask - lo) / (hi - lo)


def _plain_sequential(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 5, stride=2),
        nn.ReLU(),
        nn.Conv2d(8, 12, 3, stride=2, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(12, 16, 3, stride=1),
        nn.ReLU(),
        nn.Flatten(),
    ).eval()


def test_plain_sequential_is_explained_as_the_paper_says():
    """README: VisualBackProp for any ReLU conv head. A plain nn.Sequential(Conv2d, ReLU, ...) used
    to be refused ('Sequential has no convs'); it now equals the paper's algorithm written out
    independently (odd sizes, so every up-scaling needs its own output size)."""
    head = _plain_sequential()
    frames = torch.rand(3, 3, 61, 83, generator=torch.Generator().manual_seed(1))
    mask = visual_backprop(head, frames)
    expected = _paper_vbp(head, frames)
    assert mask.shape == (3, 61, 83) and float(expected.std()) > 0.05  # a non-trivial mask
    torch.testing.assert_close(mask, expected, atol=1e-5, rtol=0)
    # the same layers as a drive-style head with `convs` give the same masks
    torch.testing.assert_close(visual_backprop(_Head(*list(head)[:6]), frames), mask, atol=1e-6, rtol=0)
    assert visual_backprop(head, frames, method="ncp").shape == (3, 61, 83)


class _UserHead(nn.Module):
    """A user's head: named layers, a functional ReLU, normalisation first, dense layers after."""

    def __init__(self, seq: nn.Sequential) -> None:
        super().__init__()
        self.a, self.b, self.c = seq[0], seq[2], seq[4]
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(16 * 13 * 18, 5)

    def forward(self, x):
        h = torch.nn.functional.relu(self.a(x))
        h = self.drop(torch.relu(self.b(h)))
        h = torch.nn.functional.relu(self.c(h))
        return self.fc(h.flatten(1))


def test_a_users_head_with_functional_relus_is_explained_too():
    seq = _plain_sequential()
    head = _UserHead(seq).eval()
    frames = torch.rand(2, 3, 61, 83, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(visual_backprop(head, frames), _paper_vbp(seq, frames), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "head, message",
    [
        (
            nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3), nn.ReLU()),
            r"layer '2' \(MaxPool2d\) sits between '0'\+ReLU and the next Conv2d '3'",
        ),
        (
            nn.Sequential(nn.Conv2d(3, 4, 3), nn.Tanh()),
            r"layer '0' is followed by Tanh \('1'\), not by a ReLU",
        ),
        (nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3)), r"layer '2' is the last layer"),
        (nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(3, 4, 3), nn.ReLU()), r"first Conv2d sees \(8, 8\)"),
        (nn.Sequential(nn.Conv2d(3, 4, 3, dilation=2), nn.ReLU()), "dilated"),
        (nn.Sequential(nn.Linear(16, 4), nn.ReLU()), "Sequential has no Conv2d layer"),
    ],
    ids=["maxpool", "tanh", "no-last-relu", "pool-first", "dilated", "no-conv"],
)
def test_sequentials_vbp_cannot_explain_say_what_is_missing(head, message):
    with pytest.raises(VisualBackPropError, match=message):
        visual_backprop(head, torch.rand(1, 3, 16, 16))
