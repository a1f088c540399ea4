"""--config with RL Zoo's hyperparameter files as published (tests/data/rlzoo: vendored unchanged,
their source in their header): the six AP-DRL benchmarks' entries resolve to the published values,
lin_ schedules anneal as SB3, net_arch resizes the networks, what we cannot honour is one line."""

from pathlib import Path

import pytest

from rlhls.cli import main
from rlhls.core.errors import RlhlsError
from rlhls.designs.registry import get_design
from rlhls.host.algorithms import get_algorithm
from rlhls.host.hyperparams import apply_config, read_config

ZOO = Path(__file__).parent / "data" / "rlzoo"

# design -> (RL Zoo file, the entry RL Zoo takes, budget, hidden layers, hyperparameters it sets)
PUBLISHED = {
    "apdrl-dqn-cartpole": ("dqn", "CartPole-v1", 50_000, {"q": (256, 256)},
                           {"learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1000,
                            "gamma": 0.99, "target_network_frequency": 10, "train_frequency": 256,
                            "gradient_steps": 128, "exploration_fraction": 0.16, "end_e": 0.04}),
    "apdrl-a2c-invpendulum": ("a2c", "default", 1_000_000, None, {}),  # no InvertedPendulum entry in a2c.yml
    "apdrl-ddpg-lunarcont": ("ddpg", "LunarLanderContinuous-v3", 300_000, None,  # 400-300 is the design's own
                             {"gamma": 0.98, "buffer_size": 200_000, "learning_starts": 10_000, "noise": "gaussian",
                              "exploration_noise": 0.1, "learning_rate": 1e-3}),
    "apdrl-ddpg-mntncarcont": ("ddpg", "MountainCarContinuous-v0", 300_000, None,
                               {"noise": "ou", "exploration_noise": 0.5, "learning_rate": 1e-3, "batch_size": 256}),
    "apdrl-dqn-breakout": ("dqn", "atari", 10_000_000, None,
                           {"buffer_size": 100_000, "learning_rate": 1e-4, "batch_size": 32, "learning_starts": 100_000,
                            "target_network_frequency": 1000, "train_frequency": 4, "gradient_steps": 1,
                            "exploration_fraction": 0.1, "end_e": 0.01}),
    "apdrl-ppo-mspacman": ("ppo", "atari", 10_000_000, None,
                           {"num_envs": 8, "num_steps": 128, "update_epochs": 4, "num_minibatches": 4,
                            "learning_rate": 2.5e-4, "anneal_lr": True, "anneal_after_rollout": True,
                            "clip_coef": 0.1, "anneal_clip": True, "vf_coef": 0.5, "ent_coef": 0.01}),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_entries_of_the_six_apdrl_benchmarks_resolve(name):
    file, _, budget, arch, want = PUBLISHED[name]
    base = get_design(name)
    design, config = apply_config(base, read_config(ZOO / f"{file}.yml", base))
    hp = get_algorithm(base.algorithm).hyperparams(design, None, config)
    assert design.hyperparams["total_timesteps"] == budget
    assert {k: hp[k] for k in want} == want
    for k in set(hp) - set(want) - {"batch_size"}:  # the rest stays the design's (batch_size: its batch rule)
        assert hp[k] == get_algorithm(base.algorithm).hyperparams(base)[k], k
    nets = design.build_networks(0)
    for spec in design.networks:
        hidden = [l.out_shape[0] for l in nets[spec.name].layers if l.kind == "Dense"][:-1]
        assert tuple(hidden) == (arch or {}).get(spec.role, tuple(hidden))
    assert (design.name == base.name) == (arch is None)


def test_the_entry_taken(tmp_path, caplog):
    d = get_design("apdrl-ddpg-lunarcont")  # LunarLanderContinuous-v3
    f = tmp_path / "zoo.yml"
    f.write_text("LunarLanderContinuous-v2:\n  gamma: 0.9\ndefault:\n  gamma: 0.5\n")
    with caplog.at_level("INFO", logger="rlhls"):
        assert read_config(f, d)["gamma"] == 0.9  # the same env at another version, said
    assert "taking LunarLanderContinuous-v2" in caplog.text
    f.write_text("apdrl-ddpg-lunarcont:\n  gamma: 0.8\nLunarLanderContinuous-v3:\n  gamma: 0.9\n")
    assert read_config(f, d)["gamma"] == 0.8  # the design's own entry first
    f.write_text("CartPole-v1:\n  gamma: 0.9\n")
    with pytest.raises(RlhlsError, match="no entry for design apdrl-ddpg-lunarcont or environment Lunar"):
        read_config(f, d)


def test_lin_schedules_anneal_as_sb3():
    """SB3: value = initial x progress_remaining, progress_remaining = 1 - num_timesteps / total_timesteps
    counted after each rollout (the update's), for learning_rate and clip_range alike."""
    base = get_design("heppo-ppo")
    entry = {"n_envs": 1, "n_steps": 16, "batch_size": 8, "n_epochs": 1, "learning_rate": "lin_1e-3",
             "clip_range": "lin_0.2", "n_timesteps": 64, "policy": "MlpPolicy"}
    from rlhls.host.rlzoo import translate

    alg = get_algorithm("ppo")
    design, config = apply_config(base, translate(entry, "test", base, alg.args.design_values(base), alg.args.sb3))
    hp = alg.hyperparams(design, {"obs_norm": False}, config)
    assert hp["num_minibatches"] == 2 and design.hyperparams["total_timesteps"] == 64
    tr = alg.trainer(design, env_id="Pendulum-v1", seed=0, backend="emu", hyperparams=hp, assignment=None)
    try:
        for u in range(1, 5):
            tr.train_update(u, 4)
            progress = 1 - u * 16 / 64
            assert tr.opt.lr == pytest.approx(1e-3 * progress) and tr.clip == pytest.approx(0.2 * progress)
    finally:
        tr.close()


def test_a_constant_learning_rate_stops_the_designs_annealing():
    base = get_design("apdrl-a2c-invpendulum")  # anneal_lr true (lin_7e-4 as RL Zoo's A2C entries)
    from rlhls.host.rlzoo import translate

    args = get_algorithm("a2c").args
    assert translate({"learning_rate": 5e-4}, "t", base, args.design_values(base), args.sb3) == \
        {"learning_rate": 5e-4, "anneal_lr": False}
    assert translate({"learning_rate": "lin_5e-4", "use_rms_prop": False}, "t", base, args.design_values(base),
                     args.sb3) == {"learning_rate": 5e-4, "anneal_lr": True, "optimizer": "adam"}


def test_net_arch_resizes_the_networks_of_a_run(tmp_path):
    f = tmp_path / "a2c.yml"
    f.write_text('InvertedPendulum-v5:\n  n_envs: 2\n  n_steps: 4\n  policy_kwargs: "dict(net_arch=dict(pi=[16], '
                 'vf=[32, 8]), activation_fn=nn.ReLU, log_std_init=-1.0)"\n')
    out = tmp_path / "run"
    assert main(["train", "apdrl-a2c-invpendulum", "--config", str(f), "--steps", "16", "--precision", "fp32",
                 "--set", "rollouts_per_update=1", "--out", str(out), "--quiet"]) == 0
    import json

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["design"] == "apdrl-a2c-invpendulum-actor16relu-critic32x8relu"
    assert cfg["hyperparams"]["log_std_init"] == -1.0 and cfg["hyperparams"]["num_envs"] == 2
    from rlhls.host.checkpoint import load_checkpoint

    state = load_checkpoint(out / "checkpoint.npz")["trainer"]
    assert [state["policy"][f"fc{i}.W"].shape for i in (1, 2)] == [(4, 16), (16, 1)]
    assert [state["value"][f"fc{i}.W"].shape for i in (1, 2, 3)] == [(4, 32), (32, 8), (8, 1)]


@pytest.mark.parametrize("design, line, named", [
    ("apdrl-dqn-cartpole", "  foo_rate: 3", "[CartPole-v1] foo_rate: unknown key for DQN"),
    ("apdrl-dqn-cartpole", '  policy_kwargs: "dict(net_arch=[64], optimizer_class=RMSpropTFLike)"',
     "policy_kwargs optimizer_class: cannot be honoured"),
    ("apdrl-dqn-cartpole", '  policy_kwargs: "dict(net_arch=dict(pi=[64]))"', "policy_kwargs net_arch: pi=: design"),
    ("apdrl-dqn-cartpole", '  policy_kwargs: "__import__(\'os\').system(\'touch PWNED\')"',
     "policy_kwargs: \"__import__('os').system('touch PWNED')\" is not a literal"),
    ("apdrl-dqn-cartpole", "  learning_rate: lin_1e-3", "learning_rate: 'lin_1e-3': DQN keeps learning_rate constant"),
    ("apdrl-dqn-cartpole", "  policy: CnnPolicy", "policy: 'CnnPolicy': design apdrl-dqn-cartpole's networks are a "
                                                   "MlpPolicy"),
    ("apdrl-a2c-invpendulum", "  normalize: true", "normalize: True: VecNormalize is not ours"),
    ("apdrl-a2c-invpendulum", "  use_sde: true", "use_sde: True"),
    ("apdrl-ddpg-lunarcont", "  train_freq: [1, episode]", "train_freq: [1, 'episode']: training per episode"),
    ("apdrl-ddpg-lunarcont", "  noise_type: pink", "noise_type: 'pink'"),
    ("apdrl-ppo-mspacman", "  batch_size: 300", "batch_size: 300 does not divide"),
    ("apdrl-dqn-breakout", "  env_wrapper: [gymnasium.wrappers.TimeLimit]",
     "env_wrapper: 'gymnasium.wrappers.TimeLimit'"),
])
def test_what_cannot_be_honoured_is_one_line(tmp_path, capsys, monkeypatch, design, line, named):
    monkeypatch.chdir(tmp_path)
    env = get_design(design).env_id
    (tmp_path / "zoo.yml").write_text(f"{env}:\n{line}\n")
    assert main(["train", design, "--config", "zoo.yml", "--out", "r", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["zoo.yml"]  # nothing written, nothing run


# --config in an experiment: every design its own entry, as `rlhls train --config` takes it ----------------------

TWO = ("--design", "apdrl-dqn-cartpole", "--design", "apdrl-a2c-invpendulum")


def _table3(out, *args, quiet=True) -> list:
    return ["experiment", "apdrl-table3", *args, "--seeds", "1", "--jobs", "1", "--out", str(out),
            *(["--quiet"] if quiet else [])]


def _run(out, design, precision="fp32") -> tuple[dict, list]:
    import csv
    import json

    run = out / design / f"{precision}-s0"
    return (json.loads((run / "config.json").read_text()),
            [int(r["env_steps"]) for r in csv.DictReader(open(run / "metrics.csv"))])


def test_an_experiment_takes_each_designs_rlzoo_entry(tmp_path, capsys):
    out = tmp_path / "t3"
    assert main(_table3(out, *TWO, "--steps", "300", "--config", str(ZOO / "dqn.yml"), quiet=False)) == 0
    _, entry, budget, arch, want = PUBLISHED["apdrl-dqn-cartpole"]
    for p in ("fp32", "mixed"):  # mixed: its plan is of the resized networks (train_design checks it)
        cfg, steps = _run(out, "apdrl-dqn-cartpole", p)
        assert cfg["design"] == "apdrl-dqn-cartpole-q256x256"  # the entry's net_arch
        assert {k: cfg["hyperparams"][k] for k in want} == want  # RL Zoo's values, mapped
        assert steps[-1] == 300  # --steps wins over the entry's n_timesteps
    cfg, _ = _run(out, "apdrl-a2c-invpendulum")  # dqn.yml has no InvertedPendulum entry: its `default`
    assert cfg["design"] == "apdrl-a2c-invpendulum"
    assert cfg["hyperparams"] == get_algorithm("a2c").hyperparams(get_design("apdrl-a2c-invpendulum"),
                                                                   {"precision": "fp32"})
    assert "no entry for apdrl-a2c-invpendulum or InvertedPendulum-v5; taking 'default'" in capsys.readouterr().err
    import json

    settings = json.loads((out / "experiment.json").read_text())["config"]
    assert settings["apdrl-dqn-cartpole"]["total_timesteps"] == budget
    assert settings["apdrl-a2c-invpendulum"] == {"total_timesteps": 1_000_000}


ENTRIES = ('apdrl-a2c-invpendulum:\n  n_timesteps: 400\n  n_envs: 2\n  n_steps: 4\n  learning_rate: lin_1e-3\n'
           '  gamma: 0.95\n  policy_kwargs: "dict(net_arch=dict(pi=[16], vf=[32, 8]))"\n')


def test_an_entrys_budget_resize_and_resume(tmp_path, capsys):
    f, out = tmp_path / "mine.yml", tmp_path / "t3"
    f.write_text(ENTRIES)
    args = _table3(out, "--design", "apdrl-a2c-invpendulum", "--config", str(f), "--set", "gamma=0.9")
    assert main(args) == 0
    cfg, steps = _run(out, "apdrl-a2c-invpendulum")
    assert cfg["design"] == "apdrl-a2c-invpendulum-actor16-critic32x8"
    hp = cfg["hyperparams"]
    assert (hp["num_envs"], hp["n_steps"], hp["learning_rate"], hp["anneal_lr"]) == (2, 4, 1e-3, True)
    assert hp["gamma"] == 0.9  # --set wins over the file
    assert steps[-1] == 400  # no --steps: the entry's n_timesteps is the budget

    # --resume: the recorded entry, not the file (gone); a run started again takes the same values
    import shutil

    shutil.rmtree(out / "apdrl-a2c-invpendulum" / "fp32-s0")
    f.unlink()
    assert main(["experiment", "apdrl-table3", "--resume", "--jobs", "1", "--out", str(out), "--quiet"]) == 0
    assert _run(out, "apdrl-a2c-invpendulum") == (cfg, steps)

    # another file on --resume, or the command again with it: refused, one line each
    f.write_text(ENTRIES.replace("0.95", "0.99"))
    capsys.readouterr()
    assert main(["experiment", "apdrl-table3", "--resume", "--config", str(f), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "was started with --config" in err and "'apdrl-a2c-invpendulum'" in err
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "different config apdrl-a2c-invpendulum gamma (0.95, now 0.99)" in err
    f.write_text(ENTRIES)  # the same file again: the same experiment
    assert main(["experiment", "apdrl-table3", "--resume", "--jobs", "1", "--config", str(f), "--out", str(out),
                 "--quiet"]) == 0


@pytest.mark.parametrize("config, named", [
    (ENTRIES, "--config 'zoo.yml': no entry for design apdrl-dqn-cartpole or environment CartPole-v1"),
    ((ZOO / "a2c.yml").read_text(), "--config 'zoo.yml' [CartPole-v1] ent_coef: unknown key for DQN"),
    ("learning_starts: 100\nfoo_rate: 3\n", "--config 'zoo.yml' foo_rate: unknown key for DQN"),
    ('CartPole-v1:\n  policy_kwargs: "dict(net_arch=[64], optimizer_class=RMSpropTFLike)"\n',
     "--config 'zoo.yml' [CartPole-v1] policy_kwargs optimizer_class: cannot be honoured for DQN"),
])
def test_an_experiment_refuses_a_design_without_an_entry_and_unknown_keys(tmp_path, capsys, monkeypatch, config,
                                                                           named):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "zoo.yml").write_text(config)
    assert main(_table3("t3", *TWO, "--steps", "300", "--config", "zoo.yml")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["zoo.yml"]  # nothing written, nothing run


def test_an_experiment_takes_a_mapping_of_hyperparameters(tmp_path):
    f, out = tmp_path / "hp.yml", tmp_path / "t3"
    f.write_text("learning_starts: 100\nexploration_final_eps: 0.2\ngamma: 0.95\n")  # ours and SB3's names
    assert main(_table3(out, "--design", "apdrl-dqn-cartpole", "--steps", "300", "--config", str(f),
                        "--set", "gamma=0.9")) == 0
    hp = _run(out, "apdrl-dqn-cartpole")[0]["hyperparams"]
    assert (hp["learning_starts"], hp["end_e"], hp["gamma"]) == (100, 0.2, 0.9)
