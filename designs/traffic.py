"""A2C traffic-signal control (seed 004): a small convnet A2C whose MAC-array compute element runs
on the PL of a Zynq, environment SUMO through sumo-rl."""

from __future__ import annotations

from .design import Design, KernelSpec, NetSpec
from .network import Conv2d, Dense, Flatten, Network, ReLU, Softmax

SEED = "004_9e2832805631524e.txt"
TITLE = "Hardware Acceleration of Deep Reinforcement Learning: Application in Traffic Signal Control"


def _trunk(seed):
    # 12x12 occupancy -> conv 2x2 (4 filters) -> 11x11x4 = 484 -> fc 48: the 48 x 484 weight-gradient
    # stage with 4 MACs gives the seed's 48*484/4 = 5808 iterations.
    return Network("trunk", (1, 12, 12), [Conv2d(4, 2, stride=1), ReLU(), Flatten(), Dense(48), ReLU()], seed=seed)


def designs():
    return [
        Design(
            name="a2c-traffic",
            seed_file=SEED,
            seed_title=TITLE,
            algorithm="a2c",
            env_id="rlhls/SumoIntersection-v0",
            env_notes="one four-way intersection in SUMO via sumo-rl; phases {NSL, NS, EWL, EW} with the seed's "
                      "8-step signal plan; state a 12x12 lane-occupancy matrix (four road blocks); reward the drop "
                      "in total waiting time",
            obs_shape=(1, 12, 12),
            action_dim=4,
            action_space="discrete",
            networks=(
                NetSpec("trunk", "trunk", _trunk, optimizer="rmsprop"),
                NetSpec("policy", "actor", lambda s: Network("policy", (48,), [Dense(4, gain=0.01), Softmax()], seed=s),
                        input_from="trunk", optimizer="rmsprop"),
                NetSpec("value", "critic", lambda s: Network("value", (48,), [Dense(1, gain=1.0)], seed=s),
                        input_from="trunk", optimizer="rmsprop"),
            ),
            kernels=(
                KernelSpec("mac_array", "PL", "fp32", "fp32", {"macs": 4},
                           "Fig. 4 and the FSM listing: four MACs, input_1 shared, one BRAM output buffer per MAC",
                           notes={"fsm_states": 11, "stages": ["fwd_conv", "fwd_fc", "bwd_delta", "bwd_wgrad",
                                                               "bwd_conv_wgrad"]}),
            ),
            formats={"storage": "fp32", "acc": "fp32"},
            device="zcu106",
            clocks_mhz={"PL": 100.0},
            batch_size=32,
            hyperparams={"optimizer": "rmsprop", "learning_rate": 7e-4, "rmsprop_alpha": 0.99, "rmsprop_eps": 1e-5,
                         "gamma": 0.99, "n_steps": 32, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5,
                         "phase_seconds": [30, 5, 15, 5, 30, 5, 15, 5]},
            seed_figures={"fc1_weight_gradient_iterations": 5808, "macs": 4, "fc1_out": 48},
            choices=(
                "conv 2x2 stride 1 with 4 filters on one 12x12 channel: the seed gives 484 = 11x11x4 inputs to fc1 "
                "but not the kernel",
                "ReLU after conv and fc1 (the seed does not name them); softmax policy head, linear value head",
                "fp32 arithmetic: the seed does not give the number format",
                "ZCU106 at 100 MHz: the seed names a Zynq PS+PL but not the board or clock",
                "batch 32 (n_steps) and RMSprop settings of Stable-Baselines3's A2C; the seed gives RMSprop only",
            ),
        )
    ]
