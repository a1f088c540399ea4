"""rlhls: an HLS design flow for training deep-RL agents on AMD/Xilinx SoCs.

``rlhls.Flow(design, out=...)`` carries one design through graph, profile, partition, build,
train and report (rlhls/api.py); ``rlhls.load(RUN_FOLDER)`` gives a run's trained policy with
Stable-Baselines3's ``predict`` (host/evaluation.py); ``import rlhls.envs`` registers the environments.
"""

from typing import TYPE_CHECKING, Any

from rlhls.core import __version__

if TYPE_CHECKING:
    from rlhls.api import Flow
    from rlhls.host.evaluation import load

__all__ = ["Flow", "load", "__version__"]


def __getattr__(name: str) -> Any:
    # lazy: the subpackages (designs, partition, flow, host) import this package first
    if name == "Flow":
        from .api import Flow

        return Flow
    if name == "load":
        from rlhls.host.evaluation import load

        return load
    raise AttributeError(f"module 'rlhls' has no attribute {name!r}")
