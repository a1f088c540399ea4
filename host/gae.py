"""HEPPO-GAE's GAE stage (seed 000, §II-§IV, Table III) on the host: reward and value
standardization, n-bit uniform quantization, and the GAE unit run through a backend.

Table III mapping (``EXPERIMENTS``; ``experiment`` hyperparameter, default 5 for heppo-ppo):

=====  ==========================================================  =====================  =====
exp    rewards into GAE                                            values into GAE        quant
=====  ==========================================================  =====================  =====
1      CleanRL NormalizeReward: r / sqrt(Var[discounted return]    float                  none
       + 1e-8), clip +-10 (the baseline)
2      dynamic standardization (Welford over every reward of the    float                  none
       run, eq. 6-9), kept standardized
3      block std per rollout -> uq<n> -> de-standardized           block std -> uq<n> ->  uq<n>
                                                                   de-std                 both
4      block std per rollout -> uq<n>, kept standardized           block std/de-std uq<n> both
5      dynamic std (Welford, whole run) -> uq<n>, kept std.        block std/de-std uq<n> both
=====  ==========================================================  =====================  =====

Raw env rewards feed experiments 2-5 (CleanRL's reward normalization is replaced). A block is
one rollout (all T x N values, plus the N bootstrap values for the values block); (mu, sigma)
are population statistics (quantizer.block_stats). n = ``quant_bits`` in 3..10 (default 8).
The returns (value targets) are the GAE unit's rewards-to-go ``V + A`` with V as the unit saw it.

The units are the built ones (``gae_units``: the design bound to the run's hyperparameters, its
GAE and standardizer components' parameters as the build renders them). With a standardizer unit
(heppo-ppo) the quantized experiments take their codes and (mu, sigma) from it through the backend,
in the hardware's formats (fp32 words, float64 statistics, fp32 per-element standardization);
without one, from designs/quantizer.py in float64.

GAE stage: ``gae_stage(backend, ...)`` builds the GAE memory image (``gae_fetch``: codes and
(mu, sigma)), runs the unit (``gae_compute``) and writes advantages / RTGs back into the
minibatch buffers (``gae_write``). Quantized experiments call
``backend.call('gae', params, **arrays)`` (``GAE_CALL`` documents it) when
``rlhls.host.backends`` and the ``gae`` kernel exist; until then (and for the float
experiments 1-2) the numpy reference ``gae_reference`` computes the same recurrence (eq. 4),
done_t convention "episode ended at step t": delta_t = r_t + gamma V'_{t+1} - V_t with V' = 0
on termination, V(final obs) on truncation, else V_{t+1} (V_T = bootstrap);
A_t = delta_t + gamma lambda [d_t = 0] A_{t+1}. Backends: experiments 4-5 run the ``gae`` kernel
through ``--backend`` (emu = numpy model, csim = the compiled HLS C++, bit-identical);
experiments 1-2 (float) and 3 (rewards de-standardized, which the kernel's datapath does not do)
always use ``gae_reference`` in numpy, whatever the backend.

Experiment 0 (not in HEPPO-GAE's table): raw env rewards into the float GAE, no normalization --
CleanRL's ``ppo_atari.py`` (whose env already clips rewards to their sign, host/envs/atari.py); the
AP-DRL MsPacman design sets it.

"""

from __future__ import annotations

import numpy as np

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import UniformFormat, parse_format_as
from rlhls.designs.quantizer import EXPERIMENTS, RunningStats, quantize_blocks, quantize_standardized

from .phases import timed

__all__ = ["EXPERIMENTS", "GAE_CALL", "gae_reference", "gae_stage", "gae_units"]

