"""Train, validate, test or predict from a command line's arguments: LightningCLI over
:class:`~drive.train.module.PolicyModule` and :class:`~drive.data.datamodule.DriveDataModule`
with drive's checkpointing and logging defaults.

:func:`launch` is what ``drive fit | validate | test | predict`` runs (:mod:`drive.cli.fit` adds
the one-line error report) and what ``drive demo`` trains with, so both train identically from
the same YAML configs (shipped profiles by name: :mod:`drive.train.profiles`) and ``--group.key
value`` overrides.

Defaults added here: seed 1234 (``--seed_everything``), TensorBoard and CSV loggers under
``trainer.default_root_dir``, and two of Lightning's ``ModelCheckpoint`` groups writing to
``<default_root_dir>/checkpoints``: ``--checkpoint.*`` keeps the best by ``val/loss`` (the profiles
``ncp_ltc`` and ``demo``: by ``val/replay/score``);
``--last_checkpoint.*`` rewrites ``last.ckpt`` every ``every_n_train_steps`` (100) steps, at
every epoch end and when training ends (:class:`LastCheckpoint`), independent of validation, so
``--ckpt_path last`` resumes a killed run and a finished run's ``last.ckpt`` holds its final weights.
``--onpolicy.*`` adds on-policy data from log replay (:mod:`drive.train.onpolicy`; on in the profiles
``ncp_ltc`` and ``demo``, under ``trainer/ddp`` too, off without a profile).
``--val_replay.*`` validates by driving the validation logs in log replay (``val/replay/score``; on in
the profiles ``ncp_ltc`` and ``demo``; :mod:`drive.train.replay_validation`).
``--throughput.*`` logs training frames per second, end to end (:mod:`drive.train.throughput`).
``--budget.*`` sizes the step budget from the minutes of training logs where none is given (the profile
``demo``; :mod:`drive.train.budget`).
``predict`` writes the curvature for every frame to ``<default_root_dir>/predictions.csv``
(``--predictions.path``; :mod:`drive.train.predictions`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any, List, Optional

from lightning.fabric.plugins import CheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from drive.data.datamodule import DriveDataModule
from drive.io.checks import check_writable, existing_paths, read_yaml
from drive.train.budget import StepBudget, check_budget
from drive.train.checkpoint_io import AtomicCheckpointIO
from drive.train.hparams import checkpoint_hparams
from drive.train.module import PolicyModule
from drive.train.onpolicy import OnPolicyData
from drive.train.predictions import PredictionCSV
from drive.train.profiles import resolve_config_args
from drive.train.refusal import no_trace_if_refused
from drive.train.replay_validation import ReplayValidation
from drive.train.throughput import Throughput

__all__ = [
    "DriveCLI",
    "LastCheckpoint",
    "launch",
    "parse",
    "check_ckpt_path",
    "CheckpointNotFound",
    "DEFAULT_ROOT",
]

DEFAULT_ROOT = "runs/fit"
CKPT_KEYWORDS = ("best", "last", "hpc")  # resolved by Lightning, not paths


class CheckpointNotFound(FileNotFoundError):
    """``--ckpt_path`` names a local file that is not there."""


def check_ckpt_path(ckpt_path: Optional[str]) -> None:
    """Refuse a missing local checkpoint before any data is cached or model built (keywords and URLs pass)."""
    if ckpt_path is None:
        return
    path = str(ckpt_path)
    if path in CKPT_KEYWORDS or path.startswith("registry") or "://" in path:
        return
    if os.path.isdir(path):
        raise CheckpointNotFound(f"--ckpt_path {path}: is a directory, not a checkpoint file")
    if not os.path.isfile(path):
        raise CheckpointNotFound(f"--ckpt_path {path}: no such checkpoint file")


def check_root(root: str, data: Any) -> None:
    """Refuse a ``--trainer.default_root_dir`` that cannot be written, is one of the logs the run
    reads, or lies inside one (the run's files would be read as logs next time, or written over a
    recording), before anything is read or made."""
    check_writable(root, f"--trainer.default_root_dir {root}")
    if data.get("cache_dir"):
        check_writable(data.cache_dir, f"--data.cache_dir {data.cache_dir}")
    logs = [p for split in ("train", "val", "test", "predict") for p in (data.get(split) or [])]
    target = Path(os.path.realpath(root))
    for path in existing_paths(logs):
        if target == path or path in target.parents:
            where = "is" if target == path else "lies inside"
            raise ValueError(
                f"--trainer.default_root_dir {root}: {where} the logs {path} the run reads; "
                "write the run elsewhere"
            )


def check_config_files(argv: List[str]) -> None:
    """Every ``--config`` file UTF-8 text holding a YAML mapping: an error naming the file, the line
    and column (not jsonargparse's whole parse error, or a decode error naming no file)."""
    for flag, value in zip(argv, argv[1:]):
        if flag in ("--config", "-c") and os.path.isfile(value):
            loaded = read_yaml(value, "--config ")
            if not isinstance(loaded, dict):
                kind = "empty" if loaded is None else f"a YAML {type(loaded).__name__}"
                raise ValueError(f"--config {value}: the file is {kind}; expected a mapping (group: options)")


class LastCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` that also writes ``last`` when training ends after its last
    save: Lightning does that only for a run that never saved, so a step budget ending between two
    intervals (``--trainer.max_steps 130`` with saves every 100 steps, mid-epoch) left ``last.ckpt``
    at step 100 while the run trained to 130. The state key stays ``ModelCheckpoint``'s, so
    checkpoints written before restore this callback's state."""

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        # Lightning's own bookkeeping (2.5, 2.6): the step of this callback's last save
        if self.save_last and self._last_global_step_saved != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        else:
            super().on_train_end(trainer, pl_module)

    @property
    def state_key(self) -> str:
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)


class DriveCLI(LightningCLI):
    """LightningCLI with drive's checkpointing and logging defaults."""

    hold_warnings = True  # a run's set-up warnings wait for its first batch (drive.train.refusal)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(LastCheckpoint, "last_checkpoint")
        parser.add_lightning_class_args(PredictionCSV, "predictions")  # acts only in `drive predict`
        parser.add_lightning_class_args(OnPolicyData, "onpolicy")  # on in the profiles ncp_ltc, demo
        parser.add_lightning_class_args(ReplayValidation, "val_replay")  # validation by driving
        parser.add_lightning_class_args(Throughput, "throughput")  # perf/train_frames_per_s
        parser.add_lightning_class_args(StepBudget, "budget")  # steps from the logs' minutes (demo profile)
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/loss",
                "checkpoint.mode": "min",
                "checkpoint.save_top_k": 1,
                "checkpoint.filename": "best-epoch{epoch}-step{step}",
                "checkpoint.auto_insert_metric_name": False,
                # last.ckpt: independent of validation, every N steps and at every epoch end
                "last_checkpoint.monitor": None,
                "last_checkpoint.save_top_k": 0,
                "last_checkpoint.save_last": True,
                "last_checkpoint.every_n_train_steps": 100,
            }
        )

    def _parse_ckpt_path(self) -> None:
        """``--ckpt_path``'s model hyperparameters go over the command line's (as Lightning's own), in
        today's names also for checkpoints of earlier versions (:mod:`drive.train.hparams`); a missing,
        empty, truncated or foreign file is named here (not a bare ``EOFError``), before any data is
        cached."""
        sub = self.config.get("subcommand")
        path = self.config[sub].get("ckpt_path") if sub else None
        check_ckpt_path(path)
        hparams = checkpoint_hparams(path) if path is not None and os.path.isfile(str(path)) else {}
        if hparams:
            self.config = self.parser.parse_object({sub: {"model": hparams}}, self.config)

    def instantiate_trainer(self, **kwargs: Any) -> Any:
        """The trainer, with :class:`AtomicCheckpointIO` unless the config names a CheckpointIO plugin."""
        plugins = self._get(self.config_init, "trainer", default={}).get("plugins")
        plugins = (
            [] if plugins is None else list(plugins) if isinstance(plugins, (list, tuple)) else [plugins]
        )
        if not any(isinstance(p, CheckpointIO) for p in plugins):
            kwargs["plugins"] = [*plugins, AtomicCheckpointIO()]
        return super().instantiate_trainer(**kwargs)

    def _run_subcommand(self, subcommand: str) -> None:
        """The subcommand; refused before its first batch, it leaves no logger folder behind
        (:mod:`drive.train.refusal`)."""
        with no_trace_if_refused(self.trainer, hold_warnings=self.hold_warnings):
            super()._run_subcommand(subcommand)

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        check_ckpt_path(cfg.get("ckpt_path"))
        if self.subcommand == "fit":
            check_budget(cfg.trainer, cfg.budget.steps_per_minute)
        root = cfg.trainer.default_root_dir or DEFAULT_ROOT
        check_root(root, cfg.data)
        cfg.trainer.default_root_dir = root
        for group in (cfg.checkpoint, cfg.last_checkpoint):
            if group.dirpath is None:
                group.dirpath = os.path.join(root, "checkpoints")
        if cfg.trainer.logger is None or cfg.trainer.logger is True:
            cfg.trainer.logger = [
                {
                    "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                    "init_args": {"save_dir": root, "name": "tensorboard"},
                },
                {
                    "class_path": "lightning.pytorch.loggers.CSVLogger",
                    "init_args": {"save_dir": root, "name": "csv"},
                },
            ]
            cfg.trainer.callbacks = list(cfg.trainer.callbacks or []) + [
                {
                    "class_path": "lightning.pytorch.callbacks.LearningRateMonitor",
                    "init_args": {"logging_interval": "step"},
                }
            ]


def _notes_to_stdout() -> None:
    """Lightning's progress notes ("Seed set to ...", "GPU available ...") are information, not
    errors: they go to stdout, so stderr holds warnings and, on bad input, the one error line."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        for handler in logging.getLogger(name).handlers:
            if (
                isinstance(handler, logging.StreamHandler)
                and getattr(handler, "stream", None) is sys.__stderr__
            ):
                handler.setStream(_CurrentStdout())  # type: ignore[arg-type]
    # Lightning's advertisement for its cloud logger on every fit is not a note about the run
    notes = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _NoTips) for f in notes.filters):
        notes.addFilter(_NoTips())


class _NoTips:
    """Drops Lightning's "💡 Tip: ..." log records (product tips, nothing about the run)."""

    def filter(self, record: object) -> bool:
        return not str(getattr(record, "msg", "")).startswith("💡 Tip")


class _CurrentStdout:
    """Whatever ``sys.stdout`` is at the time of the write (it may be swapped, e.g. by pytest)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


class _DebugCLI(DriveCLI):
    hold_warnings = False  # --debug: every warning when it is issued


def launch(argv: Optional[List[str]] = None, debug: bool = False) -> Any:
    """Run ``fit | validate | test | predict`` with the rest of ``argv`` (as ``drive <subcommand>``;
    ``None``: ``sys.argv[1:]``) and return the configuration it ran with (the subcommand's group of
    LightningCLI's parse, as :func:`parse` returns it).

    Errors of input (a missing ``--ckpt_path``, a damaged checkpoint, bad logs, an unwritable or
    full output location) propagate as the ``ValueError`` / ``OSError`` that names them; a bad
    option exits through jsonargparse's ``SystemExit`` with its usage message, as LightningCLI does.
    ``--config`` takes shipped profiles by name (``ncp_ltc``, ``trainer/cpu``; :mod:`drive.train.profiles`);
    one that is neither a file nor a profile raises :class:`~drive.train.profiles.UnknownProfile`.
    ``debug`` shows the warnings of a run's set-up when they are issued (else they wait for its
    first batch, and a refused run prints none).
    """
    cli = _cli(_DebugCLI if debug else DriveCLI, argv)
    return cli.config[cli.subcommand]


def parse(argv: List[str]) -> Any:
    """The configuration ``launch(argv)`` would run with: profiles, files and ``--group.key value``
    overrides merged by LightningCLI's own parser, defaults filled in (``parse(argv).trainer.max_steps``,
    ``.onpolicy.noise_std``), without seeding, building or running anything."""
    cli = _cli(_ParseOnly, argv)
    return cli.config[cli.config["subcommand"]]


def _cli(cls: type, argv: Optional[List[str]]) -> DriveCLI:
    argv = resolve_config_args(list(sys.argv[1:] if argv is None else argv))
    check_config_files(argv)
    _notes_to_stdout()

    with warnings.catch_warnings():
        # `drive fit ...` hands its own command line over as ``args``; LightningCLI would warn that
        # sys.argv holds arguments too, which is exactly how it is meant here.
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
        # Lightning's own use of APIs that jsonargparse and torch have since deprecated: nothing a
        # user of drive can act on (only warnings raised from those two Lightning modules)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"lightning\.pytorch\.cli")
        warnings.filterwarnings(
            "ignore",
            message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
            module=r"lightning\.pytorch\.utilities\._pytree",
        )
        command = next(iter(argv), "")
        if command in ("validate", "test", "predict"):
            # Evaluating a checkpoint does not train, so the checkpoint callbacks restored from it
            # have nothing to do: Lightning's notes that they differ or moved are noise there.
            warnings.filterwarnings("ignore", message="Be aware that when using `ckpt_path`, callbacks")
            warnings.filterwarnings("ignore", message="The dirpath has changed from")
        return cls(
            PolicyModule,
            DriveDataModule,
            args=argv,
            seed_everything_default=1234,
            save_config_kwargs={"overwrite": True},
            # a refused option raises (jsonargparse's ArgumentError): drive.cli.fit reports it in one
            # line instead of jsonargparse's usage dump
            parser_kwargs={"prog": "drive", "default_env": False, "exit_on_error": False},
            auto_configure_optimizers=False,
        )


class _ParseOnly(DriveCLI):
    """:class:`DriveCLI` that stops after the parse (:func:`parse`): no seed set, nothing built or run."""

    def _set_seed(self) -> None:
        pass

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass

    def _run_subcommand(self, subcommand: str) -> None:
        pass
