"""rlhls: an HLS design flow for training deep-RL agents on AMD/Xilinx SoCs."""

__version__ = "0.1.0"
