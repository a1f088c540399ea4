"""Writes the exporter corpus beside this file: small SB3-style actors exported by torch's two
exporters, as users bring them. Needs torch (not a test dependency: the .onnx files are committed).

    pip install torch==2.13.0 onnxscript stable-baselines3   # torch 2.13.0+cpu, SB3 2.9.2 were used
    python tests/data/onnx/make_corpus.py [NAME ...]

Each model follows SB3's export recipe (docs "Exporting models", TD3/DDPG: the policy's actor,
``th.onnx.export(model, dummy, path, opset_version=17, input_names=["input"])``): an SB3 actor
preprocesses the observation with ``obs.float()`` (the legacy exporter writes it as a no-op Cast),
flattens it (nn.Flatten) and runs ``mu`` (Linear / ReLU ... / Tanh). ``_legacy`` files come from
``dynamo=False``, ``_dynamo`` files from ``dynamo=True`` (torch >= 2.9's default).
"""

import contextlib
import io
import logging
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent


class Actor(nn.Module):
    """SB3's TD3 / DDPG Actor: preprocess (obs.float()), FlattenExtractor, mu."""

    def __init__(self, mu, scale=None):
        super().__init__()
        self.flatten = nn.Flatten()
        self.mu = mu
        self.scale = scale

    def forward(self, obs):
        y = self.mu(self.flatten(obs.float()))
        return y if self.scale is None else self.scale * y


class ViewActor(nn.Module):
    """A hand-written convolutional actor flattening with x.view(x.size(0), -1)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(2, 4, 3, stride=1), nn.ReLU(), nn.Conv2d(4, 4, 2, stride=2), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(4 * 2 * 2, 8), nn.ReLU(), nn.Linear(8, 2), nn.Tanh())

    def forward(self, x):
        h = self.conv(x)
        return self.head(h.view(h.size(0), -1))


class FlatActor(nn.Module):
    """torch.flatten(x) of a batch of one: Reshape(-1), the batch axis dropped."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 2)

    def forward(self, x):
        return torch.tanh(self.l2(torch.relu(self.l1(torch.flatten(x)))))


def mlp(*mid):
    return nn.Sequential(nn.Linear(3, 16), *mid, nn.Linear(16, 1), nn.Tanh())


def trained_bn(n, seed):
    bn = nn.BatchNorm1d(n)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # running statistics and an affine as after training
        bn.weight.copy_(1 + 0.2 * torch.randn(n, generator=g))
        bn.bias.copy_(0.1 * torch.randn(n, generator=g))
        bn.running_mean.copy_(0.5 * torch.randn(n, generator=g))
        bn.running_var.copy_(0.5 + torch.rand(n, generator=g))
    return bn


def models():
    torch.manual_seed(0)
    yield "sb3_td3_actor", Actor(mlp(nn.ReLU(), nn.Linear(16, 16), nn.ReLU())), (1, 3)
    # BatchNorm right after a Linear (folds into it) with fresh statistics: the legacy exporter shares
    # the equal tensors weight == running_var (ones) and bias == running_mean (zeros) through Identity
    # nodes; and after a ReLU (folds into the next Linear) with trained statistics
    yield "bn_actor", Actor(mlp(nn.BatchNorm1d(16), nn.ReLU(), trained_bn(16, 1), nn.Linear(16, 16), nn.ReLU())), (1, 3)
    yield "scaled_actor", Actor(mlp(nn.ReLU(), nn.Linear(16, 16), nn.ReLU()), scale=2.0), (1, 3)
    yield "acts_actor", Actor(mlp(nn.LayerNorm(16), nn.LeakyReLU(0.2), nn.Dropout(0.1), nn.Linear(16, 16), nn.Softplus(),
                                  nn.Linear(16, 16), nn.ReLU6(), nn.Linear(16, 16), nn.Hardtanh(), nn.Linear(16, 16),
                                  nn.Sigmoid())), (1, 3)
    yield "elu_actor", Actor(mlp(nn.ELU(), nn.Linear(16, 16), nn.ReLU())), (1, 3)
    yield "view_cnn_actor", ViewActor(), (1, 2, 6, 6)
    yield "flatten_all_actor", FlatActor(), (1, 2, 3)
    yield "silu_actor", Actor(mlp(nn.SiLU(), nn.Linear(16, 16), nn.ReLU())), (1, 3)
    yield "gelu_actor", Actor(mlp(nn.GELU(), nn.Linear(16, 16), nn.ReLU())), (1, 3)


class OnnxableSB3Policy(nn.Module):
    """SB3's docs ("Exporting models", ONNX) for PPO / A2C: the policy's deterministic forward, whose
    outputs are the actions, the values and the log-probability."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, observation):
        return self.policy(observation, deterministic=True)


class OnnxableSACActor(nn.Module):
    """SB3's docs for SAC: the actor's deterministic action (tanh of the Gaussian's mean; the log_std head
    and the distribution are in the graph too)."""

    def __init__(self, actor):
        super().__init__()
        self.actor = actor

    def forward(self, observation):
        return self.actor(observation, deterministic=True)


def sb3_models():
    """SB3's own policies through its export recipe (needs stable-baselines3); the legacy exporter only:
    torch.export cannot trace SB3's distributions (the dynamo exporter fails on them)."""
    from stable_baselines3 import PPO, SAC

    yield "sb3_ppo_policy", OnnxableSB3Policy(PPO("MlpPolicy", "Pendulum-v1", device="cpu", seed=0).policy), (1, 3)
    yield "sb3_sac_actor", OnnxableSACActor(SAC("MlpPolicy", "Pendulum-v1", device="cpu", seed=0).actor), (1, 3)


def main(only=()):
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    for name, model, shape in [*models(), *sb3_models()]:
        if only and name not in only:
            continue
        model.eval()
        for dynamo in (False,) if name.startswith("sb3_") and name != "sb3_td3_actor" else (False, True):
            path = HERE / f"{name}_{'dynamo' if dynamo else 'legacy'}.onnx"
            with contextlib.redirect_stdout(io.StringIO()):
                torch.onnx.export(model, torch.randn(*shape), str(path), opset_version=17, input_names=["input"],
                                  dynamo=dynamo)
            print(f"wrote {path.name}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])  # names: only those models