GAE_CALL = """backend.call('gae', {'gamma': g, 'lam': l, 'bits': n, 'lookahead': k, 'steps': T, 'trajectories': N},
    reward_codes=uint16 (T, N), reward_mu=float64 (), reward_sigma=float64 (),
    value_codes=uint16 (T, N), value_mu=float64 (), value_sigma=float64 (),
    dones=uint8 (T, N) [1 = episode ended at step t], bootstrap=float64 (N,) [V(s_T), de-quantized])
 -> {'advantages': (T, N), 'rtgs': (T, N)}   reward = decode(code)*reward_sigma + reward_mu
    (mu=0, sigma=1 when rewards stay standardized), value = decode(code)*value_sigma + value_mu"""


def gae_reference(rewards, values, dones, bootstrap, gamma: float, lam: float, trunc_values=None):
    """Eq. 2-5 backwards over t; arrays (T, N); returns (advantages, rewards-to-go).

    ``dones``: 0 = the episode continues after step t, 1 (or True) = terminated at t (next value
    0), 2 = truncated at t (next value ``trunc_values[t]``, V of the final observation). Either
    end cuts the recursion; the GAE kernel uses the same codes."""
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    d = np.asarray(dones).astype(np.int64)
    if np.any(d == 2) and trunc_values is None:
        raise RlhlsError("gae_reference: dones mark truncations (2) but no trunc_values were given")
    tv = np.zeros_like(rewards) if trunc_values is None else np.asarray(trunc_values, dtype=np.float64)
    cont = (d == 0).astype(np.float64)
    T = rewards.shape[0]
    adv = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[1:])
    for t in range(T - 1, -1, -1):
        nv = bootstrap if t == T - 1 else values[t + 1]
        nv = np.where(d[t] == 1, 0.0, np.where(d[t] == 2, tv[t], nv))
        delta = rewards[t] + gamma * nv - values[t]
        last = delta + gamma * lam * cont[t] * last
        adv[t] = last
    return adv, adv + values


def _kernel_arrays(a: dict, fmt, v_codes_all, boot_codes) -> dict:
    """Map the GAE memory image onto designs/kernels/gae.py's inputs: rewards stay standardized
    (mu 0, sigma 1), done 0/1/2 = continue/terminated/truncated, bootstrap_codes = value codes of
    the final observations (read where done = 2), value_stats = [mu, sigma] of the one value
    block, last_value_codes = the bootstrap row."""
    T = a["reward_codes"].shape[0]
    return {"reward_codes": a["reward_codes"].astype(np.float64), "value_codes": a["value_codes"].astype(np.float64),
            "done": a["dones"].astype(np.float64), "bootstrap_codes": boot_codes.astype(np.float64),
            "last_value_codes": v_codes_all[T].astype(np.float64),
            "value_stats": np.array([float(a["value_mu"]), float(a["value_sigma"])])}


def _rewards_in(rewards, r_mode, quant, fmt, reward_stats, info):
    """(codes, mu, sigma, float input) of the rewards on the host's float64 path (designs/quantizer.py)."""
    r_codes, r_mu, r_sigma, r_in = None, 0.0, 1.0, None
    if r_mode == "dynamic":
        if quant:
            r_codes, r_ovf = quantize_standardized(rewards, reward_stats, fmt, update=True, return_overflow=True)
            info["reward_overflow"] = int(r_ovf)
        else:
            reward_stats.update(rewards)
            r_in = reward_stats.standardize(rewards)
    elif r_mode in ("block_destd", "block_keep"):
        q = quantize_blocks(rewards.reshape(1, -1), fmt)
        r_codes = q.codes.reshape(rewards.shape)
        info["reward_overflow"] = int(q.overflow)
        if r_mode == "block_destd":
            r_mu, r_sigma = float(q.mu[0]), float(q.sigma[0]) if q.sigma[0] > 0 else 1.0
    else:
        r_in = rewards
    return r_codes, r_mu, r_sigma, r_in


