"""Network shapes the seed designs share: plain MLPs and the Nature-DQN convnet."""

from __future__ import annotations

import math

from .network import Conv2d, Dense, Flatten, Network, ReLU, Sigmoid, Softmax, Tanh

_ACTS = {"relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid, "softmax": Softmax}


def _act(name):
    return _ACTS[name]() if name else None


def mlp(name, in_dim, hidden, out_dim, *, act="relu", out_act=None, out_gain=1.0, seed=0, init="orthogonal"):
    """in_dim -> hidden... -> out_dim; hidden layers use gain sqrt(2) (CleanRL layer_init)."""
    layers = []
    for h in hidden:
        layers += [Dense(h, gain=math.sqrt(2)), _act(act)]
    layers.append(Dense(out_dim, gain=out_gain))
    if out_act:
        layers.append(_act(out_act))
    return Network(name, (in_dim,), layers, seed=seed, init=init)


def nature_cnn_layers(out_dim, *, out_gain=1.0, out_act=None):
    """Mnih et al. 2015 / AP-DRL Table III: 84x84x4 -> conv 8/4, 4/2, 3/1 -> 3136 -> 512 -> out."""
    g = math.sqrt(2)
    layers = [
        Conv2d(32, 8, stride=4, gain=g), ReLU(),
        Conv2d(64, 4, stride=2, gain=g), ReLU(),
        Conv2d(64, 3, stride=1, gain=g), ReLU(),
        Flatten(),
        Dense(512, gain=g), ReLU(),
        Dense(out_dim, gain=out_gain),
    ]
    if out_act:
        layers.append(_act(out_act))
    return layers


def nature_cnn(name, out_dim, *, out_gain=1.0, out_act=None, seed=0):
    return Network(name, (4, 84, 84), nature_cnn_layers(out_dim, out_gain=out_gain, out_act=out_act), seed=seed)
