"""Customised Pearlmutter Propagation (seed 001): TRPO whose Fisher-vector product runs on a
Stratix-V (Maxeler MAX4) in 27-bit fixed point."""

from __future__ import annotations

from .design import Design, KernelSpec, NetSpec
from .nets import mlp

SEED = "001_4247f8639c570da7.txt"
TITLE = "Customised Pearlmutter Propagation: A Hardware Architecture for Trust Region Policy Optimisation"

SAMPLES = 50000  # §IV-A: "50000 samples for each benchmark" (one TRPO iteration's data set)
FVP_ACC = "fixed<53,21,RND,SAT>"  # the FVP unit's accumulator (a choice: see the design's choices)
# The AMD part the Vitis HLS projects name (the seed's Stratix V 5SGSD8 has none); designs/devices.py 'ku15p'.
BUILD_DEVICE = "ku15p"
BUILD_PART = "xcku15p-ffve1517-2-e"

# §IV-A: Ant-v1 111-64-32-8, Humanoid-v1 376-128-64-17, tanh. Gymnasium v5 observes fewer values
# (Ant 105, Humanoid 348); the environment adapter pads with zeros so the hardware stays the seed's.
CASES = {
    "ant": dict(env="Ant-v5", env_obs=105, obs=111, hidden=(64, 32), act=8, parallelism=[16, 8, 5, 8],
                table_i={"logic": 133112, "ff": 256505, "dsp": 1377, "bram_m20k": 1846},
                table_ii={"model_s": 0.158, "cg_fpga_s": 0.192, "fvp_fpga_s": 0.182, "cg_keras_s": 3.976,
                          "fvp_keras_s": 3.975, "speedup": 20.70},
                mape_percent=0.007, ku15p_dsp=1688, total_timesteps=1_000_000,
                demo={"steps": SAMPLES, "probe": {"num_steps": 2048}}),
    "humanoid": dict(env="Humanoid-v5", env_obs=348, obs=376, hidden=(128, 64), act=17, parallelism=[48, 4, 8, 2],
                     table_i={"logic": 140238, "ff": 269357, "dsp": 1368, "bram_m20k": 1888},
                     table_ii={"model_s": 0.823, "cg_fpga_s": 0.892, "fvp_fpga_s": 0.852, "cg_keras_s": 12.016,
                               "fvp_keras_s": 12.014, "speedup": 13.47},
                     mape_percent=0.028, ku15p_dsp=1732, total_timesteps=1_000_000,
                     demo={"steps": SAMPLES, "probe": {"num_steps": 2048}}),
}


