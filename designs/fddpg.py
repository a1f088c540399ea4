"""F-DDPG (seed 002): DDPG gradient kernel for a 4-DoF robotic arm on a Stratix-V (Maxeler MAX4),
32-bit fixed point with 8 integer bits.

The three models of §V-A share the seed's gradient kernel (``ddpg_gradient``: the whole DDPG gradient of
a minibatch on the PL, the optimizer on the host). Model 1: one hidden layer of 108 ReLU nodes,
5 tanh actions, one linear Q; model 2: model 1 with the output layers padded to 24 nodes (the
networks keep their 24 outputs here; training uses the 5 and 1 real ones, the padded nodes are
zeros, as §V-A says); model 3: a second hidden layer of 108, on two FPGAs. The kernel pads every
model's output layers to 24 (§V-A: "the output layers require a minimum of 24 nodes"), so models 1
and 2 are the same hardware (Table VI: the same cycles).
"""

from __future__ import annotations

from .design import Design, KernelSpec, NetSpec
from .nets import mlp

SEED = "002_20cc6850fb6661bc.txt"
TITLE = "Customisable Control Policy Learning for Robotics"

# §IV-B: state = distances of the links to the box, the goal, and two booleans (box held, box near goal);
# action = 4 motor rates + the electromagnet. The seed gives no count; see `choices`.
OBS = 17
ACT = 5
PAD = 24  # §V-A: "the output layers require a minimum of 24 nodes" (the even layers' accumulator loop)
# Table I: 1913 DSP blocks for the kernel's 2176 tree multipliers (designs/kernels/ddpg_gradient.py)
DSP_PER_MULT = round(1913 / 2176, 4)
STORAGE = "fixed<32,8,RND,SAT>"
ACC = "fixed<64,16,RND,SAT>"
# The AMD part the Vitis HLS projects name (the MAX4's Stratix V 5SGSD8 has none): the Alveo U250's
# Virtex UltraScale+ VU13P-class FPGA, a PCIe card with an x86 host as the MAX4. A fixed<32,8> product
# takes 4 DSP48E2 (27x18 each), so the kernel's 2,176 tree multipliers need ~8,704 of its 12,288
# (AMD DS962 Alveo U200/U250 data sheet); the KU15P of the CPP designs (1,968) could not hold them.
BUILD_PART = "xcu250-figd2104-2L-e"

MODELS = {
    "m1": dict(hidden=(108,), out_pad=None, fpgas=1, cycles=5450, time_ms=0.028, table_iii_ms=0.250,
               table_v_ms=0.0492, table_iv={"numpy_s": 361.2, "c_fpga_s": 88.6},
               speedups={"iii": 2.57, "v": 13.1, "vi": 23},
               normalized={"iii": 5.14, "iv": 8.14, "v": 26.2, "vi": 47}, note="single hidden layer of 108 ReLU nodes"),
    "m2": dict(hidden=(108,), out_pad=PAD, fpgas=1, cycles=5450, time_ms=0.028, table_iii_ms=0.250,
               table_v_ms=0.0492, table_iv={"numpy_s": 401.2, "c_fpga_s": 88.6},
               speedups={"iii": 3.68, "v": 18.7, "vi": 33},
               normalized={"iii": 7.36, "iv": 9.06, "v": 37.3, "vi": 67},
               note="model 1 with output layers padded to 24 nodes (the even-layer accumulator latency)"),
    "m3": dict(hidden=(108, 108), out_pad=None, fpgas=2, cycles=17000, time_ms=0.085, table_iii_ms=2.311,
               table_v_ms=None, table_iv=None, speedups={"iii": 1.33, "vi": 35},
               normalized={"iii": 2.66, "vi": 71},
               note="model 1 with a second hidden layer of 108 nodes "
                    "(the kernel pads the outputs to 24 as in model 2); "
                    "actor and critic learning on two FPGAs (Table III: over Infiniband)"),
}

