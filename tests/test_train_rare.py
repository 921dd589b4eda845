"""Learning the rare parts: training windows drawn by how rare their curvature is (``--data.balance``)
and on-policy episodes that start before the places where earlier rounds took over
(``--onpolicy.focus``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drive.data.cache import CachedRecording, cache_recordings
from drive.data.datamodule import DriveDataModule
from drive.data.preprocess import Preprocessing
from drive.data.readers import read_logs
from drive.data.sampling import BalancedSampler, rarity_weights
from drive.replay.cached import cached_paths
from drive.replay.rollout import Rollout
from drive.sim.record import simulate
from drive.train.onpolicy import OnPolicyData
from drive.train.rounds import FOCUS_LEAD_S, RoundJob, run_round, takeover_places

SIZE = (39, 100)


def test_rarity_weights_draw_every_curvature_bin_alike_at_power_one() -> None:
    k = np.array([0.001] * 90 + [0.05] * 9 + [0.2])  # straights, a few curves, one junction turn
    flat, half, even = (rarity_weights(k, p) for p in (0.0, 0.5, 1.0))
    np.testing.assert_allclose(flat, 1.0)
    for w in (half, even):
        assert w.mean() == pytest.approx(1.0)
    p = even / even.sum()
    np.testing.assert_allclose([p[:90].sum(), p[90:99].sum(), p[99]], 1 / 3)  # one third each
    assert even[99] > half[99] > flat[99]  # the rare window gains with the power
    with pytest.raises(ValueError, match=r"balance must be in \[0, 1\]"):
        rarity_weights(k, 1.5)
    with pytest.raises(ValueError, match="balance"):
        DriveDataModule(balance=-0.1)


def test_a_balanced_epoch_is_seeded_and_gives_each_repeat_its_own_key() -> None:
    weights = rarity_weights(np.array([0.001] * 20 + [0.1] * 2), 1.0)
    sampler = BalancedSampler(weights, seed=3)
    sampler.set_epoch(2)
    keys = list(sampler)
    assert keys == list(sampler) and len(keys) == 22  # the same draws for the same (seed, epoch)
    sampler.set_epoch(3)
    assert list(sampler) != keys
    rare = [k for k in keys if k[0] >= 20]
    assert len(rare) > 5  # 2 of 22 windows, about half the draws
    for window in {k[0] for k in keys}:  # the k-th draw of a window is numbered k
        assert sorted(k[2] for k in keys if k[0] == window) == list(range(sum(k[0] == window for k in keys)))


@pytest.fixture(scope="module")
def mixed_logs(tmp_path_factory):
    root = tmp_path_factory.mktemp("rare")
    simulate(root / "logs", minutes=1.5, seed=4, fps=10.0, recording_minutes=0.5, roads="mixed")
    return root


def _loader_keys(root, balance: float, tmp) -> list:
    dm = DriveDataModule(
        train=[str(root / "logs")],
        seq_len=8,
        stride=4,
        batch_size=4,
        num_workers=0,
        val_split="none",
        cache_dir=str(tmp / "cache"),
        image_size=list(SIZE),
        balance=balance,
    )
    dm.setup("fit")
    train = dm.datasets["train"]
    loader = dm.train_dataloader()
    keys = list(loader.sampler)
    return [train.mean_abs_curvature()[k[0]] for k in keys], loader, train


def test_balance_gives_the_tight_turns_more_of_the_batches_and_resumes_exactly(mixed_logs, tmp_path) -> None:
    plain, _, _ = _loader_keys(mixed_logs, 0.0, tmp_path)
    balanced, loader, train = _loader_keys(mixed_logs, 1.0, tmp_path)
    tight = lambda ks: np.mean(np.asarray(ks) > 1 / 20)  # noqa: E731
    assert tight(balanced) > 1.5 * tight(plain) > 0
    # the rare windows' repeats are augmented differently, and a resumed loader continues exactly
    batches = iter(loader)
    next(batches)
    state = loader.state_dict()
    rest = [b["curvature"] for b in batches]
    again = _loader_keys(mixed_logs, 1.0, tmp_path)[1]
    again.load_state_dict(state)
    for a, b in zip(rest, again):
        torch.testing.assert_close(a, b["curvature"])
    assert len(train) == len(list(loader.sampler))


def test_takeover_places_are_fresh_starts_inside_an_episode() -> None:
    n = 6
    data = Rollout(
        episode=np.array([0, 0, 0, 1, 1, 1]),
        recording=np.array([2, 2, 2, 5, 5, 5]),
        frame=np.array([10, 11, 12, 40, 41, 42]),
        forward_m=np.zeros(n),
        left_m=np.zeros(n),
        yaw_rad=np.zeros(n),
        label_per_m=np.zeros(n),
        speed_mps=np.ones(n),
        dt_s=np.full(n, 0.1),
        start=np.array([True, False, True, True, False, False]),
    )
    assert takeover_places(data) == [(2, 12)]


def test_focus_episodes_start_a_few_seconds_before_an_earlier_takeover(tmp_path) -> None:
    from drive.nn.heads import NCPConvHead
    from drive.nn.policy import Policy

    simulate(tmp_path / "logs", minutes=0.5, seed=2, fps=10.0, noise_std=0.0)
    (rec,) = cache_recordings(read_logs(str(tmp_path / "logs")), Preprocessing(size=SIZE), tmp_path / "cache")
    torch.manual_seed(0)
    policy = Policy(NCPConvHead(SIZE), None, frame_period_s=0.1)
    (path,) = cached_paths(CachedRecording(rec.directory))
    place = int(path.frames[200])
    job = RoundJob([str(rec.directory)], policy.config(), policy.state_dict(), 7, 4, 5, 0.9, 5.0)
    focused = RoundJob(**{**job.__dict__, "focus": [(0, place)], "focus_share": 0.5})
    done = Rollout(**run_round(focused))
    firsts = [int(done.frame[np.flatnonzero(done.episode == e)[0]]) for e in range(4)]
    lead = int(round(FOCUS_LEAD_S * 10))
    assert firsts[2] == firsts[3] and abs(firsts[2] - (place - lead)) <= 2  # 3 s before, at 10 Hz
    plain = Rollout(**run_round(job))
    assert [int(plain.frame[np.flatnonzero(plain.episode == e)[0]]) for e in range(4)] != firsts
    no_place = Rollout(**run_round(RoundJob(**{**job.__dict__, "focus_share": 0.5})))  # nothing to focus on
    np.testing.assert_array_equal(no_place.frame, plain.frame)
    with pytest.raises(ValueError, match="focus"):
        OnPolicyData(every_n_steps=10, focus=1.0)
