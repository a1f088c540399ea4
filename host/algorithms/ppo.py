"""PPO on the host (CleanRL ``ppo_continuous_action.py`` quality) with HEPPO-GAE's reward/value
standardization and quantization (seed 000, §II, Table III) and a GAE stage run by a backend.

Algorithm (CleanRL, with its hyperparameters as defaults, ``PPOArgs``; a design's
``hyperparams`` override them, then ``--set`` overrides): rollouts of ``num_steps`` x ``num_envs``;
GAE(gamma, lambda); ``update_epochs`` epochs of ``num_minibatches`` shuffled minibatches;
clipped surrogate, clipped value loss (0.5 * max of the two squared errors), entropy bonus,
per-minibatch advantage normalization, one Adam (eps 1e-5) over actor, critic and log-std,
global grad-norm clipping 0.5, learning rate annealed linearly to 0 over the run, optional
``target_kl`` early stop. Gaussian policy: the policy network gives the mean, ``log_std`` is a
state-independent parameter vector (init 0); the sampled (unclipped) action is what log-probs
use, and the env receives it clipped to the action box (CleanRL's ClipAction). Discrete spaces
use a Categorical over the policy network's softmax (or logits) output (AP-DRL's PPO). Networks
run in float64 numpy through ``designs.network`` (forward / backward by hand, no autograd).

Observations: normalized as CleanRL's NormalizeObservation (running mean/var, epsilon count
1e-4, var + 1e-8, clip +-10) with one normalizer shared by all sub-envs (as gymnasium's vector
NormalizeObservation), then zero-padded to the network input (CPP designs; ``envs.pad_obs``).
Image observations (ndim > 1) are not normalized.

Environments and resume. As CleanRL, the sub-envs keep running across updates: an episode longer
than ``num_steps`` continues in the next rollout (V bootstraps the rollout's last step), and its
return is counted when it ends. The envs are ``envs.ReplayableVecEnv``: SAME_STEP autoreset
semantics (every step is a transition; an ended sub-env returns its next episode's first
observation, the last one in ``infos['final_obs']``), with every episode reset with an explicit
seed (SeedSequence([seed, env index, episode index])). ``done_t`` is 0 (continues), 1
(terminated: next value 0) or 2 (truncated: next value V(final_obs), the value of
``infos['final_obs']`` normalized with the current observation statistics; stored in
``trunc_values``) -- the GAE kernel's codes; both the kernel and ``gae_reference`` bootstrap
truncations (CleanRL treats them as terminations). Exact resume: the checkpoint holds, besides
parameters, optimizer, normalizers, RunningStats and the numpy Generator state, each sub-env's
episode seed and actions since its reset, the current (normalized) observations, the running
episode return / length and exp 1's discounted return; ``load_state_dict`` resets each sub-env
with its seed and replays its actions (checked against the recorded observations), so a resumed
run reproduces an uninterrupted one exactly, episodes spanning updates included.

HEPPO-GAE's GAE stage (reward/value standardization, uq<n> quantization, the GAE unit through
the backend, Table III's experiments) is host/gae.py; AP-DRL's fp32 / mixed precision of the
networks is host/algorithms/ppo_mixed.py (``precision`` fp32 / mixed; fp64 = the float64 numpy networks).

Image observations: uint8 frames (Atari, host/envs/atari.py) stay uint8 in the rollout buffer
(8 x 128 x 4 x 84 x 84 = 29 MB) and the networks read ``x / 255`` (CleanRL's ppo_atari scales in
the network). Episodic return / length come from ``EpisodeTracker`` with the env infos: the
unclipped game score over all lives.

Per-update phase times (Table I; the heppo design's ``seed_figures['phase_shares']`` gives the seed's names, "network
update" = update_forward + backprop): dnn_inference (policy + value forward and sampling in the
rollout, V of truncated episodes' final observations), env_run (env.step incl. the normalization
wrappers' work), storing_trajectories,
gae_fetch, gae_compute, gae_write, update_forward (minibatch forward + losses), backprop
(backward + clipping + optimizer step). Seconds, in the metrics row as ``t_<phase>``.
"""


