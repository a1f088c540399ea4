"""Nature-CNN (84x84x4 -> 4 actions) forward + backward on the host: our layer language
(designs/network.py, precision None = float64 im2col + BLAS, col2im scatter-add) vs the same
network in PyTorch on the CPU (optional: measured only if ``import torch`` works; float32 and
float64), at DQN's batch 32 and PPO's minibatch 256, side by side in one run. Also per layer
(ours), DQN's whole fp32 gradient step at batch 32 (host/mixed.py with every node on the PS:
FP32-rounded tensors, target forward + forward + backward + Adam on the 1.7M parameters), and,
with ``--mixed``, the same forward + backward under AP-DRL's plan emulation (BF16 AIE / FP16 PL
layers bit-exact, sequential float32 sums) at batch 32.

    python benchmarks/bench_conv.py [--repeats 5] [--threads 2] [--mixed]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

_threads = "2"
for i, arg in enumerate(sys.argv):
    if arg == "--threads" and i + 1 < len(sys.argv):
        _threads = sys.argv[i + 1]
for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, _threads)

import numpy as np  # noqa: E402

from rlhls.designs.nets import nature_cnn  # noqa: E402


def _best(fn, repeats):
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def ours(batch, repeats):
    net = nature_cnn("q", 4, seed=0)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (batch, 4, 84, 84)).astype(np.float64) / 255.0
    dy = rng.standard_normal((batch, 4)) / batch

    def step():
        net.forward(x)
        net.backward(dy)

    total = _best(step, repeats)
    per = {}
    h = x
    for layer in net.layers:  # per layer: forward + backward (with input gradient except the first)
        first = layer is net.layers[0]
        out = layer.forward(h)
        g = np.ones_like(out) / batch

        def lstep(layer=layer, h=h, g=g, first=first):
            layer.forward(h)
            layer.backward(g, need_input_grad=not first)

        if layer.kind in ("Conv2d", "Dense"):
            per[f"{layer.name} {layer.kind}"] = _best(lstep, repeats)
        h = out
    return total, per


def torch_time(batch, repeats, dtype_name):
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    dt = getattr(torch, dtype_name)
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
                        nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(),
                        nn.Linear(512, 4)).to(dt)
    x = torch.rand(batch, 4, 84, 84, dtype=dt)
    dy = torch.randn(batch, 4, dtype=dt) / batch

    def step():
        net.zero_grad(set_to_none=True)
        net(x).backward(dy)

    return _best(step, repeats)


def fp32_step_time(batch, repeats):
    """DQN's fp32 train step without the loss: tfwd + fwd + bwd + apply (Adam), all on the PS."""
    import copy

    from rlhls.designs.registry import get_design
    from rlhls.host.mixed import MixedPrecision
    from rlhls.host.optim import Adam

    net = nature_cnn("q", 4, seed=0)
    target = copy.deepcopy(net)
    mp = MixedPrecision(get_design("apdrl-dqn-breakout"), net, "q", None)
    views = {f"q.{l.name}.{k}": (l.name, a) for l in net.layers for k, a in l.params.items()}
    mp.round_masters(views)
    opt = Adam(1e-4)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (batch, 4, 84, 84)).astype(np.float64) / 255.0
    dy = np.round(rng.standard_normal((batch, 4)) * 64) / 64 / batch  # FP32 values

    def step():
        mp.forward(x, "tfwd", net=target)
        mp.forward(x)
        mp.backward(dy)
        grads = {key: net[layer].grads[key.rsplit(".", 1)[1]] for key, (layer, _) in views.items()}
        mp.apply(opt, views, grads)

    return _best(step, repeats)


def mixed_time(batch, repeats):
    from rlhls.designs.registry import get_design
    from rlhls.host.mixed import MixedPrecision, default_plan

    d = get_design("apdrl-dqn-breakout")
    asg = default_plan(d, batch)
    net = nature_cnn("q", 4, seed=0)
    mp = MixedPrecision(d, net, "q", asg)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (batch, 4, 84, 84)).astype(np.float64) / 255.0
    dy = rng.standard_normal((batch, 4)) / batch * mp.loss_scale()

    def step():
        y, u = mp.forward(x)
        mp.backward(mp.convert(dy, "PS", mp.loss_unit))

    units = {k: v for k, v in mp.units().items() if k.endswith((".fwd", ".bwd")) and ("conv" in k or "fc" in k)
             and "relu" not in k}
    return _best(step, repeats), units


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2, help="BLAS / torch threads (default 2)")
    p.add_argument("--mixed", action="store_true", help="also the mixed-precision emulation at batch 32")
    a = p.parse_args(argv)
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    print(f"Nature CNN forward + backward, best of {a.repeats}, {os.environ['OMP_NUM_THREADS']} threads")
    print(f"{'batch':>5}  {'ours f64 ms':>11}  {'torch f32 ms':>12}  {'ratio':>6}  {'torch f64 ms':>12}  {'ratio':>6}")
    for batch in (32, 256):
        t_ours, per = ours(batch, a.repeats)
        line = f"{batch:>5}  {t_ours * 1e3:>11.1f}"
        if have_torch:
            t32, t64 = torch_time(batch, a.repeats, "float32"), torch_time(batch, a.repeats, "float64")
            line += f"  {t32 * 1e3:>12.1f}  {t_ours / t32:>6.2f}  {t64 * 1e3:>12.1f}  {t_ours / t64:>6.2f}"
        else:
            line += "  (torch not installed)"
        print(line)
        print("       per layer (ours, fwd+bwd): " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in per.items()))
    print(f"DQN fp32 gradient step (all PS, Adam), batch 32: {fp32_step_time(32, a.repeats) * 1e3:.1f} ms")
    if a.mixed:
        t, units = mixed_time(32, max(1, a.repeats // 3))
        t_ours, _ = ours(32, a.repeats)
        print(f"mixed-precision emulation, batch 32, ILP plan: {t * 1e3:.0f} ms = {t / t_ours:.1f}x ours f64")
        print("       units: " + ", ".join(f"{k}={u}" for k, u in units.items()))


if __name__ == "__main__":
    main()
