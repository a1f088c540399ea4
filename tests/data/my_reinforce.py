"""A user's algorithm and its design in one file, nothing of rlhls edited: REINFORCE with a learned
baseline (Williams 1992; Sutton & Barto 13.4). The rollout's discounted Monte-Carlo returns G_t are
cut at every episode end and at the rollout's end (no bootstrap from the value), the advantage is
G_t - V(s_t), and one gradient step on A2C's loss follows: A2C's trainer with its returns replaced."""

from dataclasses import dataclass

import numpy as np

from rlhls.designs import Dense, Design, KernelSpec, NetSpec, Network, Tanh
from rlhls.designs.graph import out_bytes
from rlhls.host.algorithms import Algorithm, register_algorithm
from rlhls.host.algorithms.a2c import A2C, A2CArgs
from rlhls.host.hyperparams import hp


@dataclass
class ReinforceArgs(A2CArgs):
    """REINFORCE's hyperparameters: A2C's, with whole-episode rollouts and Adam."""

    algorithm = "REINFORCE"
    n_steps: int = hp(64, "steps per sub-environment per rollout (the Monte-Carlo horizon)", low=1)
    optimizer: str = hp("adam", "rmsprop or adam", choices=("rmsprop", "adam"))
    rollouts_per_update: int = hp(1, "rollouts per runner update", low=1)


def batch(hp: dict) -> int:
    return hp["num_envs"] * hp["n_steps"]


class Reinforce(A2C):
    algorithm = "reinforce"

    def returns(self, rew, val, done, tval, boot, times):
        """G_t = r_t + gamma G_{t+1}, restarted at every episode end: (G - V, G) in the returns unit's format."""
        ret, g = np.zeros_like(rew, dtype=np.float64), np.zeros(rew.shape[1])
        for t in reversed(range(rew.shape[0])):
            g = rew[t] + self.hp["gamma"] * g * (done[t] == 0)
            ret[t] = g
        fmt = self.mp_p.precision(self.returns_unit).storage
        return fmt.quantize(ret - val), fmt.quantize(ret)


def reinforce_graph(bld, design, nets):
    """Its training graph: the returns (G_t, then G - V), both networks forward, one loss, backward, updates."""
    b, B = bld.batch, bld.B
    ret = bld.node("returns", "returns", "returns", 3 * b, 3 * b * B)
    outs = [(bld.forward(n, nets[n], "fwd"), out_bytes(bld, nets[n])) for n in ("policy", "value")]
    loss = bld.loss("loss", outs + [(ret, 2 * b * B)], design.action_dim)
    for n in ("policy", "value"):
        bwd = bld.backward(n, nets[n], "fwd", [(loss, out_bytes(bld, nets[n]))])
        bld.update(n, nets[n], bwd, design.net(n).optimizer)


register_algorithm(Algorithm("reinforce", Reinforce, ReinforceArgs, batch, summary="REINFORCE with a baseline",
                             graph=reinforce_graph,
                             grad_steps=lambda hp: 1.0 / batch(hp)))  # one gradient step per rollout (perf)


def net(name, out):
    return lambda seed: Network(name, (4,), [Dense(16), Tanh(), Dense(out)], seed=seed)


design = Design(
    name="cartpole-reinforce", seed_file="-", seed_title="a user's algorithm in one file", algorithm="reinforce",
    env_id="CartPole-v1", env_notes="Gymnasium classic control", obs_shape=(4,), action_dim=2,
    action_space="discrete",
    networks=(NetSpec("policy", "actor", net("policy", 2), optimizer="adam"),
              NetSpec("value", "critic", net("value", 1), optimizer="adam")),
    kernels=(KernelSpec("dense_forward", "PL", "fp32", "fp32", {"pf": 2}),),
    formats={"storage": "fp32", "acc": "fp32"}, device="zcu106", clocks_mhz={"PL": 200.0}, batch_size=32,
    hyperparams={"num_envs": 2, "n_steps": 16, "learning_rate": 1e-3})
