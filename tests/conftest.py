"""Shared test fixtures."""

import os

import pytest
import torch

# Without a GPU, Triton kernels (drive/nn/ltc/kernels/) are tested through Triton's interpreter on CPU
# tensors. Triton reads TRITON_INTERPRET when its language module and each kernel are defined,
# i.e. before anything imports triton (lightning does): so here, first. Nothing else in the
# suite runs Triton on CPU.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# Under pytest-xdist (`make test` runs two workers) each worker gets one of the two cores: one torch
# thread, so two test files never fight over both cores (tests that need a thread count set it).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread: for batch-1 stepping, more threads on a small machine mostly wait for
    each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
