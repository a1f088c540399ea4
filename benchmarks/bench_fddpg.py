"""F-DDPG side by side, one run: the arm environment's steps/s (raw, as rlhls trains on it, drawing a
frame) and one DDPG gradient step of model 1 (batch 32) four ways: the ddpg_gradient kernel's
bit-accurate fixed<32,8> model (what --backend emu trains with), its C++ compiled by g++ (--backend
csim), the same gradients in float64 numpy (the house's Network forward/backward), the host trainer's
FP32 critic + actor steps (precision fp32), and the kernel's modeled FPGA time (Table VI). Times are
CPU seconds of this process (best of 3 rounds), so a loaded machine does not distort the ratios.

Then the training loop side by side: ``rlhls train fddpg-arm-m1 --steps N`` with the design's
precision (the kernel's fixed<32,8> model on the emu backend, compiled: ``ddpg_gradient_native``),
the same with ``RLHLS_NATIVE=0`` (the numpy model) and with ``--precision fp32`` (the host trainer),
each in its own process with one BLAS thread, CPU time of the train command, best of 3 rounds taken
in turns; the ratios fixed / fp32.
python benchmarks/bench_fddpg.py [--reps 200] [--loop-steps 3000] [--rounds 3] [--no-loop] [--no-step]"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np

import rlhls.envs  # noqa: F401
from rlhls.designs.kernels import KernelContext, get_kernel
from rlhls.designs.kernels.ddpg_gradient import net_dims, unpack
from rlhls.designs.nets import mlp
from rlhls.designs.registry import get_design
from rlhls.host.backends import CsimBackend
from rlhls.host.envs.robotic_arm import RoboticArm


def per_call(fn, reps):
    """Best of 3 rounds, CPU seconds of this process per call (other load on the machine aside)."""
    fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(reps):
            fn()
        best = min(best, (time.process_time() - t0) / reps)
    return best


def env_rate(env, steps=3000, render=False):
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (steps, 5)).astype(np.float32)
    env.reset(seed=0)
    t0 = time.process_time()
    for a in acts:
        _, _, term, trunc, _ = env.step(a)
        if render:
            env.render()
        if term or trunc:
            env.reset()
    return steps / (time.process_time() - t0)


def float_step(p, x):
    """DDPG's critic and actor gradients of one minibatch in float64 numpy (Network)."""
    da, dc = net_dims(p)
    nets = {}
    for key, dims, act in (("actor", da, "tanh"), ("critic", dc, None), ("target_actor", da, "tanh"),
                           ("target_critic", dc, None)):
        n = mlp(key, dims[0], dims[1:-1], dims[-1], act="relu", out_act=act, init="uniform")
        for name, d in unpack(x[key], n).items():
            n[name].params.update(W=d["W"].copy(), b=d["b"].copy())
        nets[key] = n
    A, C = nets["actor"], nets["critic"]
    B, S = x["s"].shape

    def step():
        qt = nets["target_critic"].forward(np.hstack([x["s2"], nets["target_actor"].forward(x["s2"])]))[:, 0]
        y = x["r"] + p["gamma"] * (1 - x["done"]) * qt
        q = C.forward(np.hstack([x["s"], x["a"]]))[:, 0]
        C.backward((2 * (q - y) / B)[:, None])
        C.forward(np.hstack([x["s"], A.forward(x["s"])]))
        dx = C.backward(np.full((B, 1), -1.0 / B), need_input_grad=True, param_grads=False)
        A.backward(dx[:, S:])
    return step


def trainer_step(design):
    from rlhls.host.algorithms.ddpg import DDPG

    t = DDPG(design, hyperparams={"precision": "fp32", "learning_starts": 100, "steps_per_update": 100})
    t.train_update(1, 2)
    s, s2, a, r, d = t.rb.sample(t.rng, 32)
    times = {}
    return lambda: (t.critic_step(s, s2, a.astype(np.float64), r, d, times), t.actor_step(s, times))


