"""The registry: every seed design is there with the seed's configuration."""

import json

import pytest

from rlhls.core.errors import RlhlsError
from rlhls.designs.formats import parse_format
from rlhls.designs.registry import design_names, get_design

EXPECTED = ["heppo-ppo", "cpp-trpo-ant", "cpp-trpo-humanoid", "fddpg-arm-m1", "fddpg-arm-m2", "fddpg-arm-m3",
            "apdrl-dqn-cartpole", "apdrl-a2c-invpendulum", "apdrl-ddpg-lunarcont", "apdrl-ddpg-mntncarcont",
            "apdrl-dqn-breakout", "apdrl-ppo-mspacman", "a2c-traffic"]


def test_all_seed_designs_are_registered():
    # the others name no seed paper (designs/zoo.py: RL Zoo's tuned algorithms), listed after the seeds'
    names = design_names()
    seeds = [n for n in names if get_design(n).seed_file != "-"]
    assert sorted(seeds) == sorted(EXPECTED) and names[:len(seeds)] == seeds


@pytest.mark.parametrize("name", EXPECTED)
def test_design_describes_itself(name):
    d = get_design(name).describe()
    json.dumps(d)
    assert d["seed_file"].startswith(("000_", "001_", "002_", "003_", "004_"))
    assert d["networks"] and all(n["layers"] for n in d["networks"])
    for text in d["formats"].values():
        assert str(parse_format(text)) == text


def test_unknown_design():
    with pytest.raises(RlhlsError, match="unknown design 'nope'.*heppo-ppo"):
        get_design("nope")


def test_cpp_humanoid_policy_has_the_seeds_parameter_count():
    d = get_design("cpp-trpo-humanoid")
    policy = d.build_networks()["policy"]
    # the Gaussian policy's log-std vector adds one parameter per action
    assert policy.n_params + d.action_dim == d.seed_figures["policy_params_quoted"]
    assert [l.out_shape[0] for l in policy.mm_layers] == [128, 64, 17]


def test_apdrl_networks_match_table_iii():
    nets = get_design("apdrl-dqn-breakout").build_networks()
    q = nets["q"]
    assert q.input_shape == (4, 84, 84)
    convs = [l for l in q.layers if l.kind == "Conv2d"]
    assert [(l.params["W"].shape, l.describe()["stride"]) for l in convs] == [
        ((32, 4, 8, 8), 4), ((64, 32, 4, 4), 2), ((64, 64, 3, 3), 1)]
    dense = [l for l in q.layers if l.kind == "Dense"]
    assert [l.params["W"].shape for l in dense] == [(3136, 512), (512, 4)]
    lunar = get_design("apdrl-ddpg-lunarcont").build_networks()
    assert [l.params["W"].shape for l in lunar["actor"].mm_layers] == [(8, 400), (400, 300), (300, 2)]
    assert [l.params["W"].shape for l in lunar["critic"].mm_layers] == [(10, 400), (400, 300), (300, 1)]


@pytest.mark.parametrize("name", EXPECTED)
def test_update_kernel_runs_the_networks_optimizer(name):
    """A design's weight_update kernel spec names the optimizer its networks train with (A2C: RMSprop)."""
    d = get_design(name)
    opts = {s.optimizer for s in d.networks} - {"none"}
    for k in d.kernels:
        if k.name == "weight_update" and "optimizer" in k.params:
            assert {k.params["optimizer"]} == opts, (name, k.params, opts)


def test_fddpg_models():
    m1, m2, m3 = (get_design(f"fddpg-arm-m{i}").build_networks() for i in (1, 2, 3))
    assert [l.out_shape[0] for l in m1["actor"].mm_layers] == [108, 5]
    assert [l.out_shape[0] for l in m2["actor"].mm_layers] == [108, 24]
    assert [l.out_shape[0] for l in m2["critic"].mm_layers] == [108, 24]
    assert [l.out_shape[0] for l in m3["actor"].mm_layers] == [108, 108, 5]
    assert str(get_design("fddpg-arm-m1").storage_format) == "fixed<32,8,RND,SAT>"


def test_traffic_network_gives_the_seeds_weight_gradient_iterations():
    d = get_design("a2c-traffic")
    trunk = d.build_networks()["trunk"]
    fc1 = [l for l in trunk.layers if l.kind == "Dense"][0]
    n_in, n_out = fc1.params["W"].shape
    assert n_out * n_in // d.kernels[0].params["macs"] == d.seed_figures["fc1_weight_gradient_iterations"]


def test_every_design_records_its_choices():
    for name in EXPECTED:
        assert get_design(name).choices, name
