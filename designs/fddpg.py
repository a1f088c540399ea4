"""F-DDPG (seed 002): DDPG gradient kernel for a 4-DoF robotic arm on a Stratix-V (Maxeler MAX4),
32-bit fixed point with 8 integer bits."""

from __future__ import annotations

from .design import Design, KernelSpec, NetSpec
from .nets import mlp

SEED = "002_20cc6850fb6661bc.txt"
TITLE = "Customisable Control Policy Learning for Robotics"

# §IV-B: state = distances of the links to the box, the goal, and two booleans (box held, box near goal);
# action = 4 motor rates + the electromagnet. The seed gives no count; see `choices`.
OBS = 17
ACT = 5

MODELS = {
    "m1": dict(hidden=(108,), out_pad=None, cycles=5450, time_ms=0.028, table_iii_ms=0.250, table_v_ms=0.0492,
               table_iv={"numpy_s": 361.2, "c_fpga_s": 88.6}, note="single hidden layer of 108 ReLU nodes"),
    "m2": dict(hidden=(108,), out_pad=24, cycles=5450, time_ms=0.028, table_iii_ms=0.250, table_v_ms=0.0492,
               table_iv={"numpy_s": 401.2, "c_fpga_s": 88.6},
               note="model 1 with output layers padded to 24 nodes (the even-layer accumulator latency)"),
    "m3": dict(hidden=(108, 108), out_pad=None, cycles=17000, time_ms=0.085, table_iii_ms=2.311, table_v_ms=None,
               table_iv=None, note="model 1 with a second hidden layer of 108 nodes; actor and critic on two FPGAs"),
}


def _design(key: str, m: dict) -> Design:
    hidden = m["hidden"]
    a_out = m["out_pad"] or ACT
    c_out = m["out_pad"] or 1
    return Design(
        name=f"fddpg-arm-{key}",
        seed_file=SEED,
        seed_title=TITLE,
        algorithm="ddpg",
        env_id="rlhls/RoboticArm-v0",
        env_notes="the seed's simulated 4-DoF arm moving a box with an electromagnet (§IV-B, reward eq. 7-11)",
        obs_shape=(OBS,),
        action_dim=ACT,
        action_space="continuous",
        networks=(
            NetSpec("actor", "actor",
                    lambda s: mlp("actor", OBS, hidden, a_out, act="relu", out_act="tanh", out_gain=0.01, seed=s,
                                  init="uniform"),
                    target=True),
            # §III-C splits the critic's first layer into state and action halves plus a fusion layer;
            # a Dense over the concatenated (state, action) computes the same sums.
            NetSpec("critic", "critic",
                    lambda s: mlp("critic", OBS + ACT, hidden, c_out, act="relu", seed=s, init="uniform"),
                    target=True, extra_inputs=ACT),
        ),
        kernels=(
            KernelSpec("dense_forward", "PL", "fixed<32,8,RND,SAT>", "fixed<48,16,RND,SAT>", {},
                       "§III-A/B: odd layers column-major, even layers row-major",
                       notes={"odd_even": True, "madd_trees": [4, 4]}),
            KernelSpec("dense_backward", "PL", "fixed<32,8,RND,SAT>", "fixed<48,16,RND,SAT>", {},
                       "§III-C: node deltas then weight gradients on shared DSPs",
                       notes={"shared_multiplexers": True}),
        ),
        formats={"storage": "fixed<32,8,RND,SAT>", "acc": "fixed<48,16,RND,SAT>", "host": "fp32"},
        device="max4-5sgsd8",
        clocks_mhz={"PL": 200.0},
        batch_size=32,
        hyperparams={
            "actor_lr": 1e-4, "critic_lr": 1e-3, "gamma": 0.99, "tau": 0.001, "buffer_size": 1_000_000,
            "noise": "ornstein-uhlenbeck", "ou_theta": 0.15, "ou_sigma": 0.2, "episodes": 1300,
            "gradients_per_episode": 300, "optimizer": "adam (host)",
        },
        seed_figures={
            "table_vi_cycles": m["cycles"], "table_vi_time_ms": m["time_ms"],
            "table_iii_exe_ms": m["table_iii_ms"], "table_v_exe_ms": m["table_v_ms"], "table_iv": m["table_iv"],
            "resources": ({"logic": 143569, "ff_primary": 304025, "dsp": 1913, "m20k": 1913} if key != "m3"
                          else {"logic": 129013, "ff_primary": 267999, "dsp": 1896, "m20k": 1930}),
        },
        choices=(
            m["note"],
            "state of 17 values: tip-to-box vectors of the 4 links (12), box-to-goal vector (3), box-held and "
            "near-goal flags (2); the seed names these quantities but not their count",
            "fixed<32,8>: rounding and overflow modes are not given; RND and SAT are used",
            "accumulator fixed<48,16,RND,SAT>: the seed does not give the accumulator width",
            "DDPG hyperparameters from Lillicrap et al. (the seed's [2]); the optimizer runs on the host (§V-B)",
        ),
    )


def designs():
    return [_design(k, m) for k, m in MODELS.items()]
