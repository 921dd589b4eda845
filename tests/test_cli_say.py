"""Lines that processes sharing one stdout write (torchrun's ranks in ``drive evaluate --logs``) stay
whole: :func:`drive.cli.errors.say` writes a line and its newline in one write, where ``print`` under
unbuffered output (``PYTHONUNBUFFERED``, ``python -u``) writes them apart."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from drive.cli.errors import say

ROOT = Path(__file__).resolve().parent.parent


class _Writes(io.RawIOBase):
    """A byte sink that keeps each write apart, as a pipe receives them."""

    def __init__(self) -> None:
        self.writes = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.writes.append(bytes(b))
        return len(b)


def test_say_writes_a_line_in_one_write_where_print_needs_two() -> None:
    raw = _Writes()
    stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # stdout under python -u
    print("rank 0: 0.10 km", file=stream, flush=True)
    assert raw.writes == [b"rank 0: 0.10 km", b"\n"]  # what let two ranks' lines run together
    raw.writes.clear()
    say("rank 1: 0.10 km", stream)
    assert raw.writes == [b"rank 1: 0.10 km\n"]


def test_two_unbuffered_processes_on_one_pipe_keep_every_line_whole() -> None:
    script = (
        "import sys\nfrom drive.cli.errors import say\n"
        "for i in range(400):\n    say(f'{sys.argv[1]} {i:04d} ' + sys.argv[1] * 80)\n"
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    read, write = os.pipe()
    procs = [subprocess.Popen([sys.executable, "-c", script, tag], stdout=write, env=env) for tag in "ab"]
    os.close(write)
    with os.fdopen(read, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert len(lines) == 800
    for line in lines:
        tag, number, tail = line.split(" ")
        assert tail == tag * 80 and len(number) == 4, line
