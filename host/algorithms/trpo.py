"""TRPO on the host with the Fisher-vector product of CPP's FVP unit (seed 001: §II-A, Algorithm 1,
§III-D, §IV-A).

One runner update is one TRPO iteration (Schulman et al. 2015, as OpenAI baselines' ``trpo_mpi``
runs it; ``TRPOArgs`` defaults are baselines' MuJoCo defaults, the CPP designs set the seed's):

1. Rollout of ``num_steps`` x ``num_envs`` steps with the Gaussian policy: the design's ``policy``
   network (a tanh MLP, linear output) gives the mean, ``log_std`` is a state-independent vector
   (init ``log_std_init``); the sampled action is what log-probabilities use, the environment gets
   it clipped to the action box. The sub-environments keep running across iterations
   (``envs.ReplayableVecEnv``: SAME_STEP autoreset, every episode seeded; episode ends coded
   0 continue / 1 terminated / 2 truncated).
2. Observations: normalized with running statistics (gymnasium's ``RunningMeanStd``, one for all
   sub-envs, updated every step, var + 1e-8) and clipped to +-``obs_clip`` (baselines' MlpPolicy
   clips at 5), then zero-padded to the network input (Ant 105 -> 111, Humanoid 348 -> 376:
   ``envs.pad_obs``). The clip also keeps every input inside the FVP unit's fixed<27,4> range.
3. Advantages by GAE(``gamma``, ``gae_lambda``) over the rollout (``gae.gae_reference``; a
   truncation bootstraps with V of its final observation), value targets = advantages + V, then
   advantages standardized over the batch (``norm_adv``).
4. Policy gradient g of the surrogate L(theta) = mean(pi_theta(a|s) / pi_old(a|s) A) at
   theta_old, i.e. mean(A grad log pi), by back-propagation through the tanh MLP (float64).
5. Search direction x ~ (F + cg_damping I)^-1 g by the seed's Algorithm 1 (``conjugate_gradient``:
   p = r = g, x = 0, rho = r.r; while rho > ``cg_residual_tol`` and iter < ``cg_iters``; it also stops
   where p.Ap <= 0, which only a broken-down FVP can give), CG on the host in float64. The
   Fisher-vector product z = A p inside it is CPP's FVP unit (``designs/kernels/fvp.py``): the
   kernel sums the per-sample Hessian-vector product of the KL (eq. 16-21) over the batch's
   observations (every ``fvp_subsample``-th sample), the host averages
   and adds damping (``fvp.host_fvp``), as the seed's C CG solver does. ``fvp = fixed``: the unit's
   fixed-point datapath through the run's backend (``--backend emu``: the bit-accurate numpy model;
   ``csim``: the kernel's HLS C++ compiled with g++; same bits); ``fvp = float64``: the kernel's
   float64 path (the exact Hessian-vector product, numpy; the backend is not used), the
   comparison the seed makes against double-precision Keras.
   ``fvp_scale`` (default on): before the unit, the direction is multiplied by a power of two
   2^-k with k = floor(log2 ||p||_2) (so 1 <= ||p 2^-k|| < 2), plus one for every doubling of the
   samples past what the accumulator holds (``scale_samples``: its range over ``SAMPLE_BOUND``, a
   per-sample sum bound; the unit's sum over the samples grows with their count), and the unit's
   sum by 2^k after it;
   the product is linear in p, so this changes nothing in float64, and in fixed point it keeps
   the direction's entries, which shrink as CG converges, at the storage format's resolution
   (``rlhls experiment cpp-fig4 --param scale=both`` shows the effect).
6. Step: shs = x.(F + damping I)x / 2 (one more FVP call, as baselines), full step
   x sqrt(2 max_kl / x.(F+λI)x), then a backtracking line search over ``line_search_steps``
   fractions ``line_search_shrink``^k: the first step whose surrogate improves (> 0) and whose
   mean KL(pi_old || pi_new) (float64, eq. 17, over the whole batch) is at most
   ``line_search_kl_factor`` x ``max_kl`` is taken (baselines: 1.5 x; 1.0 keeps the constraint
   strictly); else theta stays.
7. Value network: the design's ``value`` MLP fitted on the host to the value targets with Adam
   (``value_lr``, ``value_adam_eps``) for ``value_epochs`` epochs of ``value_minibatch`` shuffled
   minibatches (the last partial one dropped, as baselines), mean squared error.

Metrics per iteration (``metrics.csv``): episodes, episodic_return / length, truncations,
surrogate_gain (L(theta_new) - L(theta_old) of the step taken, 0 when rejected), expected_improve
(g . full step), kl (mean KL of the step taken), line_search_steps (halvings before the accepted
step; ``line_search_steps`` when none was accepted), step_accepted (0/1), cg_iterations,
cg_residual (final r.r), cg_residual_rel (/ g.g), grad_norm, step_norm, fvp_calls, fvp_samples,
fvp_scale (the last power of two used), inv_var_saturated (log-std entries whose 1/sigma^2 exceeds
the storage format: the unit saturates it), entropy, std (mean sigma), value_loss, explained_variance,
value_lr, and seconds per phase ``t_<phase>``: dnn_inference (acting forward), env_run,
storing_trajectories, gae (values + GAE + standardization), policy_gradient, fvp (the unit's
calls, CG's and the step's), cg (CG's host arithmetic), line_search, value_fit.

Exact resume: the checkpoint holds theta (network and log-std; also as ``policy`` = the network's
``get_params()`` dict and ``log_std``, for readers), the value network and its Adam
state, the observation statistics, the numpy Generator and the environments (per sub-env the
episode's seed and the actions since its reset, replayed on load) with the running episode
returns; a resumed run equals an uninterrupted one bit for bit (tests/test_trpo.py).

``--env`` with another environment resizes both networks to it (``trainer.adapt_network``) and the
FVP unit's layers with them (its parallelism capped at each layer's size).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import FixedFormat, parse_format
from rlhls.designs.graph import CG_FLOPS_PER_PARAM, elements, out_bytes
from rlhls.designs.kernels.fvp import host_fvp, layout, pack, unpack

from ..distributions import LOG_2PI
from ..envs import EpisodeTracker, normalize_obs, pad_obs, rms_load, rms_state, space_info
from ..gae import gae_reference
from ..hyperparams import HyperParams, hp
from ..optim import make_optimizer
from ..phases import timed
from . import Algorithm, register_algorithm
from .base import TrainerBase, adapt_network, check_memory, sample_bytes
from .rollout import collect_rollout, episode_columns, start_envs

__all__ = ["TRPOArgs", "batch_size", "PHASES", "FVP_MODES", "resolve_hyperparams", "conjugate_gradient",
           "GaussianMLP", "FvpUnit", "node_runs", "TRPO"]

FVP_MODES = ("fixed", "float64")
# fvp_scale: a bound on one sample's share of the unit's sum for a direction of norm < 2 (module
# docstring); fixed<48,16> holds 2,048 such samples, the designs' fixed<53,21> 65,536.
SAMPLE_BOUND = 16


def scale_samples(acc: str) -> int:
    """Samples the accumulator format sums without extra headroom under fvp_scale."""
    from rlhls.designs.formats import FixedFormat, parse_format_as

    return max(1, int(2 ** (parse_format_as(acc, FixedFormat).int_bits - 1) // SAMPLE_BOUND))
PHASES = ("dnn_inference", "env_run", "storing_trajectories", "gae", "policy_gradient", "fvp", "cg",
          "line_search", "value_fit")


@dataclass
class TRPOArgs(HyperParams):
    """TRPO's hyperparameters: OpenAI baselines' trpo_mpi MuJoCo defaults; the CPP designs set the
    seed's (§IV-A: CG MaxIter 10, damping 0.1, max KL 0.01, 50,000 samples per iteration)."""

    algorithm = "TRPO"
    sb3 = {"n_steps": "num_steps", "batch_size": "value_minibatch", "n_critic_updates": "value_epochs",
           "learning_rate": "value_lr", "target_kl": "max_kl", "cg_max_steps": "cg_iters",
           "line_search_shrinking_factor": "line_search_shrink", "line_search_max_iter": "line_search_steps",
           "sub_sampling_factor": "fvp_subsample", "normalize_advantage": "norm_adv"}
    num_envs: int = hp(1, "parallel sub-environments", low=1)
    num_steps: int = hp(1024, "steps per sub-environment per iteration (batch = num_envs x num_steps: "
                              "the samples of one TRPO iteration, the FVP unit's data set)", low=1)
    gamma: float = hp(0.99, "discount factor", low=0.0, high=1.0)
    gae_lambda: float = hp(0.98, "GAE lambda", low=0.0, high=1.0)
    norm_adv: bool = hp(True, "standardize the advantages over the batch")
    max_kl: float = hp(0.01, "trust region: maximum mean KL(pi_old || pi_new) (delta_KL)", above=0.0)
    cg_iters: int = hp(10, "conjugate-gradient iterations at most (Algorithm 1 MaxIter)", low=1, high=1000)
    cg_damping: float = hp(0.1, "CG damping: the host solves (F + damping I) x = g", low=0.0)
    cg_residual_tol: float = hp(1e-10, "CG stops when r.r <= this (Algorithm 1 Th)", low=0.0)
    line_search_steps: int = hp(10, "backtracking line search: step fractions tried", low=1, high=60)
    line_search_shrink: float = hp(0.5, "backtracking line search: factor between tried fractions",
                                   above=0.0, below=1.0)
    line_search_kl_factor: float = hp(1.5, "accept a step whose KL is at most this x max_kl (baselines 1.5)",
                                      low=1.0)
    fvp: str = hp("fixed", "Fisher-vector product: 'fixed' = the FVP unit's fixed-point datapath through the "
                           "backend (emu / csim), 'float64' = its exact float64 path", choices=FVP_MODES)
    fvp_subsample: int = hp(1, "FVP on every k-th sample of the batch (the seed: all; baselines: 5)", low=1)
    fvp_scale: bool = hp(True, "scale the CG direction by a power of two (||p|| in [1, 2)) before the unit "
                               "and its result back (exact in float64)")
    value_lr: float = hp(1e-3, "value network Adam step size", above=0.0)
    value_epochs: int = hp(5, "value network epochs over the batch per iteration", low=0)
    value_minibatch: int = hp(64, "value network minibatch size", low=1)
    value_adam_eps: float = hp(1e-8, "value network Adam epsilon", above=0.0)
    log_std_init: float = hp(0.0, "initial log standard deviation of the Gaussian policy")
    obs_norm: bool = hp(True, "normalize observations with running statistics")
    obs_clip: float = hp(5.0, "clip normalized observations to +-obs_clip (baselines: 5)", above=0.0)

    def check(self, design):
        n = self.num_envs * self.num_steps
        check_memory(f"num_envs x num_steps = {self.num_envs} x {self.num_steps}", n * sample_bytes(design),
                     "the rollout at least")
        if n // self.fvp_subsample < 1:
            raise RlhlsError(f"TRPO hyperparameters: num_envs x num_steps = {n} leaves no sample for the FVP "
                             f"with fvp_subsample = {self.fvp_subsample}")
        if self.value_epochs and n < self.value_minibatch:
            raise RlhlsError(f"TRPO hyperparameters: num_envs x num_steps = {n} is smaller than value_minibatch "
                             f"= {self.value_minibatch} (the value fit drops partial minibatches)")
        if self.fvp == "fixed":
            storage = _fvp_spec(design).get("storage")
            if storage is not None and self.obs_clip >= _fmt_max(storage):
                raise RlhlsError(f"TRPO hyperparameter obs_clip = {self.obs_clip:g}: the FVP unit's storage format "
                                 f"{storage} holds values below {_fmt_max(storage):g}; clip inside it")


