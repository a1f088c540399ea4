"""hls4ml C simulation vs the emulator's forward pass: every registered design's forward nets
(one compile each, three input sets per compile), the full-size AP-DRL convnet (io_stream) and a
reduced one in both io types. Builds use compile_csim (one translation unit, ~2.5x less CPU than
hls4ml's compile()). Dense/Conv/ReLU nets must agree bit for bit; table activations (tanh,
softmax, sigmoid) bit for bit against the emulator in table mode (Precision table/table_size),
in fixed point and in fp32 MLPs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.network import Conv2d, Dense, Flatten, Network, Precision, ReLU, Sigmoid, Softmax, Tanh
from rlhls.designs.registry import design_names, get_design
from rlhls.flow.hls4ml_convert import (check_hls4ml, compile_csim, convert_network, error_bound,
                                       hls4ml_precision_config)

PART, CLOCK = "xczu7ev-ffvc1156-2-e", 5.0
# fp32 designs are checked in float (hls4ml 'float'); the convnet in this fixed pair.
CONV_PREC = Precision("fixed<16,6,RND,SAT>", "fixed<32,12,RND,SAT>")
# fp32 tanh MLPs (heppo, apdrl-a2c) are checked in this fixed test format (fp32 tanh: apdrl-ddpg actors).
TANH_PREC = Precision("fixed<24,6,RND,SAT>", "fixed<40,12,RND,SAT>")


def _precision(design, net):
    p = Precision(design.storage_format, design.formats.get("acc", "fp32"))
    if p.storage.kind == "float" and any(l.kind == "Softmax" for l in net.layers):
        return CONV_PREC  # hls4ml cannot compile a float-input softmax (RlhlsError): check these in fixed
    if p.storage.kind == "float" and sum(l.kind == "Tanh" for l in net.layers) > 1:
        return TANH_PREC
    return p


def _arch(net, p):
    """What hls4ml compiles: input shape, layer kinds and sizes, formats (weights are read at run time)."""
    return (net.input_shape, tuple((l.kind, l.out_shape) for l in net.layers), str(p.storage), str(p.acc))


def _registered():
    """Every registered forward net hls4ml can take in a test's time (all but the 84x84 convnets,
    which test_convnet_* cover at reduced size), grouped by what hls4ml compiles. Networks with
    the same architecture but different weights still need their own project (hls4ml bakes the
    weights folder into the library), so a group is one compile only for identical networks."""
    seen, out = {}, []
    for d in design_names():
        design = get_design(d)
        for name, net in design.build_networks().items():
            if int(np.prod(net.input_shape)) > 4096:
                continue
            key = (_arch(net, _precision(design, net)), tuple(np.asarray(l.params[k]).tobytes()
                   for l in net.mm_layers for k in sorted(l.params)))
            if key in seen:
                seen[key].append(f"{d}-{name}")
                continue
            seen[key] = [f"{d}-{name}"]
            out.append((d, name, seen[key]))
    return [pytest.param(d, n, ids, id=f"{d}-{n}") for d, n, ids in out]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Converted + compiled projects, one per key for the module (compile runs g++ on the project)."""
    cache, root = {}, tmp_path_factory.mktemp("hls4ml")

    def get(key, net, precision, **kw):
        if key not in cache:
            r = convert_network(net, precision, root / key, part=PART, clock_ns=CLOCK, **kw)
            compile_csim(r["hls_model"])
            cache[key] = r
        return cache[key]

    return get


@pytest.mark.parametrize("design,name,same", _registered())
def test_registered_net_matches_emulator(built, design, name, same):
    d = get_design(design)
    net = d.build_networks()[name]
    p = _precision(d, net)
    r = built(f"{design}-{name}", net, p)
    fixed = p.storage.kind != "float"
    rng = np.random.default_rng(1)
    # Three checks on one compile: typical inputs, inputs near the storage range (saturating
    # accumulators/results in fixed point), and exact zeros (bias-only path).
    big = 0.9 * 2.0 ** (p.storage.int_bits - 1) if fixed else 50.0
    for x in (rng.uniform(-1.0, 1.0, (6,) + net.input_shape), rng.uniform(-big, big, (4,) + net.input_shape),
              np.zeros((1,) + net.input_shape)):
        c = check_hls4ml(net, p, r["hls_model"], x)
        assert c["passed"], (design, name, c["max_diff_lsb"], c["bound_lsb"])
        if net.layers[-1].kind == "Softmax" and len(x) == 4:  # not vacuous: on the wide inputs the
            assert np.ptp(c["output"], axis=-1).max() > 0.1  # policy is far from uniform
            # (hls4ml's default softmax types gave 1/n everywhere)
        # bit for bit where hls4ml_convert says so: fixed point, float MLPs with zero biases (SB3's PyTorch
        # initialisation of the SAC designs has biases: hls4ml adds those last, inside error_bound)
        if fixed or not any(l.kind == "Conv2d" or np.any(l.params.get("b", 0.0) != 0) for l in net.mm_layers):
            assert c["exact"], c["max_diff_lsb"]  # same order, same casts, same tables: bit for bit
        else:
            assert c["max_diff"] <= error_bound(net, p)
    assert r["top"] == f"{name}_fwd" and any(f.endswith(f"{name}_fwd.cpp") for f in r["files"])