from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd

from rlhls.core.errors import RlhlsError
from rlhls.designs.graph import GAE_FLOPS, actor_critic
from rlhls.designs.quantizer import RunningStats

from ..distributions import DiagGaussian, policy_distribution
from ..envs import EpisodeTracker, normalize_obs, pad_obs, rms_load, rms_state, space_info
from ..gae import EXPERIMENTS, gae_stage, gae_units
from ..hyperparams import hp
from ..mixed import MixedPrecisionArgs
from ..optim import clip_grad_norm, make_optimizer
from ..phases import timed
from ..rlzoo import schedule, whole
from . import Algorithm, register_algorithm
from .base import TrainerBase, adapt_network, check_memory, sample_bytes
from .ppo_mixed import MixedPPO
from .rollout import collect_rollout, episode_columns, start_envs

__all__ = ["PPOArgs", "batch_size", "PHASES", "PRECISIONS", "ppo_loss", "resolve_hyperparams", "minibatch_steps",
           "node_runs", "PPO"]

PRECISIONS = ("fp64", "fp32", "mixed")


def _sb3_lr(v, ctx):
    lr, annealed = schedule(ctx, "learning_rate", v)
    return {"learning_rate": lr, "anneal_lr": annealed, **({"anneal_after_rollout": True} if annealed else {})}


def _sb3_clip(v, ctx):
    c, annealed = schedule(ctx, "clip_range", v)
    return {"clip_coef": c, "anneal_clip": annealed, **({"anneal_after_rollout": True} if annealed else {})}


def _sb3_clip_vf(v, ctx):  # CleanRL clips the value loss with clip_coef; SB3 with clip_range_vf (None: never)
    if v is None:
        return {"clip_vloss": False}
    if v != ctx.given("clip_range", "clip_coef"):
        raise ctx.error("clip_range_vf", f"{v!r}: ours clips the value loss with clip_range or not at all (null)")
    return {"clip_vloss": True}


