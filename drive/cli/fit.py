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
one-line error report, also for an option jsonargparse refuses (its usage dump is not printed).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import List, Optional

from lightning.fabric.utilities.exceptions import MisconfigurationException

from drive.cli.errors import INPUT_ERRORS, report_input_error
from drive.io.checks import load_yaml
from drive.train.launch import launch

__all__ = ["lightning_main", "option_error_line"]

_KEY = re.compile(r'^Parser key "([^"]+)":\s*(.*)$', re.S)
_EXPECTED = re.compile(r"Expected a <class '([\w.]+)'>")
_NAMES = {"dict": "a mapping", "NoneType": "null", "float": "a number", "int": "a whole number"}


def option_error_line(message: str) -> str:
    """jsonargparse's refusal of an option (``Parser key "onpolicy.share": Expected a <class
    'float'>. Got value: nan``, a union's list of subtypes ...) as one line naming the option
    as it is spelled on the command line: ``--onpolicy.share: expected a number, got nan``. A
    mapping given as YAML that does not parse says where the YAML breaks."""
    match = _KEY.match(message.strip())
    if match is None:
        return " ".join(line.strip() for line in message.splitlines() if line.strip())
    key, rest = match.groups()
    given = re.search(r"(?:Given value|Got value): (.*?)\s*$", rest, re.M)
    expected = list(dict.fromkeys(_EXPECTED.findall(rest)))
    if given is None or not expected:
        return f"--{key}: " + " ".join(line.strip() for line in rest.splitlines() if line.strip())
    value = given.group(1).strip()
    if "dict" in expected and value[:1] in "{[":
        load_yaml(value, f"--{key}")  # a YAML error names the option, line and column
    wanted = " or ".join(_NAMES.get(name, f"a {name}") for name in expected)
    if "float" in expected and value.lower().lstrip("+-.") in ("nan", "inf", "infinity"):
        wanted = "a finite number"
    return f"--{key}: expected {wanted}, got {value!r}"


def lightning_main(argv: Optional[List[str]] = None, debug: bool = False) -> int:
    """Run ``fit | validate | test | predict`` with the rest of ``argv`` (as ``drive <subcommand>``).

    Returns 0, or 2 with one line ``drive <subcommand>: error: ...`` on stderr when input is at
    fault (a refused option, a missing ``--ckpt_path``, a damaged checkpoint, bad logs, an
    unwritable or full output location: :data:`drive.cli.errors.INPUT_ERRORS`); ``debug``
    re-raises instead.
    """
    command = next(iter(sys.argv[1:] if argv is None else argv), "")
    try:
        launch(argv, debug=debug)
    except argparse.ArgumentError as e:
        if debug:
            raise
        try:
            line = option_error_line(str(e))
        except ValueError as yaml_error:
            line = str(yaml_error)
        return report_input_error(command, ValueError(f"{line} (see drive {command} --help)"))
    except (*INPUT_ERRORS, MisconfigurationException) as e:  # Lightning's word for a bad setting
        if debug:
            raise
        return report_input_error(command, e)
    return 0


if __name__ == "__main__":
    sys.exit(lightning_main(sys.argv[1:]))
