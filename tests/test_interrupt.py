"""Ctrl-C: a command answers it in one line with exit status 130 and leaves only whole outputs;
worker processes leave SIGINT to their parent and are stopped at once when it gives up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent import futures

import pytest

from drive.io.recording import Recording
from drive.io.workers import worker_pool


def test_workers_ignore_sigint_and_the_parent_keeps_its_handler() -> None:
    handler = signal.getsignal(signal.SIGINT)
    with worker_pool(1) as pool:
        job = pool.submit(time.sleep, 3.0)
        assert signal.getsignal(signal.SIGINT) is handler
        (worker,) = list(pool._processes.values())
        time.sleep(1.0)  # the worker is importing or inside the job: Ctrl-C reaches it either way
        os.kill(worker.pid, signal.SIGINT)
        # a worker answering SIGINT would end the job with KeyboardInterrupt, or die importing
        # (BrokenProcessPool); exception() returns either without raising it here
        assert job.exception(timeout=60) is None


def test_an_exception_in_the_block_stops_the_workers_instead_of_waiting_for_them() -> None:
    with pytest.raises(RuntimeError, match="given up"):
        with worker_pool(2) as pool:
            jobs = [pool.submit(time.sleep, 120.0) for _ in range(3)]
            workers = list(pool._processes.values())
            raise RuntimeError("given up")
    # a pool shut down by waiting would hold the block for two minutes; these end now (the pool's
    # manager thread reaps them too, so their exit codes are read by polling, not join)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(
        [w.exitcode is not None for w in workers] + [j.done() for j in jobs]
    ):
        time.sleep(0.05)
    assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2
    for job in jobs:  # cancelled before it started, or broken by its worker's end
        assert job.cancelled() or isinstance(job.exception(), futures.process.BrokenProcessPool)


def test_ctrl_c_in_a_command_is_one_line_and_leaves_only_whole_recordings(tmp_path) -> None:
    out = tmp_path / "logs"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "drive.cli", "simulate", "--out", str(out), "--minutes", "3"]
    proc = subprocess.Popen(
        [*argv, "--recording-minutes", "0.05"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()  # "[1/60] <recording>": the work is under way
        assert first.startswith("[1/"), first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and err.splitlines()[-1:] == [
        "drive simulate: interrupted; outputs it had not finished were not written"
    ], err
    # simulate commits its recordings together at the end: interrupted, there is no --out at all,
    # and no temporary beside it; were it to keep finished recordings, each must be whole
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "logs") == []
    for rec_dir in sorted(out.iterdir()) if out.exists() else []:
        assert not rec_dir.name.startswith("."), rec_dir
        rec = Recording.open(rec_dir)
        assert len(rec) > 0 and len(list((rec_dir / "frames").iterdir())) == len(rec), rec_dir
