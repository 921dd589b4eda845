"""Shared test fixtures."""

import os
import subprocess
import sys
import warnings

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


@pytest.fixture
def read_only(tmp_path):
    """A folder nothing can be written into: read-only tmpfs as root (root ignores modes), else mode 0555."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() == 0:
        if (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True
            ).returncode
            != 0
        ):
            pytest.skip("cannot mount a read-only tmpfs")
        yield folder
        subprocess.run(["umount", str(folder)], check=False)
    else:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


@pytest.fixture
def warnings_on_stderr():
    """Warnings printed on stderr as in a real process (pytest records them instead), so a test of
    "exactly one line on stderr" sees them too."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")

        def show(message, category, filename, lineno, file=None, line=None):
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield


@pytest.fixture
def quiet_lightning_notes():
    """Lightning's info notes ("Seed set to ...") go through `logging` to the stream pytest had
    swapped in when Lightning was imported (a real process prints them on stdout, drive.train.launch):
    quiet in-process, so stderr holds what the command prints."""
    import logging

    import lightning.pytorch  # noqa: F401 -- imported first: importing it sets its loggers' levels

    loggers = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric", "lightning_utilities")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    yield
    for lg, level in zip(loggers, levels):
        lg.setLevel(level)