def _sb3_batch(v, ctx):  # SB3's minibatch size; ours the number of minibatches
    n = (whole(ctx, "n_envs", ctx.given("n_envs", "num_envs"))
         * whole(ctx, "n_steps", ctx.given("n_steps", "num_steps")))
    b = whole(ctx, "batch_size", v)
    if n % b:
        raise ctx.error("batch_size", f"{b} does not divide a rollout of n_envs x n_steps = {n}")
    return {"num_minibatches": n // b}


@dataclass
class PPOArgs(MixedPrecisionArgs):
    """PPO's hyperparameters: CleanRL ppo_continuous_action.py's defaults, HEPPO-GAE's additions."""

    algorithm = "PPO"
    sb3 = {"n_steps": "num_steps", "batch_size": _sb3_batch, "n_epochs": "update_epochs", "learning_rate": _sb3_lr,
           "clip_range": _sb3_clip, "clip_range_vf": _sb3_clip_vf, "normalize_advantage": "norm_adv"}
    num_envs: int = hp(1, "parallel sub-environments (CleanRL num_envs)", low=1)
    num_steps: int = hp(2048, "steps per sub-environment per rollout (CleanRL num_steps)", low=1)
    learning_rate: float = hp(3e-4, "Adam step size", low=0.0)
    anneal_lr: bool = hp(True, "anneal the learning rate linearly to 0 over the run")
    anneal_clip: bool = hp(False, "anneal clip_coef linearly to 0 over the run (RL Zoo's clip_range: lin_)")
    anneal_after_rollout: bool = hp(False, "anneal by the progress after the update's rollout (SB3, RL Zoo's lin_) "
                                           "instead of before it (CleanRL)")
    gamma: float = hp(0.99, "discount factor", low=0.0, high=1.0)
    gae_lambda: float = hp(0.95, "GAE lambda", low=0.0, high=1.0)
    num_minibatches: int = hp(32, "minibatches per epoch (batch = num_envs x num_steps / num_minibatches)", low=1)
    update_epochs: int = hp(10, "epochs over the rollout per update", low=1)
    norm_adv: bool = hp(True, "normalize advantages per minibatch")
    clip_coef: float = hp(0.2, "surrogate clipping coefficient", above=0.0)
    clip_vloss: bool = hp(True, "clip the value loss as CleanRL")
    ent_coef: float = hp(0.0, "entropy bonus coefficient", low=0.0)
    vf_coef: float = hp(0.5, "value loss coefficient", low=0.0)
    max_grad_norm: float = hp(0.5, "global gradient-norm clip", above=0.0)
    target_kl: float | None = hp(None, "stop an update's epochs early above this approximate KL (None: never)",
                                 above=0.0)
    adam_eps: float = hp(1e-5, "Adam epsilon (CleanRL's PPO: 1e-5)", above=0.0)
    optimizer: str = hp("adam", "optimizer of actor, critic and log-std", choices=("adam", "rmsprop", "sgd"))
    log_std_init: float = hp(0.0, "initial log standard deviation of the Gaussian policy")
    obs_norm: bool = hp(True, "normalize observations with running statistics (vector observations)")
    obs_clip: float = hp(10.0, "clip normalized observations to +-obs_clip", above=0.0)
    reward_clip: float = hp(10.0, "clip normalized rewards to +-reward_clip (experiment 1)", above=0.0)
    quant_bits: int = hp(8, "HEPPO-GAE codeword bits of rewards and values (Fig. 8-9)", low=3, high=10)
    experiment: int = hp(5, "HEPPO-GAE Table III configuration 1..5 (0 = raw rewards, CleanRL ppo_atari)",
                         low=0, high=5)
    gae_lookahead: int = hp(2, "lookahead k of the GAE unit", low=1, high=4)
    precision: str = hp("fp64", "fp64 (HEPPO's float64 path), fp32 (all on the PS) or mixed (the plan's units)",
                        choices=PRECISIONS)

    def check(self, design):
        check_memory(f"num_envs x num_steps = {self.num_envs} x {self.num_steps}",
                     self.num_envs * self.num_steps * sample_bytes(design), "the rollout at least")
        if self.num_envs * self.num_steps < self.num_minibatches:
            raise RlhlsError(f"PPO hyperparameters: num_envs x num_steps = {self.num_envs * self.num_steps} is "
                             f"smaller than num_minibatches = {self.num_minibatches}")


def batch_size(hp: dict) -> int:
    """The training batch a plan is solved at: one minibatch."""
    return hp["num_envs"] * hp["num_steps"] // hp["num_minibatches"]

PHASES = ("dnn_inference", "env_run", "storing_trajectories", "gae_fetch", "gae_compute", "gae_write",
          "update_forward", "backprop")

def resolve_hyperparams(design, overrides: dict | None = None, config: dict | None = None) -> dict:
    """PPOArgs: CleanRL's defaults <- the design's hyperparameters <- config <- overrides."""
    return PPOArgs.resolve(design, overrides, config)


# ---------------------------------------------------------------------------- networks


def _param_views(nets: dict, log_std) -> dict:
    views = {f"{n}.{l.name}.{k}": v for n, net in nets.items() for l in net.layers for k, v in l.params.items()}
    if log_std is not None:
        views["log_std"] = log_std
    return views


# ---------------------------------------------------------------------------- PPO


def ppo_loss(dist, newv, act, old_logp, old_val, adv, rtg, hp: dict, clip: float | None = None):
    """CleanRL's PPO loss of one minibatch and its gradients w.r.t. the policy output, V and log-std;
    `clip`: the update's clipping coefficient (None: clip_coef).

    Returns (loss, g_out, g_v, g_log_std or None, stats, ratio, logratio)."""
    c, ent_coef, vf_coef = hp["clip_coef"] if clip is None else clip, hp["ent_coef"], hp["vf_coef"]
    M = act.shape[0]
    newlogp = dist.log_prob(act)
    logratio = newlogp - old_logp
    ratio = np.exp(logratio)
    a = adv
    if hp["norm_adv"] and M > 1:
        a = (a - a.mean()) / (a.std(ddof=1) + 1e-8)
    pg1, pg2 = -a * ratio, -a * np.clip(ratio, 1 - c, 1 + c)
    pg_loss = float(np.mean(np.maximum(pg1, pg2)))
    ent = dist.entropy()
    if hp["clip_vloss"]:
        vu = (newv - rtg) ** 2
        vc_pred = old_val + np.clip(newv - old_val, -c, c)
        vc = (vc_pred - rtg) ** 2
        v_loss = 0.5 * float(np.mean(np.maximum(vu, vc)))
        inside = np.abs(newv - old_val) < c
        g_v = np.where(vu >= vc, newv - rtg, np.where(inside, vc_pred - rtg, 0.0)) / M
    else:
        v_loss = 0.5 * float(np.mean((newv - rtg) ** 2))
        g_v = (newv - rtg) / M
    loss = pg_loss - ent_coef * float(np.mean(ent)) + vf_coef * v_loss
    g_logp = np.where(pg1 >= pg2, -a * ratio, 0.0) / M
    g_ls = None
    if isinstance(dist, DiagGaussian):
        d_mean, d_ls = dist.d_log_prob(act)
        g_out = g_logp[:, None] * d_mean
        g_ls = np.sum(g_logp[:, None] * d_ls, axis=0) - ent_coef * dist.d_entropy_log_std()
    else:
        g_out = g_logp[:, None] * dist.d_log_prob(act) - (ent_coef / M) * dist.d_entropy()
    stats = {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": float(np.mean(ent)),
             "approx_kl": float(np.mean((ratio - 1.0) - logratio)),
             "clipfrac": float(np.mean(np.abs(ratio - 1.0) > c))}
    return loss, g_out, vf_coef * g_v, g_ls, stats




class PPO(TrainerBase):
    """One PPO run (module docstring; the constructor and interface: ``TrainerBase``). With
    ``precision='mixed'`` the plan is solved at the minibatch size when ``assignment`` is None."""

    algorithm = "ppo"
    networks = ("policy", "value")
    resolve_hyperparams = staticmethod(resolve_hyperparams)

    def _setup(self, design, nets: dict, assignment) -> None:
        hp = self.hp
        self.mode = EXPERIMENTS[hp["experiment"]]
        self.gae_units = gae_units(design, hp)  # the built GAE (and standardizer) units' parameters
        self.space = sp = space_info(self.envs)
        obs_shape = sp["obs_shape"]
        self.image = len(obs_shape) > 1
        pol, val = nets["policy"], nets["value"]
        if self.image:
            if tuple(pol.input_shape) != obs_shape:
                raise RlhlsError(f"environment '{self.env_id}' observes {obs_shape}, "
                                 f"network 'policy' takes {pol.input_shape}")
            self.in_dim = None
        elif self.env_id == design.env_id:
            # the design's own env: keep its networks, zero-pad the observation (CPP designs)
            self.in_dim = pol.input_shape[0]
            if obs_shape[0] > self.in_dim:
                raise RlhlsError(f"environment '{self.env_id}' observes {obs_shape[0]} values but design "
                                 f"'{design.name}' networks take {self.in_dim}")
        else:
            # --env override: the design's layer stacks sized for this env
            self.in_dim = obs_shape[0]
            pol = adapt_network(pol, self.in_dim, sp["action_dim"])
            val = adapt_network(val, self.in_dim, 1)
        if pol.output_shape != (sp["action_dim"],):
            raise RlhlsError(f"network 'policy' gives {pol.output_shape} outputs but '{self.env_id}' has "
                             f"{sp['action_dim']} actions")
        self.nets = {"policy": pol, "value": val}
        self.softmax_out = pol.layers[-1].kind == "Softmax"
        self.log_std = np.full(sp["action_dim"], float(hp["log_std_init"])) if sp["kind"] == "continuous" else None
        # uint8 frames (Atari) stay uint8 in the rollout; the network sees x / 255 (CleanRL's ppo_atari)
        self.obs_dtype = self.envs.single_observation_space.dtype if self.image else np.float64
        self.obs_scale = 1.0 / 255.0 if (self.image and self.obs_dtype == np.uint8) else None
        opt_kw = {"eps": hp["adam_eps"]} if hp["optimizer"] == "adam" else {}
        self.opt = make_optimizer(hp["optimizer"], hp["learning_rate"], **opt_kw)
        self.clip = hp["clip_coef"]  # the update's clipping coefficient (anneal_clip)
        # gymnasium's (NormalizeObservation / NormalizeReward): epsilon count 1e-4, float64
        self.obs_rms = RunningMeanStd(shape=obs_shape) if (hp["obs_norm"] and not self.image) else None
        self.ret_rms = RunningMeanStd(shape=())  # exp 1's NormalizeReward
        self.reward_stats = RunningStats()  # exp 2 / 5 dynamic standardization, whole run
        self.rng = np.random.default_rng(self.seed)
        self.steps_per_update = hp["num_envs"] * hp["num_steps"]
        # fp64: the float64 numpy networks (HEPPO); fp32 / mixed: AP-DRL's (host/algorithms/ppo_mixed.py)
        self.precision = hp["precision"]
        self._take_plan(assignment, batch_size(hp))
        scaling = self._scaling(target=False, ps_math=hp["ps_math"])  # no target copy
        self.mixed = None if self.precision == "fp64" else MixedPPO(self, design, scaling)
        # state carried across updates (CleanRL keeps its envs running)
        self.obs = None  # normalized observations the next rollout starts from (None: not reset yet)
        self.tracker = EpisodeTracker(hp["num_envs"])
        self.ret_acc = np.zeros(hp["num_envs"])  # exp 1's discounted return (NormalizeReward)

    # -- helpers
    def _obs(self, raw, update_stats: bool):
        if self.image:
            return np.asarray(raw, dtype=self.obs_dtype)
        raw = np.asarray(raw, dtype=np.float64)
        if self.obs_rms is not None:
            raw = normalize_obs(self.obs_rms, raw, self.hp["obs_clip"], update_stats)
        return raw if self.in_dim is None else pad_obs(raw, self.in_dim)

    def _net_in(self, obs):
        """What the networks read: float64, uint8 frames scaled by 1/255."""
        x = np.asarray(obs, dtype=np.float64)
        return x if self.obs_scale is None else x * self.obs_scale

    def _act(self, net, obs):
        """Acting (rollout) forward: float64 (fp64), else on the PS in FP32 (AP-DRL Fig. 10)."""
        x = self._net_in(obs)
        return net.forward(x) if self.mixed is None else self.mixed.act(net, x)

    def _dist(self, out):
        return policy_distribution(out, self.log_std, self.softmax_out)

    # -- the rollout loop's hooks (host/algorithms/rollout.py)
    def _rollout_act(self, obs):
        dist = self._dist(self._act(self.nets["policy"], obs))
        a = dist.sample(self.rng)
        return a, dist.log_prob(a), self._value(obs)

    def _value(self, obs):
        return self._act(self.nets["value"], obs)[:, 0]

    def predict(self, obs, deterministic: bool = True, rng=None) -> np.ndarray:
        """The normalization's running statistics are read, not updated (SB3's VecNormalize in evaluation)."""
        dist = self._dist(self._act(self.nets["policy"], self._obs(obs, False)))
        return self._env_action(dist.mode() if deterministic else dist.sample(rng))

    def _reward(self, r, term):
        """The rewards GAE sees: experiment 1 scales them as CleanRL's NormalizeReward, the others take them raw."""
        if self.mode["reward"] != "cleanrl":
            return r
        hp = self.hp
        self.ret_acc = self.ret_acc * hp["gamma"] * (1.0 - term) + r
        self.ret_rms.update(self.ret_acc)
        return np.clip(r / np.sqrt(self.ret_rms.var + 1e-8), -hp["reward_clip"], hp["reward_clip"])

    # -- one update
    def train_update(self, update: int, total_updates: int) -> dict:
        hp, times = self.hp, {p: 0.0 for p in PHASES}
        T, N = hp["num_steps"], hp["num_envs"]
        frac = 1.0 - (update - (0.0 if hp["anneal_after_rollout"] else 1.0)) / total_updates
        if hp["anneal_lr"]:
            self.opt.lr = frac * hp["learning_rate"]
        self.clip = hp["clip_coef"] * (frac if hp["anneal_clip"] else 1.0)
        start_envs(self, times, self._obs)
        ro = collect_rollout(self, T, times, (update - 1) * T * N, act=self._rollout_act, observe=self._obs,
                             value=self._value, reward=self._reward, obs_dtype=self.obs_dtype)
        b_rew, b_val, b_done, b_tval, boot = ro.rew, ro.val, ro.done, ro.tval, ro.boot
        adv, rtg, ginfo = gae_stage(self.backend, b_rew, b_val, b_done, boot, gamma=hp["gamma"],
                                    lam=hp["gae_lambda"], mode=self.mode, units=self.gae_units,
                                    reward_stats=self.reward_stats, times=times,
                                    trunc_values=b_tval)
        if self.mixed is not None and not self.mode["quant"]:  # HEPPO's uq<n> modes keep their formats
            adv, rtg = self.mixed.round_gae(adv, rtg, times)
        stats = self._learn(ro.flat("obs"), ro.flat("act"), ro.flat("logp"), ro.flat("val"), adv, rtg, times)
        y, pred = rtg, ro.flat("val")
        var_y = np.var(y)
        row = {
            **episode_columns(ro.episodes, ro.truncations),
            "learning_rate": self.opt.lr,
            **stats,
            "explained_variance": float("nan") if var_y == 0 else float(1 - np.var(y - pred) / var_y),
            "reward_mu": ginfo.get("reward_mu", float("nan")), "reward_sigma": ginfo.get("reward_sigma", float("nan")),
            "value_mu": ginfo.get("value_mu", float("nan")), "value_sigma": ginfo.get("value_sigma", float("nan")),
            "reward_overflow": ginfo.get("reward_overflow", 0), "value_overflow": ginfo.get("value_overflow", 0),
        }
        if self.mixed is not None:  # DQN's / A2C's loss-scaling columns
            row.update(self.mixed.columns())
        row.update({f"t_{p}": times[p] for p in PHASES})
        row["_episodes"] = ro.episodes  # (env_step, return, length); the runner stores them apart
        return row

    def minibatch_step(self, obs, act, old_logp, old_val, adv, rtg, times=None):
        """Loss and gradients of one minibatch (no parameter change): (loss, grads, stats).

        loss = pg_loss - ent_coef * mean(entropy) + vf_coef * v_loss, as CleanRL. With precision
        fp32 / mixed the gradients are multiplied by the loss scale (MixedPrecision.apply unscales)."""
        if self.mixed is not None:
            return self.mixed.minibatch(obs, act, old_logp, old_val, adv, rtg, {} if times is None else times,
                                        ppo_loss)
        times = {} if times is None else times
        pol, val = self.nets["policy"], self.nets["value"]
        x = self._net_in(obs)
        with timed(times, "update_forward"):
            dist = self._dist(pol.forward(x))
            newv = val.forward(x)[:, 0]
            loss, g_out, g_v, g_ls, stats = ppo_loss(dist, newv, act, old_logp, old_val, adv, rtg, self.hp, self.clip)
        with timed(times, "backprop"):
            grads = {}
            if g_ls is not None:
                grads["log_std"] = g_ls
            pol.backward(g_out)
            val.backward(g_v[:, None])
            for n, net in self.nets.items():
                for k, g in net.grads.items():
                    grads[f"{n}.{k}"] = g.copy()
        return loss, grads, stats

    def _learn(self, obs, act, old_logp, old_val, adv, rtg, times):
        hp = self.hp
        B = obs.shape[0]
        mb = B // hp["num_minibatches"]
        acc = {k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")}
        for _ in range(hp["update_epochs"]):
            perm = self.rng.permutation(B)
            for s in range(0, B - mb + 1, mb):
                idx = perm[s:s + mb]
                _, grads, st = self.minibatch_step(obs[idx], act[idx], old_logp[idx], old_val[idx], adv[idx],
                                                   rtg[idx], times)
                with timed(times, "backprop"):
                    if self.mixed is None:
                        st["grad_norm"] = clip_grad_norm(grads, hp["max_grad_norm"])
                        self.opt.step(self.param_views(), grads)
                    else:
                        st["grad_norm"] = self.mixed.step(self.opt, grads, hp["max_grad_norm"])
                for k, v in st.items():
                    acc[k].append(v)
            if hp["target_kl"] is not None and st["approx_kl"] > hp["target_kl"]:
                break
        # CleanRL logs the last minibatch's losses; the means over the update are steadier
        mean = np.mean if self.mixed is None else _finite_mean
        return {k: float(mean(v)) for k, v in acc.items()}

    def param_views(self) -> dict:
        """The trainable arrays themselves (not copies), keyed like the gradients."""
        return _param_views(self.nets, self.log_std)

    # -- checkpoint
    def state_dict(self) -> dict:
        return {
            "params": {n: net.get_params() for n, net in self.nets.items()},
            "log_std": None if self.log_std is None else self.log_std.copy(),
            "opt": self.opt.state_dict(),
            "obs_rms": None if self.obs_rms is None else rms_state(self.obs_rms),
            "ret_rms": rms_state(self.ret_rms),
            "reward_stats": (self.reward_stats.n, self.reward_stats.m, self.reward_stats.s),
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "precision": self.precision, "assignment": self.assignment,
            "mixed": None if self.mixed is None else self.mixed.state(),
            "ret_acc": self.ret_acc.copy(), "env": self._env_state(),
        }

    def load_state_dict(self, s: dict) -> None:
        if s.get("precision", "fp64") != self.precision:
            raise RlhlsError(f"checkpoint: it was trained in precision {s.get('precision', 'fp64')} "
                             f"(this run: {self.precision})")
        self._check_plan(s)
        for n, p in s["params"].items():
            self.nets[n].set_params(p)
        if s["log_std"] is not None:
            self.log_std = np.array(s["log_std"])
        self.opt.load_state_dict(s["opt"])
        if self.obs_rms is not None:
            rms_load(self.obs_rms, s["obs_rms"])
        rms_load(self.ret_rms, s["ret_rms"])
        self.reward_stats = RunningStats(*s["reward_stats"])
        self.rng.bit_generator.state = s["rng"]
        if self.mixed is not None:
            self.mixed.load(s["mixed"])
        self.ret_acc = np.array(s["ret_acc"])
        self._load_env(s.get("env"))  # reset + replay: simulator, TimeLimit and RNG as they were


def _finite_mean(xs) -> float:
    """Mean over the finite values (skipped mixed-precision steps log NaN grad norms)."""
    xs = np.asarray(xs, dtype=np.float64)
    ok = np.isfinite(xs)
    return float(np.mean(xs[ok])) if ok.any() else float("nan")


def minibatch_steps(hp: dict) -> int:
    """Gradient steps per rollout: ``update_epochs`` x the whole minibatches in it (``PPO._learn``;
    ``num_minibatches`` where it divides the rollout)."""
    return hp["update_epochs"] * (hp["num_envs"] * hp["num_steps"] // batch_size(hp))


def node_runs(node, hp: dict) -> float:
    """Runs of a training-graph node per gradient step: GAE once per rollout, the rest every minibatch."""
    return 1.0 / minibatch_steps(hp) if node.phase == "gae" else 1.0


def ppo_graph(bld, design, nets):
    """Its training graph: the GAE unit over the rollout, the policy and value heads, one loss, backward, updates."""
    hp = design.hyperparams
    n = hp.get("num_envs", 1) * hp.get("num_steps", bld.batch)
    gae = bld.node("gae", "gae", "gae", GAE_FLOPS * n, 5 * n * bld.B)
    actor_critic(bld, design, nets, gae, 2 * bld.batch * bld.B)


register_algorithm(Algorithm("ppo", PPO, PPOArgs, batch_size, resolve=resolve_hyperparams,
                             graph=ppo_graph, loss_flops=lambda n: 10 * n + 20,
                             grad_steps=lambda hp: minibatch_steps(hp) / (hp["num_steps"] * hp["num_envs"]),
                             node_runs=node_runs,
                             summary="PPO (CleanRL) with HEPPO-GAE's standardization, quantization and GAE unit"))
