"""Moved to :mod:`drive.bench` (a benchmark timer is not part of the recording format).

Kept only for :mod:`drive.evaluate.closed_form_fidelity`, which another change owns: remove this
file once it imports ``drive.bench``."""

from drive.bench import interleaved_medians

__all__ = ["interleaved_medians"]