def gae_units(design, hp: dict) -> dict:
    """The units training runs the GAE stage on, as the build renders them for the design bound to
    the run's hyperparameters (``Design.bind``; the same ``node_params``): {'gae': the GAE unit's
    parameters, 'standardizer': the standardizer's, or None where the design has no standardizer
    (then designs/quantizer.py's float64 path)}. A design without a GAE unit: the kernel's
    defaults at the run's hyperparameters (``Param.hyperparam``)."""
    from rlhls.designs.kernels import KernelContext, get_kernel

    bound = design.bind(hp)
    ctx = KernelContext(bound) if any(s.name in ("gae", "standardizer") for s in bound.kernels) else None
    out = {}
    for name in ("gae", "standardizer"):
        k = get_kernel(name)
        node = None if ctx is None else next((n for n in ctx.graph.nodes if n.kind in k.implements), None)
        p = None if node is None else k.node_params(node, ctx)
        if p is None and name == "gae":
            p = k.linked_params(hp)
        out[name] = None if p is None else k.resolve(p)
    return out


def _standardize(backend, sp: dict, rewards, values, d, bootstrap, tv, r_mode: str, reward_stats: RunningStats):
    """The standardizer unit's memory image of one rollout (designs/kernels/standardizer.py) in the
    format the hardware has; updates the running reward statistics in place (dynamic)."""
    T, N = rewards.shape
    want = "dynamic" if r_mode == "dynamic" else "block"
    if (sp["steps"], sp["trajectories"]) != (T, N) or sp["rewards"] != want:
        raise RlhlsError(f"gae_stage: the standardizer unit takes {sp['steps']} x {sp['trajectories']} rollouts "
                         f"with {sp['rewards']} rewards, this one is {T} x {N} with {want} rewards")
    if backend is None:
        from .backends import EmuBackend

        backend = EmuBackend()
    y = backend.call("standardizer", sp, rewards=rewards, values=values, done=d.astype(np.float64),
                     trunc_values=tv, bootstrap=bootstrap,
                     state_in=np.array([reward_stats.n, reward_stats.m, reward_stats.s], dtype=np.float64))
    if r_mode == "dynamic":
        n, m, s2 = (float(v) for v in y["state_out"])
        reward_stats.n, reward_stats.m, reward_stats.s = int(n), m, s2
    return y