def batch_size(hp: dict) -> int:
    """The training batch a plan is solved at: one iteration's samples (the FVP unit's data set)."""
    return hp["num_envs"] * hp["num_steps"]


def resolve_hyperparams(design, overrides: dict | None = None, config: dict | None = None) -> dict:
    """TRPOArgs: baselines' defaults <- the design's hyperparameters <- config <- overrides."""
    return TRPOArgs.resolve(design, overrides, config)


def _fvp_spec(design) -> dict:
    """The design's fvp KernelSpec parameters ({} when it names no fvp unit)."""
    from rlhls.designs.kernels import get_kernel

    k = get_kernel("fvp")
    spec = next((s for s in design.kernels if s.name == k.name and s.unit in k.units), None)
    return {} if spec is None else dict(k.spec_params(spec))


def _fmt_max(text: str) -> float:
    f = parse_format(text)
    return float(f.from_mantissa(np.array([f.max_mantissa]))[0]) if isinstance(f, FixedFormat) else math.inf


# ----------------------------------------------------------------------------- policy

class GaussianMLP:
    """The policy as one flat parameter vector theta in the FVP unit's layout (``fvp.layout``: W_1,
    b_1, ..., W_L, b_L, then log-std): a tanh MLP whose linear output is the Gaussian mean."""

    def __init__(self, layers):
        self.layers = [int(n) for n in layers]
        self.lay = layout(self.layers)
        self.P, self.m = self.lay["P"], self.lay["m"]
        self.L = len(self.layers) - 1

    @classmethod
    def from_network(cls, net, log_std_init: float):
        """(policy, theta) of a Network Dense-Tanh-...-Dense; anything else is refused."""
        kinds = [l.kind for l in net.layers]
        want = ["Dense", "Tanh"] * (len(kinds) // 2) + ["Dense"]
        if kinds != want or len(net.input_shape) != 1:
            raise RlhlsError(f"network '{net.name}': TRPO's FVP unit takes a tanh MLP with a linear output "
                             f"(Dense, Tanh, ..., Dense); it has {', '.join(kinds)}")
        dense = [l for l in net.layers if l.kind == "Dense"]
        if not all(l.bias for l in dense):
            raise RlhlsError(f"network '{net.name}': the FVP unit's layers have biases")
        pol = cls([net.input_shape[0]] + [l.out_shape[0] for l in dense])
        theta = pack([l.params["W"] for l in dense], [l.params["b"] for l in dense],
                     np.full(pol.m, float(log_std_init)))
        return pol, theta

    def mean(self, theta, obs, keep: bool = False):
        """mu (N, m) of observations (N, n_0); with keep, also the layer outputs [y_0, ..., y_L]."""
        Ws, bs, _ = unpack(theta, self.layers)
        y = np.asarray(obs, dtype=np.float64)
        ys = [y]
        for l in range(self.L):
            x = y @ Ws[l] + bs[l]
            y = np.tanh(x) if l < self.L - 1 else x
            ys.append(y)
        return (y, ys) if keep else y

    def log_std(self, theta):
        return theta[self.P:]

    def log_prob(self, theta, obs, act, mu=None):
        mu = self.mean(theta, obs) if mu is None else mu
        ls = self.log_std(theta)
        z = (act - mu) * np.exp(-ls)
        return np.sum(-0.5 * z * z - ls - 0.5 * LOG_2PI, axis=-1)

    def kl(self, theta_old, mu_old, theta, mu) -> float:
        """Mean over the samples of KL(pi_old || pi_theta) (eq. 17)."""
        ls0, ls = self.log_std(theta_old), self.log_std(theta)
        var0, var = np.exp(2 * ls0), np.exp(2 * ls)
        per = (ls - ls0) + (var0 + (mu_old - mu) ** 2) / (2 * var) - 0.5
        return float(np.mean(np.sum(per, axis=-1)))

    def surrogate_grad(self, theta, obs, act, adv) -> np.ndarray:
        """grad of mean(pi_theta / pi_old A) at theta = theta_old: mean(A grad log pi), flat."""
        mu, ys = self.mean(theta, obs, keep=True)
        Ws, _, _ = unpack(theta, self.layers)
        n = obs.shape[0]
        ls = self.log_std(theta)
        inv_var = np.exp(-2 * ls)
        diff = act - mu
        g = adv[:, None] * diff * inv_var / n
        g_ls = np.sum(adv[:, None] * (diff * diff * inv_var - 1.0), axis=0) / n
        gW, gb = [None] * self.L, [None] * self.L
        for l in range(self.L - 1, -1, -1):
            if l < self.L - 1:
                g = g * (1.0 - ys[l + 1] ** 2)
            gW[l], gb[l] = ys[l].T @ g, g.sum(axis=0)
            if l > 0:
                g = g @ Ws[l].T
        return pack(gW, gb, g_ls)


def conjugate_gradient(fvp, b, iters: int, tol: float):
    """The seed's Algorithm 1: solves A x = b with z = A p from ``fvp(p)``; returns (x, rho, iters)."""
    b = np.asarray(b, dtype=np.float64)
    p, r, x = b.copy(), b.copy(), np.zeros_like(b)
    rho = float(r @ r)
    it = 0
    while rho > tol and it < iters:
        z = fvp(p)
        pz = float(p @ z)
        if not (math.isfinite(pz) and pz > 0.0):  # not positive definite along p (fixed-point breakdown)
            break
        v = rho / pz
        x += v * p
        r -= v * z
        rho_new = float(r @ r)
        p = r + (rho_new / rho) * p
        rho = rho_new
        it += 1
    return x, rho, it


class FvpUnit:
    """CPP's FVP unit as CG calls it: ``(obs, theta, v) -> host_fvp`` = mean over the samples of the
    KL's Hessian-vector product + damping v (module docstring, step 5)."""

    def __init__(self, design, backend, layers, samples: int, hp: dict, overrides: dict | None = None):
        from rlhls.designs.kernels import get_kernel

        self.kernel = get_kernel("fvp")
        spec = {**_fvp_spec(design), **(overrides or {})}
        base = spec.get("parallelism") or [1] * len(layers)
        if len(base) != len(layers):
            base = [1] * len(layers)
        par = [max(1, min(int(q), int(n))) for q, n in zip(base, layers)]
        self.mode = hp["fvp"]
        self.p = self.kernel.resolve({**spec, "layers": list(layers), "parallelism": par, "samples": int(samples),
                                      "iterations": hp["cg_iters"], "damping": hp["cg_damping"],
                                      "fp64": self.mode == "float64"})
        self.backend = backend
        self.damping = hp["cg_damping"]
        self.scale = hp["fvp_scale"]
        self.storage_max = _fmt_max(self.p["storage"])
        self.scale_samples = scale_samples(self.p["acc"])
        self.calls = 0
        self.last_scale = 1.0

    def __call__(self, obs, theta_net, v, inv_var):
        v = np.asarray(v, dtype=np.float64)
        s = 1.0
        if self.scale:
            norm = float(np.linalg.norm(v))
            if norm > 0.0 and math.isfinite(norm):
                # the unit sums over the samples: past scale_samples, one bit of headroom per doubling
                # (50,000 Ant samples summed 39,135, past fixed<48,16>'s 32,768)
                head = max(0, math.ceil(math.log2(obs.shape[0] / self.scale_samples)))
                s = math.ldexp(1.0, -math.floor(math.log2(norm)) - head)
        self.last_scale = s
        arrays = {"obs": obs, "theta": theta_net, "v": v * s, "inv_var": inv_var}
        if self.mode == "float64":
            out = self.kernel.model(self.p, **arrays)["fvp"]
        else:
            out = self.backend.call("fvp", self.p, **arrays)["fvp"]
        self.calls += 1
        return host_fvp(out / s, v, obs.shape[0], self.damping)


# ----------------------------------------------------------------------------- the trainer

class TRPO(TrainerBase):
    """One TRPO run (module docstring; the constructor and interface: ``TrainerBase``)."""

    algorithm = "trpo"
    networks = ("policy", "value")
    resolve_hyperparams = staticmethod(resolve_hyperparams)

    def _setup(self, design, nets: dict, assignment) -> None:
        hp = self.hp
        self.space = sp = space_info(self.envs)
        if sp["kind"] != "continuous" or len(sp["obs_shape"]) != 1:
            raise RlhlsError(f"TRPO's Gaussian policy needs flat observations and a Box action space; "
                             f"'{self.env_id}' observes {sp['obs_shape']} with {sp['kind']} actions")
        pol, val = nets["policy"], nets["value"]
        obs_dim = sp["obs_shape"][0]
        if self.env_id == design.env_id:
            # the design's own env: keep its networks, zero-pad the observation (CPP: 105 -> 111, 348 -> 376)
            self.in_dim = pol.input_shape[0]
            if obs_dim > self.in_dim:
                raise RlhlsError(f"environment '{self.env_id}' observes {obs_dim} values but design "
                                 f"'{design.name}' networks take {self.in_dim}")
        else:
            self.in_dim = obs_dim
            pol = adapt_network(pol, obs_dim, sp["action_dim"])
            val = adapt_network(val, obs_dim, 1)
        if pol.output_shape != (sp["action_dim"],) or val.output_shape != (1,) or val.input_shape != (self.in_dim,):
            raise RlhlsError(f"networks 'policy' {pol.input_shape} -> {pol.output_shape} and 'value' "
                             f"{val.input_shape} -> {val.output_shape} do not fit '{self.env_id}' "
                             f"({self.in_dim} inputs, {sp['action_dim']} actions)")
        self.policy, self.theta = GaussianMLP.from_network(pol, hp["log_std_init"])
        self.dense_names = [l.name for l in pol.layers if l.kind == "Dense"]
        self.val = val
        self.vopt = make_optimizer("adam", hp["value_lr"], eps=hp["value_adam_eps"])
        self.obs_rms = RunningMeanStd(shape=(obs_dim,)) if hp["obs_norm"] else None
        self.rng = np.random.default_rng(self.seed)
        self.steps_per_update = batch_size(hp)
        n_fvp = len(range(0, self.steps_per_update, hp["fvp_subsample"]))
        self.unit = FvpUnit(design, self.backend, self.policy.layers, n_fvp, hp)
        self.assignment = None  # TRPO follows no plan: the FVP unit is the design's, the rest the host's
        self.obs = None  # normalized, padded observations of the current step (None: envs not reset yet)
        self.tracker = EpisodeTracker(hp["num_envs"])

    # -- helpers
    def _obs(self, raw, update_stats: bool):
        raw = np.asarray(raw, dtype=np.float64)
        if self.obs_rms is not None:
            raw = normalize_obs(self.obs_rms, raw, self.hp["obs_clip"], update_stats)
        return pad_obs(raw, self.in_dim)

    def _value(self, obs) -> np.ndarray:
        return self.val.forward(obs)[:, 0]

    def predict(self, obs, deterministic: bool = True, rng=None) -> np.ndarray:
        """The normalization's running statistics are read, not updated (SB3's VecNormalize in evaluation)."""
        obs = self._obs(obs, False)
        mean = self.policy.mean(self.theta, obs)
        if not deterministic:
            mean = mean + np.exp(self.policy.log_std(self.theta)) * rng.standard_normal(mean.shape)
        return self._env_action(mean)

    # -- one iteration
    def collect(self, update: int, times: dict | None = None) -> dict:
        """One iteration's batch (steps 1-3 of the module docstring): ``obs`` (n, inputs) normalized
        and padded, ``act`` (n, m), ``adv`` (standardized when ``norm_adv``), ``ret`` (value targets),
        ``values`` (V before the fit), ``episodes`` [(env_step, return, length)], ``truncations``."""
        hp = self.hp
        times = {p: 0.0 for p in PHASES} if times is None else times
        T, N, m = hp["num_steps"], hp["num_envs"], self.policy.m
        start_envs(self, times, self._obs)
        theta = self.theta
        std = np.exp(self.policy.log_std(theta))

        def act(obs):
            return self.policy.mean(theta, obs) + std * self.rng.standard_normal((N, m)), None, None

        # values after the rollout, in one batch (value=None: the loop keeps the truncations' final observations)
        ro = collect_rollout(self, T, times, (update - 1) * T * N, act=act, observe=self._obs)
        n = T * N
        with timed(times, "gae"):
            values = self._value(ro.flat("obs")).reshape(T, N)
            boot = self._value(self.obs)
            tval = np.zeros((T, N))
            f_t, f_i, f_obs = ro.finals
            if f_obs is not None:
                tval[f_t, f_i] = self._value(f_obs)
            adv, ret = gae_reference(ro.rew, values, ro.done, boot, hp["gamma"], hp["gae_lambda"], trunc_values=tval)
            adv, ret = adv.reshape(-1), ret.reshape(-1)
            if hp["norm_adv"] and n > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        return {"obs": ro.flat("obs"), "act": ro.flat("act"), "adv": adv, "ret": ret,
                "values": values.reshape(-1), "episodes": ro.episodes, "truncations": ro.truncations}

    def train_update(self, update: int, total_updates: int) -> dict:
        times = {p: 0.0 for p in PHASES}
        b = self.collect(update, times)
        stats = self._policy_step(b["obs"], b["act"], b["adv"], times)
        with timed(times, "value_fit"):
            v_loss = self._fit_value(b["obs"], b["ret"])
        ret, episodes = b["ret"], b["episodes"]
        var_y = float(np.var(ret))
        ls = self.policy.log_std(self.theta)
        row = {
            **episode_columns(episodes, b["truncations"]),
            **stats,
            "entropy": float(np.sum(0.5 + 0.5 * LOG_2PI + ls)),
            "std": float(np.mean(np.exp(ls))),
            "value_loss": v_loss,
            "explained_variance": float("nan") if var_y == 0 else float(1 - np.var(ret - b["values"]) / var_y),
        }
        row.update({f"t_{p}": times[p] for p in PHASES})
        row["_episodes"] = episodes
        return row

    def _policy_step(self, X, A, adv, times) -> dict:
        hp, pol = self.hp, self.policy
        theta = self.theta
        with timed(times, "policy_gradient"):
            mu_old = pol.mean(theta, X)
            logp_old = pol.log_prob(theta, X, A, mu_old)
            g = pol.surrogate_grad(theta, X, A, adv)
        Xf = X[::hp["fvp_subsample"]]
        theta_net = theta[:pol.P]
        inv_var = np.exp(-2.0 * pol.log_std(theta))
        calls0 = self.unit.calls

        def fvp(v):
            with timed(times, "fvp"):
                return self.unit(Xf, theta_net, v, inv_var)

        t_fvp = times["fvp"]
        with timed(times, "cg"):
            x, rho, iters = conjugate_gradient(fvp, g, hp["cg_iters"], hp["cg_residual_tol"])
            times["cg"] -= times["fvp"] - t_fvp  # CG's own arithmetic: the unit's calls are t_fvp
        with timed(times, "line_search"):
            t_fvp = times["fvp"]
            shs = 0.5 * float(x @ fvp(x))
            times["line_search"] -= times["fvp"] - t_fvp
            gg = float(g @ g)
            out = {"surrogate_gain": 0.0, "expected_improve": float("nan"), "kl": 0.0,
                   "line_search_steps": hp["line_search_steps"], "step_accepted": 0,
                   "cg_iterations": iters, "cg_residual": rho, "cg_residual_rel": rho / gg if gg > 0 else 0.0,
                   "grad_norm": math.sqrt(gg), "step_norm": 0.0}
            if math.isfinite(shs) and shs > 0.0:
                full = x * math.sqrt(hp["max_kl"] / shs)
                out["expected_improve"] = float(g @ full)
                surr_old = float(np.mean(adv))  # ratio 1 at theta_old
                frac = 1.0
                for k in range(hp["line_search_steps"]):
                    th = theta + frac * full
                    mu = pol.mean(th, X)
                    surr = float(np.mean(np.exp(pol.log_prob(th, X, A, mu) - logp_old) * adv))
                    kl = pol.kl(theta, mu_old, th, mu)
                    if (math.isfinite(surr) and math.isfinite(kl) and kl <= hp["line_search_kl_factor"] * hp["max_kl"]
                            and surr - surr_old > 0.0):
                        out.update(surrogate_gain=surr - surr_old, kl=kl, line_search_steps=k, step_accepted=1,
                                   step_norm=float(np.linalg.norm(th - theta)))
                        self.theta = th
                        break
                    frac *= hp["line_search_shrink"]
        out.update(fvp_calls=self.unit.calls - calls0, fvp_samples=int(Xf.shape[0]), fvp_scale=self.unit.last_scale,
                   inv_var_saturated=int(np.sum(inv_var >= self.unit.storage_max)) if hp["fvp"] == "fixed" else 0)
        return out

    def _fit_value(self, X, ret) -> float:
        hp = self.hp
        n, mb = X.shape[0], hp["value_minibatch"]
        views = {f"value.{l.name}.{k}": a for l in self.val.layers for k, a in l.params.items()}
        losses = []
        for _ in range(hp["value_epochs"]):
            perm = self.rng.permutation(n)
            for s in range(0, n - mb + 1, mb):
                idx = perm[s:s + mb]
                diff = self._value(X[idx]) - ret[idx]
                losses.append(float(np.mean(diff * diff)))
                self.val.backward((2.0 / mb) * diff[:, None])
                self.vopt.step(views, {f"value.{k}": g for k, g in self.val.grads.items()})
        if not losses:
            diff = self._value(X) - ret
            return float(np.mean(diff * diff))
        return float(np.mean(losses))

    # -- checkpoint
    def state_dict(self) -> dict:
        Ws, bs, ls = unpack(self.theta, self.policy.layers)
        return {
            "theta": self.theta.copy(),
            # the policy network's parameters as Network.get_params() names them (readers of checkpoints:
            # the trained policy's weights); loading takes theta
            "policy": {**{f"{n}.W": W.copy() for n, W in zip(self.dense_names, Ws)},
                       **{f"{n}.b": b.copy() for n, b in zip(self.dense_names, bs)}},
            "log_std": ls.copy(),
            "value": self.val.get_params(), "value_opt": self.vopt.state_dict(),
            "obs_rms": None if self.obs_rms is None else rms_state(self.obs_rms),
            "rng": copy.deepcopy(self.rng.bit_generator.state), "fvp": self.hp["fvp"],
            "env": self._env_state(),
        }

    def load_state_dict(self, s: dict) -> None:
        if s.get("fvp") != self.hp["fvp"]:
            raise RlhlsError(f"checkpoint: it was trained with fvp = {s.get('fvp')} (this run: {self.hp['fvp']})")
        theta = np.array(s["theta"], dtype=np.float64)
        if theta.shape != self.theta.shape:
            raise RlhlsError(f"checkpoint: policy has {theta.size} parameters, this run's {self.theta.size}")
        self.theta = theta
        self.val.set_params(s["value"])
        self.vopt.load_state_dict(s["value_opt"])
        if self.obs_rms is not None:
            rms_load(self.obs_rms, s["obs_rms"])
        self.rng.bit_generator.state = s["rng"]
        self._load_env(s.get("env"))


def node_runs(node, hp: dict) -> float:
    """Runs of a training-graph node per iteration. The value network's nodes stand for the whole batch
    in the graph; ``_fit_value`` runs ``value_epochs`` epochs of whole ``value_minibatch`` minibatches:
    its forward, loss and backward as often as that is whole batches of samples, its optimizer step
    once per minibatch (no epochs: one forward and loss over the batch). The FVP nodes count
    ``cg_iters`` products over the whole batch inside; ``_policy_step`` runs CG's products at most
    ``cg_iters`` and the line search's one, each on every ``fvp_subsample``-th sample. The policy's
    other nodes run once (CG counts its ``cg_iters`` inside)."""
    n = batch_size(hp)
    if node.phase in ("fvp_fwd", "fvp_bwd"):
        return (hp["cg_iters"] + 1) / hp["cg_iters"] * len(range(0, n, hp["fvp_subsample"])) / n
    if node.instance not in ("value", "value_loss"):
        return 1.0
    mb = hp["value_minibatch"]
    steps = hp["value_epochs"] * (n // mb)
    if node.phase == "upd":
        return float(steps)
    if steps == 0:
        return 1.0 if node.phase in ("fwd", "loss") else 0.0
    return steps * mb / n


def trpo_graph(bld, design, nets):
    """Its training graph: the value regression, the policy gradient of the surrogate, CG's Fisher-vector
    products (CPP's combined forward and Pearlmutter backward per layer, x cg_iters), CG and the line search."""
    hp = design.hyperparams
    iters = int(hp.get("cg_iters", 10))
    b, B = bld.batch, bld.B
    policy, value = nets["policy"], nets["value"]
    # value regression
    v = bld.forward("value", value, "fwd")
    vb = out_bytes(bld, value)
    vloss = bld.node("value_loss", "value_loss", "loss", 3 * b, 3 * b * B)
    bld.edge(v, vloss, vb)
    vbwd = bld.backward("value", value, "fwd", [(vloss, vb)])
    bld.update("value", value, vbwd, design.net("value").optimizer)
    # policy gradient of the surrogate
    p = bld.forward("policy", policy, "fwd")
    pb = out_bytes(bld, policy)
    sur = bld.loss("surrogate", [(p, pb)], design.action_dim)
    pbwd = bld.backward("policy", policy, "fwd", [(sur, pb)])
    layers = bld.compute_layers(policy)
    # conjugate gradient: each iteration is one CPP pass (combined forward + Pearlmutter backward)
    prev = pbwd[layers[0].name]
    prev_bytes = policy.n_params * B
    for i, layer in enumerate(layers):
        f = layer.flops(b)
        nin, nout = elements(layer.in_shape), elements(layer.out_shape)
        name = bld.node(f"policy.{layer.name}.fvp_fwd", f"policy.{layer.name}", "fvp_fwd", 2 * f["forward"] * iters,
                        (2 * nin + 2 * nout) * b * B * iters + 2 * layer.n_params * B, layer.is_mm)
        bld.edge(prev, name, prev_bytes)
        prev, prev_bytes = name, 2 * nout * b * B
    for i in range(len(layers) - 1, -1, -1):
        layer = layers[i]
        f = layer.flops(b)
        nin, nout = elements(layer.in_shape), elements(layer.out_shape)
        flops = (f["backward_weight"] + (f["backward_input"] if i > 0 else 0)) * iters
        name = bld.node(f"policy.{layer.name}.fvp_bwd", f"policy.{layer.name}", "fvp_bwd", flops,
                        (nout + 2 * nin) * b * B * iters + 2 * layer.n_params * B, layer.is_mm)
        saved = f"policy.{layer.name}.fvp_fwd"  # its forward kept the layer's inputs
        if prev == saved:  # the last layer: one edge carries both tensors
            bld.edge(prev, name, prev_bytes + 2 * nin * b * B)
        else:
            bld.edge(prev, name, prev_bytes)
            bld.edge(saved, name, 2 * nin * b * B)
        prev, prev_bytes = name, nin * b * B
    n = policy.n_params
    cg = bld.node("cg", "cg", "cg", CG_FLOPS_PER_PARAM * n * iters, 6 * n * B * iters)
    bld.edge(prev, cg, n * B)
    ls = bld.node("linesearch", "linesearch", "linesearch", sum(l.flops(b)["forward"] for l in layers),
                  (n + elements(policy.input_shape) * b) * B)
    bld.edge(cg, ls, n * B)
    step = {l.name: ls for l in layers}
    bld.update("policy", policy, step, design.net("policy").optimizer)


register_algorithm(Algorithm("trpo", TRPO, TRPOArgs, batch_size, resolve=resolve_hyperparams,
                             graph=trpo_graph,
                             grad_steps=lambda hp: 1.0 / batch_size(hp), node_runs=node_runs, actions=("continuous",),
                             summary="TRPO (baselines' trpo_mpi) whose CG takes its Fisher-vector products from "
                                     "CPP's FVP unit (emu / csim), CG and line search on the host"))