def _small_convnet(seed=0):
    """AP-DRL's Nature-CNN topology (8/4, 4/2, 3/1 convs, Flatten, 2 Dense) at reduced width and size."""
    g = math.sqrt(2)
    layers = [Conv2d(4, 8, stride=4, gain=g), ReLU(), Conv2d(6, 4, stride=2, gain=g), ReLU(),
              Conv2d(5, 3, stride=1, gain=g), ReLU(), Flatten(), Dense(16, gain=g), ReLU(), Dense(3)]
    return Network("cnn", (4, 44, 44), layers, seed=seed, init="uniform")


@pytest.mark.parametrize("io_type", ["io_parallel", "io_stream"])
def test_convnet_channel_order(built, io_type):
    net = _small_convnet()
    r = built(f"cnn-{io_type}", net, CONV_PREC, io_type=io_type)
    x = np.random.default_rng(2).uniform(0.0, 1.0, (3,) + net.input_shape)
    c = check_hls4ml(net, CONV_PREC, r["hls_model"], x)
    assert c["exact"], c["max_diff_lsb"]
    # A naive export (fc1 rows left in (C, H, W) order while hls4ml flattens (H, W, C)) computes this:
    c_, h, w = net["flatten"].in_shape
    assert h * w > 1
    naive = _small_convnet()
    W = naive["fc1"].params["W"]
    naive["fc1"].params["W"] = W.reshape(h, w, c_, -1).transpose(2, 0, 1, 3).reshape(W.shape)
    assert np.abs(naive.forward(x, CONV_PREC) - c["output"]).max() > 10 * c["lsb"]


def test_apdrl_convnet_full_size(built):
    """AP-DRL's Atari net as registered (4x84x84, convs 32/8/4, 64/4/2, 64/3/1, Flatten 3136,
    Dense 512, Dense 4) through io_stream csim, in fixed point: bit for bit. One compile:
    ~11 s CPU conversion + ~5 s CPU g++ + ~1 s per input (benchmarks/bench_hls4ml.py)."""
    net = get_design("apdrl-dqn-breakout").build_networks()["q"]
    r = built("breakout-q-io_stream", net, CONV_PREC, io_type="io_stream")
    x = np.random.default_rng(3).uniform(0.0, 1.0, (2,) + net.input_shape)
    c = check_hls4ml(net, CONV_PREC, r["hls_model"], x)
    assert c["exact"], c["max_diff_lsb"]
    assert np.abs(c["output"]).max() > 100 * c["lsb"]  # not all zero / saturated-to-equal


def test_float_formats_rejected_where_hls4ml_cannot():
    net = get_design("apdrl-dqn-cartpole").build_networks()["q"]
    with pytest.raises(RlhlsError, match="fc1.*fp16"):
        hls4ml_precision_config(net, Precision("fp16", "fp32"))
    with pytest.raises(RlhlsError, match="bf16"):
        hls4ml_precision_config(net, Precision("bf16", "bf16"))
    cfg = hls4ml_precision_config(net, Precision("fixed<27,4,RND,SAT>", "fixed<48,16,RND,SAT>"))
    assert cfg["fc1"] == {"weight": "fixed<27,4,RND,SAT>", "bias": "fixed<27,4,RND,SAT>",
                          "accum": "fixed<48,16,RND,SAT>", "result": "fixed<27,4,RND,SAT>"}
    assert hls4ml_precision_config(net, Precision("fp32", "fp32"))["fc2_relu"] == {"result": "float"}
    pol = get_design("a2c-traffic").build_networks()["policy"]
    with pytest.raises(RlhlsError, match="fc1_softmax.*fp32.*fixed-point"):
        hls4ml_precision_config(pol, Precision("fp32", "fp32"))


def test_tanh_bound_is_tight_enough():
    # The documented bound for a table tanh is about one table step (8/N), not loose by orders of magnitude.
    net = Network("t", (3,), [Dense(2), Tanh()], seed=0)
    p = Precision("fixed<24,6,RND,SAT>", "fixed<40,12,RND,SAT>")
    assert 8 / 1024 <= error_bound(net, p) < 2 * 8 / 1024


def test_table_activations_bit_exact_with_own_tables(built):
    """Tanh, Sigmoid and Softmax with a table format/size of the Precision's own (not storage,
    not 1024), non-zero biases, inputs far beyond the table ranges: hls4ml == emulator bit for
    bit, while the float64 activations (no tables) are many LSBs away."""
    net = Network("acts", (5,), [Dense(6), Tanh(), Dense(7), Sigmoid(), Dense(9), Softmax()], seed=0,
                  init="uniform")
    p = Precision("fixed<24,6,TRN,WRAP>", "fixed<40,12,RND,SAT>", table="fixed<18,8>", table_size=512)
    r = built("acts", net, p)
    x = np.random.default_rng(4).uniform(-20.0, 20.0, (200, 5))
    c = check_hls4ml(net, p, r["hls_model"], x)
    assert c["exact"] and c["passed"], c["max_diff_lsb"]
    plain = Precision(p.storage, p.acc)
    assert np.abs(net.forward(x, plain) - c["output"]).max() > 100 * c["lsb"]
    assert np.ptp(c["output"], axis=-1).max() > 0.1  # not a uniform policy
