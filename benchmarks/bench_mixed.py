"""Cost of AP-DRL mixed precision on the host, per MLP benchmark, measured side by side in one run:
host time of one gradient step with every node on the PS (fp32) vs the ILP plan (mixed: FP16 /
BF16 bit-exact emulation + FP32 masters + loss scaling) vs a plan with every matrix multiply on
the AIE (BF16), the ratio to fp32, and the training loop's env steps/s (learning from the first
step, so every env step pays its share of gradient steps). The PS layers compute in float32
(``ps_math=float32``, the default); the rows marked "PS float64" run the same configurations with
``ps_math=float64`` (FP32-rounded tensors, float64 BLAS sums: the earlier path), so the
gain of the float32 path shows beside it; "x torch" is each row's time over PyTorch's.

    python benchmarks/bench_mixed.py [--repeats 5] [--only dqn,a2c,ddpg-lunar,ddpg-mntn]
                                     [--env-steps N] [--no-loop] [--cpu-time]

One "gradient step" is, per algorithm (each at the design's batch):
  DQN-CartPole       train_step on a 128-transition minibatch (target fwd, fwd, loss, bwd, Adam)
  A2C-InvPendulum    train_step on one 8 x 5 rollout (policy + value, clip, RMSprop)
  DDPG-*             critic_step + actor_step + soft update on a 256-transition minibatch (every
                     env step with the designs' RL Zoo configs, policy_frequency 1)

Beside them, the same training step written in PyTorch (benchmarks/torch_ref.py: same networks,
batch, loss and optimizer; one intra-op thread like our BLAS) when ``import torch`` works
(optional: ``pip install torch``; ``--no-torch`` skips it). DDPG: "PyTorch fp32 (CPU)" does what
the step timed here does (critic, actor and Polyak step on every call); "PyTorch, CleanRL pf 2" is
torch_ref's CleanRL step, which updates the actor on every other call only (the row the "x torch"
column used to be read against: half the actor's work, so not the same step).

Timings are the best of ``--repeats`` rounds of each configuration, taken in turns (fp32,
mixed, AIE, fp32, ...) so that load from other processes hits all alike. The ILP plan is
solved in-process first (DDPG's takes tens of seconds).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from rlhls.designs.graph import build_graph  # noqa: E402
from rlhls.designs.registry import get_design  # noqa: E402
from rlhls.host.mixed import default_plan  # noqa: E402

import torch_ref  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

BENCHES = {
    "dqn": "apdrl-dqn-cartpole",
    "a2c": "apdrl-a2c-invpendulum",
    "ddpg-lunar": "apdrl-ddpg-lunarcont",
    "ddpg-mntn": "apdrl-ddpg-mntncarcont",
}


def _aie_plan(design):
    """Matrix multiplies on the AIE, everything else (updates, losses, activations) on the PL."""
    return {n.name: ("AIE" if n.mm and not n.name.endswith((".upd", ".soft")) else "PL")
            for n in build_graph(design).nodes}


def _trainer(key, design, precision, asg, loop_steps, ps_math="float32"):
    """(trainer, one-gradient-step closure, steps_per_update of the loop measurement)."""
    rng = np.random.default_rng(0)
    obs_dim = design.obs_shape[0]
    if key == "dqn":
        from rlhls.host.algorithms.dqn import DQN, PHASES

        t = DQN(design, seed=0, assignment=asg, hyperparams={
            "precision": precision, "learning_starts": 0, "steps_per_update": loop_steps, "ps_math": ps_math})
        B = t.hp["batch_size"]
        s, s2 = rng.standard_normal((B, obs_dim)) * 0.5, rng.standard_normal((B, obs_dim)) * 0.5
        a, r, d = rng.integers(0, 2, B), np.ones(B), np.zeros(B)
        times = {k: 0.0 for k in PHASES}
        return t, lambda: t.train_step(s, s2, a, r, d, times)
    if key == "a2c":
        from rlhls.host.algorithms.a2c import A2C, PHASES

        t = A2C(design, seed=0, assignment=asg, hyperparams={
            "precision": precision, "rollouts_per_update": max(1, loop_steps // 40), "ps_math": ps_math})
        B = t.hp["num_envs"] * t.hp["n_steps"]
        obs, act = rng.standard_normal((B, obs_dim)) * 0.1, rng.standard_normal((B, design.action_dim)) * 0.5
        adv, ret = rng.standard_normal(B), rng.standard_normal(B) + 5.0
        times = {k: 0.0 for k in PHASES}
        return t, lambda: t.train_step(obs, act, adv, ret, times)
    from rlhls.host.algorithms.ddpg import DDPG, PHASES

    t = DDPG(design, seed=0, assignment=asg, hyperparams={
        "precision": precision, "learning_starts": 0, "steps_per_update": loop_steps, "buffer_size": 10_000,
        "ps_math": ps_math})
    B = t.hp["batch_size"]
    s, s2 = rng.standard_normal((B, obs_dim)) * 0.5, rng.standard_normal((B, obs_dim)) * 0.5
    a = rng.uniform(-1, 1, (B, t.act_dim))
    r, d = rng.standard_normal(B), np.zeros(B)
    times = {k: 0.0 for k in PHASES}

    def step():
        t.critic_step(s, s2, a, r, d, times)
        t.actor_step(s, times)
        t.update_targets()

    return t, step


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5, help="rounds per configuration (best is kept)")
    p.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of " + ",".join(BENCHES))
    p.add_argument("--env-steps", type=int, default=0,
                   help="env steps of the loop measurement (default: 1000 DQN / A2C, 50 DDPG)")
    p.add_argument("--no-loop", action="store_true", help="skip the env steps/s measurement")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch reference")
    p.add_argument("--cpu-time", action="store_true",
                   help="time the gradient steps in this thread's CPU time (time.thread_time), not wall "
                        "time: on a machine loaded by other jobs the waits for a core do not count")
    a = p.parse_args(argv)
    keys = [k.strip() for k in a.only.split(",") if k.strip()]
    use_torch = not a.no_torch and torch_ref.available()
    if use_torch:
        import torch

        torch.set_num_threads(1)
    print(f"{'benchmark':<18} {'configuration':<24} {'ms / grad step':>15} {'ratio':>7} {'x torch':>8} "
          f"{'env steps/s':>12}")
    for key in keys:
        design = get_design(BENCHES[key])
        loop_steps = a.env_steps or (50 if key.startswith("ddpg") else 1000)
        t0 = time.perf_counter()
        ilp = default_plan(design)
        plan_s = time.perf_counter() - t0
        configs = [("fp32 (all PS)", "fp32", None, "float32"), ("mixed, ILP plan", "mixed", ilp, "float32"),
                   ("mixed, MM on AIE", "mixed", _aie_plan(design), "float32"),
                   ("fp32, PS float64", "fp32", None, "float64"), ("mixed ILP, PS float64", "mixed", ilp, "float64")]
        built = [(name, *_trainer(key, design, prec, asg, loop_steps, pm)) for name, prec, asg, pm in configs]
        if use_torch:
            if key.startswith("ddpg"):
                built.append(("PyTorch, CleanRL pf 2", None, torch_ref.REFERENCES[BENCHES[key]]()))
                built.append(("PyTorch fp32 (CPU)", None, torch_ref.ddpg_step(
                    design.obs_shape[0], design.action_dim, policy_frequency=1)))
            else:
                built.append(("PyTorch fp32 (CPU)", None, torch_ref.REFERENCES[BENCHES[key]]()))
        n = 1 if key.startswith("ddpg") else 10  # steps per timed round
        best = {name: float("inf") for name, _, _ in built}
        for _, _, step in built:
            step()  # warm-up (first-call allocations, orthogonal-init caches)
        clock = time.thread_time if a.cpu_time else time.perf_counter
        for _ in range(a.repeats):
            for name, _, step in built:
                t0 = clock()
                for _ in range(n):
                    step()
                best[name] = min(best[name], (clock() - t0) / n)
        base = best[built[0][0]]
        ref = best.get("PyTorch fp32 (CPU)", float("nan"))
        for name, t, _ in built:
            sps = float("nan")
            row = f"{BENCHES[key]:<18.18} {name:<24} {best[name] * 1e3:>15.2f} {best[name] / base:>7.2f} " \
                  f"{best[name] / ref:>8.2f}"
            if t is None:  # the PyTorch reference has no training loop here
                print(f"{row} {'':>12}", flush=True)
                continue
            if not a.no_loop:
                t0 = time.perf_counter()
                t.train_update(1, 1)
                sps = t.steps_per_update / (time.perf_counter() - t0)
            t.close()
            print(f"{row} {sps:>12.0f}", flush=True)
        print(f"{'':<18} (ILP plan solved in {plan_s:.0f} s; units used: {','.join(sorted(set(ilp.values())))})")


if __name__ == "__main__":
    main()
