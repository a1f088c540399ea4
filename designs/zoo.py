"""The algorithms users reach for first, at RL Zoo's tuned hyperparameters, on AP-DRL's platform.

No seed paper trains them: each design takes Stable-Baselines3 RL Zoo's published entry for its
environment (``hyperparams/<algo>.yml``, its ``net_arch`` included) and AP-DRL's VEK280 with its
hardware-aware mixed precision (PS fp32, PL fp16 with fp32 masters and loss scaling, AIE bf16;
designs/apdrl.py's formats and kernels), so the flow partitions, builds, C-simulates and trains them as it
does the seeds' designs. One block per algorithm.
"""

from __future__ import annotations

from .apdrl import CLOCKS, FORMATS, _kernels
from .design import Design, NetSpec
from .nets import mlp
from .network import Dense, Network, ReLU

SEED = "-"  # no seed paper (the report names none)
PLATFORM = ("AP-DRL's VEK280 with its formats and kernels (designs/apdrl.py); mixed-precision details as the "
            "AP-DRL designs (initial loss scale 2^15, growth interval 2000, quantization delay 0)")
_MIXED = {"precision": "mixed", "loss_scale_init": 2.0 ** 15, "loss_scale_growth_interval": 2000,
          "quantization_delay": 0}


def _design(name, title, algorithm, env_id, env_notes, obs, act, networks, batch, hyper, choices, demo):
    return Design(
        name=name, seed_file=SEED, seed_title=title, algorithm=algorithm, env_id=env_id, env_notes=env_notes,
        obs_shape=(obs,), action_dim=act, action_space="continuous", networks=networks,
        kernels=_kernels(networks[0].optimizer), formats=dict(FORMATS), device="vek280", clocks_mhz=dict(CLOCKS),
        batch_size=batch, hyperparams={**hyper, **_MIXED}, choices=(PLATFORM, *choices), demo=demo,
    )


# -- TD3 -------------------------------------------------------------------------------------------------------

def _td3_nets(obs, act):
    """SB3's TD3 policy at RL Zoo's net_arch [400, 300]: a tanh actor and twin critics on concat(obs, action)."""
    return (
        NetSpec("actor", "actor", lambda s: mlp("actor", obs, (400, 300), act, out_act="tanh", out_gain=0.01, seed=s),
                target=True),
        NetSpec("qf1", "critic", lambda s: mlp("qf1", obs + act, (400, 300), 1, seed=s), target=True,
                extra_inputs=act),
        NetSpec("qf2", "critic", lambda s: mlp("qf2", obs + act, (400, 300), 1, seed=s), target=True,
                extra_inputs=act),
    )


# RL Zoo hyperparams/td3.yml as published (DLR-RM/rl-baselines3-zoo at eec15dc22e1e, the entries
# Pendulum-v1 and LunarLanderContinuous-v3: n_timesteps, gamma 0.98, buffer_size 200000, learning_starts
# 10000, noise_type normal, noise_std 0.1, gradient_steps 1, train_freq 1, learning_rate 1e-3, net_arch
# [400, 300]); what they leave out is Stable-Baselines3 TD3's default (batch_size 256, tau 0.005,
# policy_delay 2, target_policy_noise 0.2, target_noise_clip 0.5)
_RLZOO_TD3 = {"learning_rate": 1e-3, "buffer_size": 200_000, "gamma": 0.98, "tau": 0.005, "noise": "gaussian",
              "exploration_noise": 0.1, "learning_starts": 10_000, "policy_frequency": 2, "target_policy_noise": 0.2,
              "target_noise_clip": 0.5, "optimizer": "adam"}
RLZOO_TD3_PENDULUM = {**_RLZOO_TD3, "total_timesteps": 20_000,
                      "source": "RL Zoo hyperparams/td3.yml Pendulum-v1 on Stable-Baselines3 TD3 defaults"}
RLZOO_TD3_LUNAR = {**_RLZOO_TD3, "total_timesteps": 300_000,
                   "source": "RL Zoo hyperparams/td3.yml LunarLanderContinuous-v3 on Stable-Baselines3 TD3 defaults"}
# ``rlhls run``'s demonstration: 300 gradient steps after 700 random ones
_TD3_DEMO = {"steps": 1000, "set": {"learning_starts": 700, "steps_per_update": 500}}
_TD3_TITLE = "TD3 (Fujimoto et al. 2018) at RL Zoo's tuned hyperparameters"
_TD3_CHOICES = ("hyperparameters RL Zoo's td3.yml entry for this env, taken as published (SB3's TD3 defaults "
                "where it is silent); batch 256 = SB3's",)


def td3_designs():
    return [
        _design("td3-pendulum", _TD3_TITLE, "td3", "Pendulum-v1", "Gymnasium classic control", 3, 1,
                _td3_nets(3, 1), 256, RLZOO_TD3_PENDULUM, _TD3_CHOICES,
                demo=_TD3_DEMO),
        _design("td3-lunarcont", _TD3_TITLE, "td3", "LunarLanderContinuous-v3", "Gymnasium Box2D, continuous actions",
                8, 2, _td3_nets(8, 2), 256, RLZOO_TD3_LUNAR, _TD3_CHOICES,
                demo=_TD3_DEMO),
    ]


# -- SAC -------------------------------------------------------------------------------------------------------

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
    return [*td3_designs(), *_sac_designs()]