# one training run in a child process: CPU seconds of the train command (imports and the library's
# load before the clock, as every run pays them once)
LOOP = """
import sys, tempfile, time
from rlhls.cli import main
from rlhls.designs.kernels import ddpg_gradient as dg
dg._native_once() if dg.enabled() else None
args = ["train", "fddpg-arm-m1", "--steps", sys.argv[1], "--quiet", "--out", tempfile.mkdtemp() + "/run"] + sys.argv[2:]
t0 = time.process_time()
assert main(args) == 0
print(time.process_time() - t0)
"""


def loop_time(steps, extra, native):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", RLHLS_NATIVE="1" if native else "0")
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", LOOP, str(steps), *extra], env=env, cwd=d, check=True,
                             capture_output=True, text=True).stdout
    return float(out.split()[-1])


def training_loop(steps, rounds):
    configs = [("fixed<32,8> emu, compiled model", [], True), ("fixed<32,8> emu, numpy model", [], False),
               ("fp32 host trainer", ["--precision", "fp32"], True)]
    loop_time(300, [], True)  # builds the library once (the build cache), out of the rounds
    best = {name: float("inf") for name, _, _ in configs}
    for _ in range(rounds):
        for name, extra, native in configs:
            best[name] = min(best[name], loop_time(steps, extra, native))
    fp32 = best["fp32 host trainer"]
    print(f"\ntraining loop, rlhls train fddpg-arm-m1 --steps {steps} (CPU s, best of {rounds}, one BLAS thread):")
    for name, _, _ in configs:
        print(f"  {name:34s} {best[name]:8.2f} s   {best[name] / fp32:5.2f}x fp32")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--loop-steps", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-loop", action="store_true", help="skip the training loop rows")
    ap.add_argument("--no-step", action="store_true", help="skip the environment and gradient-step rows")
    args = ap.parse_args()
    if not args.no_step:
        step_rows(args)
    if not args.no_loop:
        training_loop(args.loop_steps, args.rounds)


def step_rows(args):
    print("environment (rlhls/RoboticArm-v0, random actions):")
    raw = env_rate(RoboticArm())
    wrapped = env_rate(gym.make("rlhls/RoboticArm-v0"))
    drawn = env_rate(gym.make("rlhls/RoboticArm-v0", render_mode="rgb_array"), 300, render=True)
    print(f"  raw env            {raw:10.0f} steps/s")
    print(f"  as trained on      {wrapped:10.0f} steps/s   ({raw / wrapped:.2f}x slower: gymnasium's wrappers)")
    print(f"  drawing each frame {drawn:10.0f} steps/s")
    d = get_design("fddpg-arm-m1")
    k = get_kernel("ddpg_gradient")
    ctx = KernelContext(d)
    p = k.resolve(k.node_params(ctx.graph.node("critic.fc1.bwd"), ctx))
    x = k.random_inputs(p, np.random.default_rng(0))
    cs = CsimBackend()
    t_emu = per_call(lambda: k.model(p, **x), args.reps)
    prev, os.environ["RLHLS_NATIVE"] = os.environ.get("RLHLS_NATIVE"), "0"
    t_emu_np = per_call(lambda: k.model(p, **x), max(3, args.reps // 4))
    os.environ.pop("RLHLS_NATIVE") if prev is None else os.environ.update(RLHLS_NATIVE=prev)
    t_csim = per_call(lambda: cs.call(k.name, p, **x), max(3, args.reps // 20))
    t_f64 = per_call(float_step(p, x), args.reps)
    t_tr = per_call(trainer_step(d), args.reps)
    t_fpga = k.cost(p, device=ctx.device)["latency_us"] * 1e-6
    print(f"\none DDPG gradient step, model 1, batch 32 ({p['storage']} kernel):")
    rows = [("kernel model, fixed point (emu)", t_emu), ("the same, numpy model (RLHLS_NATIVE=0)", t_emu_np),
            ("kernel C++ under g++ (csim)", t_csim),
            ("float64 numpy (Network)", t_f64), ("host trainer FP32 critic+actor", t_tr),
            ("modeled FPGA (Table VI style)", t_fpga)]
    for name, t in rows:
        print(f"  {name:40s} {t * 1e3:9.3f} ms   {t / t_f64:7.2f}x float64 numpy")


if __name__ == "__main__":
    main()