def _design(case: str, c: dict) -> Design:
    obs, act, hidden = c["obs"], c["act"], c["hidden"]
    n_policy = obs * hidden[0] + hidden[0] + hidden[0] * hidden[1] + hidden[1] + hidden[1] * act + act + act
    return Design(
        name=f"cpp-trpo-{case}",
        seed_file=SEED,
        seed_title=TITLE,
        algorithm="trpo",
        env_id=c["env"],
        env_notes=f"Gymnasium MuJoCo {c['env']} observes {c['env_obs']} values; zero-padded to the seed's {obs}",
        obs_shape=(obs,),
        action_dim=act,
        action_space="continuous",
        networks=(
            # Gaussian policy: the network gives the mean; log-std is a separate parameter vector (§III-D).
            NetSpec("policy", "actor", lambda s: mlp("policy", obs, hidden, act, act="tanh", out_gain=0.01, seed=s),
                    optimizer="none"),
            NetSpec("value", "critic", lambda s: mlp("value", obs, (64, 64), 1, act="tanh", seed=s)),
        ),
        kernels=(
            KernelSpec("fvp", "PL", "fixed<27,4,RND,SAT>", FVP_ACC,
                       {"layers": [obs, *hidden, act], "parallelism": c["parallelism"]},
                       "§III-E Fig. 2: odd layers Type A forward / Type B backward, even layers the reverse; "
                       "Table I parallelism",
                       notes={"blocks": "A-B-A-B"}),
        ),
        formats={"storage": "fixed<27,4,RND,SAT>", "acc": "fixed<48,16,RND,SAT>"},
        device="max4-5sgsd8",
        part=BUILD_PART,
        clocks_mhz={"PL": 200.0},
        batch_size=SAMPLES,
        hyperparams={
            # §IV-A: CG MaxIter 10, damping 0.1, max KL 0.01 (the TRPO paper's); a 50,000-sample data set per
            # iteration (one sub-environment, 50,000 steps). host/algorithms/trpo.py TRPOArgs documents every key.
            "cg_iters": 10, "cg_damping": 0.1, "max_kl": 0.01, "num_envs": 1, "num_steps": SAMPLES,
            "gamma": 0.99, "gae_lambda": 0.97, "value_lr": 1e-3, "value_epochs": 5, "line_search_steps": 10,
            "total_timesteps": c["total_timesteps"],
        },
        demo=dict(c["demo"]),
        seed_figures={
            "policy_params": n_policy if case == "humanoid" else None,
            "policy_params_quoted": 57634 if case == "humanoid" else None,
            "table_i": c["table_i"],
            "table_ii": c["table_ii"],
            "fraction_bits": 23, "integer_bits": 4, "mape_percent": c["mape_percent"],
        },
        choices=(
            "fixed<27,4>: rounding and overflow modes are not given; RND and SAT are used "
            "(27x27 fits one Stratix-V DSP)",
            f"FVP accumulator {FVP_ACC}: the seed does not give its width; the 5SGSD8's 27x27 DSP mode "
            "accumulates in 64 bits, and 21 integer bits hold the sum of 65,536 samples (fixed<48,16> saturated "
            "at the seed's 50,000: host/algorithms/trpo.py fvp_scale)",
            "value network: the seed accelerates only the FVP; a 64-64 tanh value MLP trained with Adam is used "
            "(gamma 0.99, lambda 0.97 as the TRPO paper's locomotion runs)",
            f"observations zero-padded from Gymnasium v5's {c['env_obs']} to the seed's {obs} inputs",
            _params_choice(obs, hidden, act, c["env_obs"]),
            "TRPO as OpenAI baselines' trpo_mpi runs it where the seed is silent (host/algorithms/trpo.py): "
            "observations normalized and clipped to +-5 (inside fixed<27,4>), GAE advantages standardized, "
            "one extra FVP call for the step length (x.Ax), backtracking line search accepting KL <= 1.5 max_kl "
            "with a surrogate gain; "
            "the CG direction is scaled by a power of two before the FVP unit (exact; hyperparameter fvp_scale)",
            f"build part {BUILD_PART} (device '{BUILD_DEVICE}': Kintex UltraScale+ KU15P, 1,968 DSP48E2 against the "
            "5SGSD8's 1,963 DSP blocks, a PCIe-card FPGA like the MAX4; the Stratix V has no AMD part). A DSP48E2 "
            "multiplies 27x18, so each 27x27 product takes two: with the kernel's table tanh the FVP unit needs "
            f"{c['ku15p_dsp']} of 1,968 DSP48E2 at the seed's parallelism (the seed's fitted tanh would not fit). "
            "Table I/II figures stay on the Stratix V (device max4-5sgsd8)",
            f"rlhls run demonstration: one iteration of the seed's {SAMPLES:,} samples (rlhls run --full: "
            f"{c['total_timesteps']:,} steps); rlhls perf times {c['demo']['probe']['num_steps']}-sample iterations "
            "and scales them to the seed's",
        ),
    )


def _params_choice(obs, hidden, act, env_obs) -> str:
    dims = [obs, *hidden, act]
    net = sum(a * b + b for a, b in zip(dims[:-1], dims[1:]))
    frozen = (obs - env_obs) * hidden[0]
    return (f"policy parameters: {' + '.join(f'{a}x{b}+{b}' for a, b in zip(dims[:-1], dims[1:]))} = {net:,} "
            f"weights and biases + {act} log-std = {net + act:,}"
            + (" = the seed's 57,634 (§II-A)" if net + act == 57634 else "")
            + f"; of them the {obs - env_obs} zero-padded inputs' {frozen:,} first-layer weights see only zeros "
            f"(their gradient and FVP entries are exactly 0, so CG never moves them): {net + act - frozen:,} "
            "are trained")


def designs():
    return [_design(case, c) for case, c in CASES.items()]
