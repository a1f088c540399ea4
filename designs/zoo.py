"""Designs of the algorithms users reach for first, on AP-DRL's platform (seed 003: a VEK280 with PS fp32,
PL fp16 + fp32 master weights + loss scaling, AIE bf16), each at RL Zoo's published hyperparameters.
"""

from __future__ import annotations

from .apdrl import CLOCKS, FORMATS, SEED, _kernels
from .design import Design, NetSpec
from .network import Dense, Network, ReLU

# --- SAC -------------------------------------------------------------------------------------------

# RL Zoo's SAC entries (DLR-RM/rl-baselines3-zoo hyperparams/sac.yml, commit c94924e5), as published; SB3's SAC
# defaults fill what an entry leaves out (learning_starts 100, buffer_size 1e6, batch_size 256, tau 0.005,
# gamma 0.99, train_freq 1, gradient_steps 1, ent_coef auto, net_arch [256, 256])
RLZOO_SAC_PENDULUM = {"n_timesteps": 20_000, "policy": "MlpPolicy", "learning_rate": 1e-3}
RLZOO_SAC_LUNAR = {"n_timesteps": 500_000, "policy": "MlpPolicy", "batch_size": 256, "learning_rate": "lin_7.3e-4",
                   "buffer_size": 1_000_000, "ent_coef": "auto", "gamma": 0.99, "tau": 0.01, "train_freq": 1,
                   "gradient_steps": 1, "learning_starts": 10_000, "policy_kwargs": "dict(net_arch=[400, 300])"}
RLZOO_SAC_SOURCE = ("RL Zoo hyperparams/sac.yml (DLR-RM/rl-baselines3-zoo, commit c94924e5; LunarLanderContinuous-v2 "
                    "there, the same environment as -v3) on Stable-Baselines3 SAC defaults")
# SAC's sampling and loss nodes: exp, log and tanh in FP32 on the PS (host/algorithms/sac.py)
SAC_PINS = {n: "PS" for n in ("next_sample", "critic_loss", "policy_sample", "alpha_loss", "actor_loss",
                              "policy_grad")}


def _mlp(name, in_dim, hidden, out_dim, seed):
    """SB3's MLP (ReLU) with PyTorch's default initialisation (U(+-1/sqrt(fan_in)), weights and biases)."""
    layers: list = []
    for h in hidden:
        layers += [Dense(h, gain=1.0), ReLU()]
    layers.append(Dense(out_dim, gain=1.0))
    return Network(name, (in_dim,), layers, seed=seed, init="uniform")


def _sac_nets(obs, act, hidden):
    return (
        # mean and log_std of each action (SB3's mu and log_std heads, as one Dense)
        NetSpec("actor", "actor", lambda s: _mlp("actor", obs, hidden, 2 * act, s)),
        NetSpec("qf1", "critic", lambda s: _mlp("qf1", obs + act, hidden, 1, s + 1), target=True, extra_inputs=act),
        NetSpec("qf2", "critic", lambda s: _mlp("qf2", obs + act, hidden, 1, s + 2), target=True, extra_inputs=act),
    )


def _sac(name, env_id, env_notes, obs, act, hidden, hyper, demo, choices=()):
    return Design(
        name=name, seed_file=SEED, seed_title="SAC (Haarnoja et al. 2018) on AP-DRL's VEK280 platform and formats",
        algorithm="sac", env_id=env_id, env_notes=env_notes, obs_shape=(obs,), action_dim=act,
        action_space="continuous", networks=_sac_nets(obs, act, hidden), kernels=_kernels("adam"),
        formats=dict(FORMATS), device="vek280", clocks_mhz=dict(CLOCKS), batch_size=int(hyper.get("batch_size", 256)),
        hyperparams={**hyper, "precision": "mixed", "loss_scale_init": 2.0 ** 15, "loss_scale_growth_interval": 2000,
                     "quantization_delay": 0, "source": RLZOO_SAC_SOURCE},
        pins=dict(SAC_PINS), demo=demo,
        choices=("hyperparameters: RL Zoo's tuned SAC entry for this environment as published (ent_coef auto), SB3's "
                 "SAC defaults for the rest; the budget (total_timesteps) is RL Zoo's n_timesteps",
                 "networks: SB3's SAC MlpPolicy (ReLU, PyTorch's default initialisation; the actor's mu and log_std "
                 "heads as one Dense of 2 x dim(A) outputs)",
                 "AP-DRL's formats (PS fp32, PL fp16 / fp32 accumulation, AIE bf16) and mixed-precision defaults "
                 "(initial loss scale 2^15, growth interval 2000, quantization delay 0); SAC's sampling and loss "
                 "nodes pinned to the PS (exp, log, tanh in FP32)", *choices),
    )


def _sac_designs():
    pend = {"learning_rate": 1e-3, "total_timesteps": 20_000}
    lunar = {"learning_rate": 7.3e-4, "anneal_lr": True, "buffer_size": 1_000_000, "ent_coef": "auto",
             "gamma": 0.99, "tau": 0.01, "train_freq": 1, "gradient_steps": 1, "learning_starts": 10_000,
             "batch_size": 256, "total_timesteps": 500_000}
    return [
        _sac("sac-pendulum", "Pendulum-v1", "Gymnasium classic control", 3, 1, (256, 256), pend,
             {"steps": 400, "set": {"steps_per_update": 200}}),
        _sac("sac-lunarcont", "LunarLanderContinuous-v3", "Gymnasium Box2D, continuous actions", 8, 2, (400, 300),
             lunar, {"steps": 400, "set": {"learning_starts": 200, "steps_per_update": 200}},
             ("learning rate lin_7.3e-4: annealed linearly to 0 over the run, as SB3 does RL Zoo's schedule",)),
    ]


def designs():
    return [*_sac_designs()]