def gae_stage(backend, rewards, values, dones, bootstrap, *, gamma, lam, mode: dict, reward_stats: RunningStats,
              bits: int = 8, lookahead: int = 2, units: dict | None = None, times: dict | None = None,
              trunc_values=None):
    """HEPPO's GAE stage for one rollout; (T, N) arrays. Returns (adv, rtg, info).

    ``dones`` 0/1/2 (continue / terminated / truncated, see gae_reference); ``trunc_values``
    (T, N): V(final observation) where dones == 2 (else ignored). In the quantized experiments
    they join the rollout's value block (one (mu, sigma) for V(s_t), the bootstrap row and them).

    `rewards` are what the experiment feeds (raw env rewards for exp 2-5, CleanRL-normalized
    for exp 1). `backend` is a Backend object or None (numpy reference). ``units``: the run's
    ``gae_units`` (the built units' parameters; `bits` and `lookahead` are then theirs), else the GAE
    unit at `bits`, `lookahead` and no standardizer unit."""
    times = {} if times is None else times
    T, N = rewards.shape
    if units is None:
        units = {"gae": {"gamma": gamma, "lam": lam, "bits": bits, "lookahead": lookahead, "steps": T,
                         "trajectories": N}, "standardizer": None}
    gp, sp = units["gae"], units.get("standardizer")
    if (gp["steps"], gp["trajectories"]) != (T, N) or (gp["gamma"], gp["lam"]) != (gamma, lam):
        raise RlhlsError(f"gae_stage: the GAE unit takes {gp['steps']} x {gp['trajectories']} rollouts at gamma "
                         f"{gp['gamma']}, lambda {gp['lam']}; this one is {T} x {N} at {gamma}, {lam}")
    bits = gp["bits"]
    fmt = parse_format_as(f"uq<{bits}>", UniformFormat)
    info: dict[str, float] = {}
    with timed(times, "gae_fetch"):
        r_mode, quant = mode["reward"], mode["quant"]
        r_mu, r_sigma = 0.0, 1.0
        d = np.asarray(dones).astype(np.uint8)
        trunc = d == 2
        if trunc.any() and trunc_values is None:
            raise RlhlsError("gae_stage: dones mark truncations (2) but no trunc_values were given")
        tv = np.zeros((T, N)) if trunc_values is None else np.asarray(trunc_values, dtype=np.float64)
        if quant and sp is not None:  # the standardizer unit, in its own formats
            y = _standardize(backend, sp, rewards, values, d, bootstrap, tv, r_mode, reward_stats)
            r_codes, v_codes, boot_codes = (y[k].astype(np.int64) for k in ("reward_codes", "value_codes",
                                                                           "bootstrap_codes"))
            v_codes_all = np.concatenate([v_codes, y["last_value_codes"][None].astype(np.int64)])
            info["reward_overflow"], info["value_overflow"] = (int(v) for v in y["overflow"])
            v_mu, v_sigma = (float(v) for v in y["value_stats"])
            if r_mode == "block_destd":
                r_mu, r_sigma = (float(v) for v in y["reward_stats"])
            boot_in = fmt.decode(v_codes_all[T]) * v_sigma + v_mu
            tv_in = np.where(trunc, fmt.decode(boot_codes) * v_sigma + v_mu, 0.0)
            info["value_mu"], info["value_sigma"] = v_mu, v_sigma
        else:
            r_codes, r_mu, r_sigma, r_in = _rewards_in(rewards, r_mode, quant, fmt, reward_stats, info)
            if mode["value"] == "block":
                n_tr = int(trunc.sum())
                q = quantize_blocks(np.concatenate([values.reshape(-1), bootstrap, tv[trunc]])[None], fmt)
                c = q.codes.reshape(-1)
                v_codes_all = c[:(T + 1) * N].reshape(T + 1, N)
                boot_codes = np.zeros((T, N), dtype=c.dtype)
                boot_codes[trunc] = c[(T + 1) * N:(T + 1) * N + n_tr]
                v_mu, v_sigma = float(q.mu[0]), float(q.sigma[0]) if q.sigma[0] > 0 else 1.0
                v_codes = v_codes_all[:T]
                boot_in = fmt.decode(v_codes_all[T]) * v_sigma + v_mu
                tv_in = np.where(trunc, fmt.decode(boot_codes) * v_sigma + v_mu, 0.0)
                info["value_overflow"] = int(q.overflow)
                info["value_mu"], info["value_sigma"] = v_mu, v_sigma
            else:
                v_in, boot_in, tv_in = values, bootstrap, tv
    with timed(times, "gae_compute"):
        if quant:
            arrays = dict(reward_codes=r_codes, reward_mu=np.float64(r_mu), reward_sigma=np.float64(r_sigma),
                          value_codes=v_codes, value_mu=np.float64(v_mu), value_sigma=np.float64(v_sigma),
                          dones=d, bootstrap=boot_in)
            if backend is not None and r_mode != "block_destd":
                out = backend.call("gae", gp, **_kernel_arrays(arrays, fmt, v_codes_all, boot_codes))
                adv, rtg = np.asarray(out["advantages"], np.float64), np.asarray(out["returns"], np.float64)
            else:
                r = fmt.decode(r_codes) * r_sigma + r_mu
                v = fmt.decode(v_codes) * v_sigma + v_mu
                adv, rtg = gae_reference(r, v, d, boot_in, gamma, lam, tv_in)
        else:
            adv, rtg = gae_reference(r_in, v_in, d, boot_in, gamma, lam, tv_in)
    with timed(times, "gae_write"):
        adv, rtg = adv.reshape(-1).copy(), rtg.reshape(-1).copy()
    if r_mode == "dynamic":
        info["reward_mu"], info["reward_sigma"] = reward_stats.mean, reward_stats.std
    return adv, rtg, info
