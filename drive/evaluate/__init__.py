"""Noise-robustness evaluation: open loop, closed loop, saliency stability, sensitivity
(docs/robustness.md)."""

from drive.evaluate.robustness import RobustnessConfig, evaluate_model, robustness_report
from drive.evaluate.ssim import ssim, ssim_map

__all__ = ["RobustnessConfig", "robustness_report", "evaluate_model", "ssim", "ssim_map"]