# Lillicrap et al. (the seed's [2]) where the seed is silent; §V-A: batch 32; §V-B: 1300 episodes of
# 300 gradients each
HYPERPARAMS = {
    "actor_learning_rate": 1e-4, "critic_learning_rate": 1e-3, "gamma": 0.99, "tau": 0.001,
    "buffer_size": 1_000_000, "noise": "ou", "ou_theta": 0.15, "ou_dt": 1.0, "exploration_noise": 0.2,
    "optimizer": "adam", "policy_frequency": 1, "learning_starts": 1_000, "steps_per_update": 300,
    "total_timesteps": 390_000, "precision": "mixed",
    # described, not DDPGArgs fields: the seed's budget
    "episodes": 1300, "gradients_per_episode": 300,
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
            # the ddpg_gradient kernel computes it that way
            NetSpec("critic", "critic",
                    lambda s: mlp("critic", OBS + ACT, hidden, c_out, act="relu", seed=s, init="uniform"),
                    target=True, extra_inputs=ACT),
        ),
        kernels=(
            KernelSpec("ddpg_gradient", "PL", STORAGE, ACC,
                       {"obs": OBS, "act": ACT, "hidden": list(hidden), "batch": 32, "gamma": 0.99, "rows": 4,
                        "cols": 4, "tree": 16, "out_pad": PAD, "acc_latency": 24, "fpgas": m["fpgas"],
                        "dsp_per_mult": DSP_PER_MULT},
                       "§III: the whole gradient (actor and critic learning, target pass) with the optimizer on the "
                       "host",
                       notes={"odd_even": True, "madd_trees": [4, 4], "fusion_layer": True,
                              "shared_multiplexers": True}),
        ),
        formats={"storage": STORAGE, "acc": ACC, "ps": "fp32", "master": "fp32"},
        device="max4-5sgsd8",
        part=BUILD_PART,
        clocks_mhz={"PL": 200.0},
        batch_size=32,
        hyperparams=dict(HYPERPARAMS),
        seed_figures={
            "table_vi_cycles": m["cycles"], "table_vi_time_ms": m["time_ms"],
            "table_iii_exe_ms": m["table_iii_ms"], "table_v_exe_ms": m["table_v_ms"], "table_iv": m["table_iv"],
            "speedups": m["speedups"], "normalized_speedups": m["normalized"],  # Tables III-VI, as printed
            "resources": ({"logic": 143569, "ff_primary": 304025, "dsp": 1913, "m20k": 1913} if key != "m3"
                          else {"logic": 129013, "ff_primary": 267999, "dsp": 1896, "m20k": 1930}),
            "table_vii": {  # episodes to 'attach' / 'put' (x: never; '*': reached without lifting the box)
                "DDPG": {"A": (600, None), "B": (800, "800*"), "C": (600, 1200), "D": (800, 1200), "E": (600, 1000),
                         "F": (800, "800*")},
                "F-DDPG": {"A": (800, None), "B": (800, "1000*"), "C": (600, 600), "D": (600, 1000), "E": (600, 1000),
                           "F": (600, "1000*")},
            },
        },
        choices=(
            m["note"],
            "state of 17 values: tip-to-box vectors of the 4 links (12), box-to-goal vector (3), box-held and "
            "near-goal flags (2); the seed names these quantities but not their count",
            "the arm (host/envs/robotic_arm.py): links 150 / 250 / 250 / 100 mm, 1.8-degree steps, up to 4 steps "
            "per action, pick-up within 25 mm, reward weights (1, 0.1, 0.1, 1); the seed gives none of these",
            "fixed<32,8>: rounding and overflow modes are not given; RND and SAT are used",
            "accumulator fixed<64,16,RND,SAT>: the exact product of two fixed<32,8> values (the seed gives no "
            "accumulator width); a MADD tree's sum is exact and the accumulator saturates",
            "kernel parallelism: 4 x 4 MADD trees (Fig. 1's example) of 16 products; the seed does not give it. "
            "DSP blocks per product 0.88, from Table I (1913 blocks / 2176 multipliers)",
            "tanh: hls4ml's 1024-entry table (the same as the exported policy)",
            f"build part {BUILD_PART} (Alveo U250, a PCIe card with an x86 host like the MAX4; the Stratix V has no "
            "AMD part): a fixed<32,8> product takes 4 DSP48E2, so the kernel's 2,176 tree multipliers need ~8,704 "
            "of its 12,288 DSP48E2 (AMD DS962), which the KU15P of the CPP designs (1,968) could not hold. The "
            "seed's figures stay on the Stratix V (device max4-5sgsd8)",
            "DDPG hyperparameters from Lillicrap et al. (the seed's [2]): Adam 1e-4 / 1e-3, tau 0.001, OU noise "
            "theta 0.15 sigma 0.2 (dt 1), one critic and one actor step per env step; the optimizer runs on the "
            "host (§III)",
        ),
        demo={"steps": 30_000, "set": {"buffer_size": 100_000}},
    )


def designs():
    return [_design(k, m) for k, m in MODELS.items()]
