"""Where ``WiredCfC`` lived until the CfC package (``drive.nn.cfc``): checkpoints written then name
``drive.nn.wired_cfc.WiredCfC`` as their recurrent class, so this path must keep resolving."""

from drive.nn.cfc.wired import WiredCfC

__all__ = ["WiredCfC"]
