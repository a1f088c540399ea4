"""A user's own design: DDPG on Gymnasium's Pendulum-v1, the actor brought as ONNX.

    python examples/pendulum_ddpg/export_actor.py          # writes actor.onnx (once)
    rlhls designs examples/pendulum_ddpg/design.py
    rlhls run examples/pendulum_ddpg/design.py --steps 2000

The actor and its weights come from actor.onnx (export_actor.py); the critic is written in the
layer language. Nothing of rlhls is edited: this file is the whole design.
"""

from pathlib import Path

from rlhls.designs import Dense, Design, KernelSpec, NetSpec, Network, ReLU, import_onnx

HERE = Path(__file__).resolve().parent


def critic(seed):
    # Q(s, a): the state and the action side by side
    return Network("critic", (3 + 1,), [Dense(64), ReLU(), Dense(64), ReLU(), Dense(1)], seed=seed)


design = Design(
    name="pendulum-ddpg-onnx",
    seed_file="-",
    seed_title="a user's design: DDPG on Pendulum-v1 with an ONNX actor",
    algorithm="ddpg",
    env_id="Pendulum-v1",
    env_notes="Gymnasium classic control",
    obs_shape=(3,),
    action_dim=1,
    action_space="continuous",
    networks=(
        NetSpec("actor", "actor", lambda seed: import_onnx(HERE / "actor.onnx", "actor"), target=True),
        NetSpec("critic", "critic", critic, target=True, extra_inputs=1),
    ),
    kernels=(
        KernelSpec("dense_forward", "PL", "fp32", "fp32", {"pf": 4}),
        KernelSpec("dense_backward", "PL", "fp32", "fp32", {"pf": 4}),
        KernelSpec("weight_gradient", "PL", "fp32", "fp32", {"pf": 4}),
        KernelSpec("weight_update", "PL", "fp32", "fp32", {"optimizer": "adam"}),
    ),
    formats={"storage": "fp32", "acc": "fp32"},
    device="zcu106",
    clocks_mhz={"PL": 200.0},
    batch_size=64,
    hyperparams={"learning_rate": 1e-3, "buffer_size": 100_000, "gamma": 0.98, "tau": 0.005, "noise": "gaussian",
                 "exploration_noise": 0.1, "learning_starts": 1000, "policy_frequency": 1, "optimizer": "adam",
                 "total_timesteps": 20_000},
    demo={"steps": 2000, "set": {"learning_starts": 500}},
)
