"""HEPPO-GAE (seed 000): PPO whose GAE stage runs on a pipelined FPGA unit on a ZCU106."""

from __future__ import annotations

from .design import Design, KernelSpec, NetSpec
from .nets import mlp

SEED = "000_59d025344122ac46.txt"
TITLE = "HEPPO-GAE: Hardware-Efficient Proximal Policy Optimization with Generalized Advantage Estimation"

# Gymnasium's Humanoid-v5 observes 348 values (v1-v4: 376); the networks read what the env gives.
OBS = 348
ACT = 17


def designs():
    return [
        Design(
            name="heppo-ppo",
            seed_file=SEED,
            seed_title=TITLE,
            algorithm="ppo",
            env_id="Humanoid-v5",
            env_notes="Gymnasium MuJoCo Humanoid (the seed profiles PPO on Gymnasium's Humanoid, Table I, Fig. 7)",
            obs_shape=(OBS,),
            action_dim=ACT,
            action_space="continuous",
            networks=(
                NetSpec("policy", "actor",
                        lambda s: mlp("policy", OBS, (64, 64), ACT, act="tanh", out_gain=0.01, seed=s)),
                NetSpec("value", "critic", lambda s: mlp("value", OBS, (64, 64), 1, act="tanh", out_gain=1.0, seed=s)),
            ),
            kernels=(
                # trajectories x steps: the rollout (num_envs x num_steps below), one value for both
                KernelSpec("gae", "PL", "uq<8>", "fp32",
                           {"pes": 64, "lookahead": 2, "bits": 8},
                           "§III-B/C, §V-D: 64 PEs, 2-step lookahead, 8-bit codewords, 64 trajectories x 1024 steps"),
                KernelSpec("standardizer", "PL", "fp32", "fp32",
                           {"rewards": "dynamic", "values": "block", "bits": 8, "lanes": 8},
                           "§II-A/B/C: Welford dynamic standardization of rewards, block standardization of values, "
                           "8-bit uniform codes",
                           notes={"where": "the seed standardizes on the PS before the BRAM hand-off (§III-A); "
                                           "here a PL unit (fp32 words, float64 statistics, fp32 per-element "
                                           "standardization), 8 lanes per stream as our choice"}),
                KernelSpec("dense_forward", "PL", "fp32", "fp32", {},
                           "§V-D: DNN inference on the systolic array of Meng et al. (FCCM 2020) at 285 MHz",
                           notes={"array": "systolic", "clock_mhz": 285}),
            ),
            formats={"storage": "fp32", "acc": "fp32", "reward_code": "uq<8>", "value_code": "uq<8>",
                     "gae_datapath": "fp32"},
            device="zcu106",
            clocks_mhz={"PL": 300.0},
            batch_size=2048,
            hyperparams={
                "num_envs": 64, "num_steps": 1024, "gamma": 0.99, "gae_lambda": 0.95, "learning_rate": 3e-4,
                "num_minibatches": 32, "update_epochs": 10, "clip_coef": 0.2, "ent_coef": 0.0, "vf_coef": 0.5,
                "max_grad_norm": 0.5, "norm_adv": True, "anneal_lr": True, "optimizer": "adam",
                "reward_standardization": "dynamic", "value_standardization": "block",
                "experiment": 5,
            },
            seed_figures={
                "table_iv_64pe_2step": {"lut": 12864, "ff": 54336, "dsp": 768},
                "pe_throughput_elements_per_s": 300e6,
                "memory_bytes_64x1024": 131072,
                "bram36_capacity": 29,
                "bram36_bandwidth": 32,
                "bandwidth_bytes_per_cycle": 256,
                # Table I (CPU only) under the PPO trainer's phase names: [the seed's name, % of PPO time]
                "phase_shares": {
                    "dnn_inference": ["DNN Inference", 10.46], "env_run": ["Trajectory Environment Run", 60.71],
                    "storing_trajectories": ["Storing Trajectories", 4.75], "gae_fetch": ["GAE Memory Fetch", 3.49],
                    "gae_compute": ["GAE Computation", 11.23], "gae_write": ["GAE Memory Write", 0.32],
                    "update_forward": ["Network Update (forward + losses)", 6.10],
                    "backprop": ["Backpropagation", 2.95]},
                "table_i_cpu_gpu_percent": {"dnn_inference": 9.92, "env_run": None, "cpu_gpu_comm": 0.85,
                                            "storing_trajectories": 5.73, "gae_fetch": 5.00, "gae_compute": 24.79,
                                            "gae_write": 0.17, "backprop": 1.77},
            },
            # one update of the seed's rollout: the demonstration builds and trains the GAE unit the seed sizes;
            # perf's timing run takes a smaller rollout (probe) and scales its graph phases to this one
            demo={"steps": 65536, "probe": {"num_envs": 8, "num_steps": 256, "num_minibatches": 8}},
            choices=(
                "networks: the seed adapts Meng et al.'s systolic array and gives no layer sizes; "
                "CleanRL ppo_continuous_action's 64-64 tanh actor and critic are used",
                "rollout: 64 trajectories x 1024 timesteps as §IV-A/§V-D size the GAE memory; "
                "other PPO hyperparameters are CleanRL ppo_continuous_action's defaults",
                "GAE datapath fp32: §V-D says 32-bit data after de-quantization; 768 DSPs / 64 PEs = 12 per PE "
                "fits four fp32 multipliers of 3 DSP48E2 each at 2-step lookahead",
                "Humanoid-v5 observes 348 values (the seed's era had 376)",
                "default experiment 5 of Table III (dynamic reward standardization + block values, 8-bit)",
            ),
        )
    ]
