"""``drive fit | validate | test | predict``: LightningCLI over :class:`PolicyModule` and the datamodule.

Every hyperparameter comes from type hints, so ``drive fit --help`` lists them all and any of them
can be set in YAML (``--config ncp_ltc`` names a profile shipped with drive, ``--config my.yaml`` a
file; several ``--config`` stack) or on the command line (``--model.lr 1e-3``, ``--data.batch_size
8``, ``--trainer.max_epochs 5``)::

    drive fit --config ncp_ltc --config trainer/cpu --data.train '[logs/]'
    drive fit --config ncp_ltc --ckpt_path last       # resume a killed run
    drive test --config ncp_ltc --ckpt_path runs/ncp_ltc/checkpoints/last.ckpt

Shipped profiles (``drive/configs/``, :mod:`drive.train.profiles`): ``cfc``, ``cnn``, ``ctrnn``,
``lstm``, ``ncp_ltc`` (families), ``demo``, ``data``, ``data_ncp``, ``data_udacity``,
``trainer/cpu``, ``trainer/gpu``, ``trainer/ddp``. A checkout's path (``configs/ncp_ltc.yaml``) still
names the same profile.

The LightningCLI itself, with drive's defaults (seed 1234, TensorBoard and CSV loggers under
``trainer.default_root_dir``, the best-by-``val/loss`` and ``last.ckpt`` checkpoint groups,
``predictions.csv`` from ``drive predict``), is :mod:`drive.train.launch`; this module adds the
one-line error report.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from drive.cli.errors import INPUT_ERRORS, report_input_error
from drive.train.launch import launch

__all__ = ["lightning_main"]


def lightning_main(argv: Optional[List[str]] = None, debug: bool = False) -> int:
    """Run ``fit | validate | test | predict`` with the rest of ``argv`` (as ``drive <subcommand>``).

    Returns 0, or 2 with one line ``drive <subcommand>: error: ...`` on stderr when input is at
    fault (a missing ``--ckpt_path``, a damaged checkpoint, bad logs, an unwritable or full output
    location: :data:`drive.cli.errors.INPUT_ERRORS`); ``debug`` re-raises instead.
    """
    command = next(iter(sys.argv[1:] if argv is None else argv), "")
    try:
        launch(argv)
    except INPUT_ERRORS as e:
        if debug:
            raise
        return report_input_error(command, e)
    return 0


if __name__ == "__main__":
    sys.exit(lightning_main(sys.argv[1:]))
