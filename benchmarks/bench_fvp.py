"""FVP unit side by side, one run, on the seed's Ant and Humanoid policies (seed 001 Table I):
the bit-accurate fixed-point emulation (fixed<27,4> / fixed<48,16>), the float64 numpy Pearlmutter
pass (the kernel's fp64 path, BLAS over the samples), torch.autograd's Hessian-vector product of
the mean KL where torch imports, and the cost model's FPGA rate (200 MHz, Table II's "Model").
Prints samples/s and ratios.  python benchmarks/bench_fvp.py [--samples 2048]"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlhls.designs.kernels import KernelContext, get_kernel
from rlhls.designs.kernels.fvp import host_fvp, layout
from rlhls.designs.registry import get_design


def best(fn, reps=3):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def torch_hvp(dims, x, logstd):
    """A closure: torch.autograd.functional.hvp of the mean KL at theta, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    lay = layout(dims)
    obs = torch.tensor(x["obs"], dtype=torch.float64)
    t0 = torch.tensor(np.concatenate([x["theta"], logstd]), dtype=torch.float64)
    v = torch.tensor(x["v"], dtype=torch.float64)

    def mean(u):
        y = obs
        for l, ((ow, (a, b)), (ob, _)) in enumerate(zip(lay["w"], lay["b"])):
            y = y @ u[ow:ow + a * b].reshape(a, b) + u[ob:ob + b]
            y = torch.tanh(y) if l < len(lay["w"]) - 1 else y
        return y

    mu0 = mean(t0).detach()

    def kl(t):
        ls, ls0 = t[lay["P"]:], t0[lay["P"]:]
        mu = mean(t)
        return (ls - ls0 + (torch.exp(2 * ls0) + (mu - mu0) ** 2) / (2 * torch.exp(2 * ls)) - 0.5).sum(1).mean()

    return lambda: torch.autograd.functional.hvp(kl, t0, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2048)
    a = ap.parse_args()
    k = get_kernel("fvp")
    n = a.samples
    for name in ("cpp-trpo-ant", "cpp-trpo-humanoid"):
        spec = KernelContext(get_design(name)).spec_params(k)
        p = k.resolve({**spec, "samples": n})
        pf = k.resolve({**spec, "samples": n, "fp64": True})
        rng = np.random.default_rng(0)
        x = k.random_inputs(p, rng, rows=n)
        logstd = rng.uniform(-0.4, 0.4, spec["layers"][-1])
        x["inv_var"] = np.exp(-2 * logstd)
        t_emu = best(lambda: k.model(p, **x), reps=1 if n > 4096 else 3)
        t_f64 = best(lambda: k.model(pf, **x))
        z, ref = k.model(p, **x)["fvp"], k.model(pf, **x)["fvp"]
        c = k.cost(k.resolve({**spec, "samples": 50000, "iterations": 1}))
        fpga = 50000 / (c["latency_us"] * 1e-6)
        print(f"{name} {'-'.join(map(str, spec['layers']))} blocks {spec['parallelism']}, {n} samples:")
        print(f"  fixed-point emulation   {n / t_emu:12,.0f} samples/s")
        print(f"  float64 numpy (BLAS)    {n / t_f64:12,.0f} samples/s  ({t_emu / t_f64:.1f}x the emulation)")
        th = torch_hvp(spec["layers"], x, logstd)
        if th is not None:
            t_t = best(th)
            print(f"  torch.autograd HVP      {n / t_t:12,.0f} samples/s  ({t_emu / t_t:.1f}x the emulation)")
            # the float64 path is the Hessian-vector product of the mean KL (eq. 21's block exactly)
            hv, zf = th()[1].numpy(), host_fvp(ref, x["v"], n)
            err = np.max(np.abs(zf - hv)) / np.max(np.abs(zf))
            print(f"  float64 path vs torch.autograd HVP: max |diff| / max |FVP| = {err:.1e}")
            assert err <= 1e-12, err
        else:
            print("  torch.autograd HVP      (torch not installed)")
        print(f"  FPGA model (200 MHz)    {fpga:12,.0f} samples/s  ({fpga * t_emu / n:,.0f}x the emulation; "
              f"II {c['ii']} cycles)")
        print(f"  emulation vs float64: max |error| / max |FVP| = {np.max(np.abs(z - ref)) / np.max(np.abs(ref)):.2e}")


if __name__ == "__main__":
    main()
