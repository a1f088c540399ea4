"""A console that helps: a mistyped name names the nearest ones, shell completion, -q / -v after the
command, a kernel's cost at a design's own layers, one build summary, tables without a spread of one
value, the Gantt chart's labels and edges, the compile cache shown and pruned, TensorBoard's
evaluation and hyperparameters."""

import os
from pathlib import Path

import pytest

from rlhls.cli import main


USER_DESIGN = """
from rlhls.designs import Dense, Design, NetSpec, Network, Tanh


def net(name, out):
    return lambda seed: Network(name, (4,), [Dense(16), Tanh(), Dense(out)], seed=seed)


design = Design(
    name="my-a2c", seed_file="-", seed_title="", algorithm="a2c",
    env_id="CartPole-v1", env_notes="Gymnasium classic control", obs_shape=(4,), action_dim=2,
    action_space="discrete",
    networks=(NetSpec("policy", "actor", net("policy", 2), optimizer="rmsprop"),
              NetSpec("value", "critic", net("value", 1), optimizer="rmsprop")),
    kernels=(), formats={"storage": "fp32", "acc": "fp32"}, device="zcu106", clocks_mhz={"PL": 200.0},
    batch_size=8, hyperparams={"num_envs": 2, "n_steps": 4, "rollouts_per_update": 1, "optimizer": "rmsprop"})
"""


@pytest.fixture
def user_design(tmp_path, monkeypatch):
    """A user's design file (no seed paper), in a fresh working folder; its design unregistered after."""
    from rlhls.designs import registry

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_design.py").write_text(USER_DESIGN)
    yield "./my_design.py"
    registry.unregister_design("my-a2c")
    registry._FILES.clear()


def snapshot(folder: Path) -> dict:
    """Every file under `folder` with its bytes (links as their target text)."""
    out = {}
    for p in sorted(Path(folder).rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(folder))] = ("link", os.readlink(p))
        elif p.is_file():
            out[str(p.relative_to(folder))] = p.read_bytes()
        else:
            out[str(p.relative_to(folder))] = "dir"
    return out


def refused(argv, capsys, folder: Path) -> str:
    """Runs the command; asserts exit 2, one short message, no traceback, nothing written; returns stderr."""
    before = snapshot(folder)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and 1 <= len(err.strip().splitlines()) <= 2, err
    assert snapshot(folder) == before
    return err


# ---------------------------------------------------------------- the nearest names


@pytest.mark.parametrize("argv, line", [
    (["designs", "apdrl-ddpg-lunarcnt"],
     "rlhls: error: unknown design 'apdrl-ddpg-lunarcnt': did you mean 'apdrl-ddpg-lunarcont'? (known: "),
    (["kernel", "dense_forwrd"], "rlhls: error: unknown kernel 'dense_forwrd': did you mean 'dense_forward'? (known: "),
    (["algorithms", "ddpq"], "rlhls: error: algorithm 'ddpq' has no trainer yet: did you mean 'ddpg'? (registered: "),
    (["experiment", "apdrl-tabel3"], "rlhls: error: rlhls experiment: argument NAME: invalid choice: 'apdrl-tabel3': "
                                     "did you mean 'apdrl-table3'? (choose from "),
    (["devices", "vek208"], "rlhls: error: unknown device 'vek208': did you mean 'vek280'? (expected one of: "),
    (["kernel", "dense_forward", "--device", "zcu160"], "rlhls: error: unknown device 'zcu160': did you mean 'zcu106' "
                                                        "or 'zcu102'? (expected one of: "),
    (["trian", "apdrl-dqn-cartpole"], "rlhls: error: argument COMMAND: invalid choice: 'trian': did you mean 'train'?"),
    (["train", "apdrl-dqn-cartpole", "--backend", "csm"], "invalid choice: 'csm': did you mean 'csim'?"),
    (["plugins", "kernal"], "rlhls: error: plugins: unknown kind 'kernal': did you mean 'kernel'?"),
    (["train", "apdrl-ddpg-lunarcont", "--env", "LunarLanderContinuous-v2", "--steps", "10"],
     "rlhls: error: unknown environment 'LunarLanderContinuous-v2': did you mean 'LunarLanderContinuous-v3'? "
     "(not registered with gymnasium)"),
])
def test_a_mistyped_name_names_the_nearest(argv, line, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused(argv, capsys, tmp_path)
    assert line in err.splitlines()[0], err


def test_the_suggestion_is_the_registrys_for_every_kind():
    """One place gives it: a registry of any kind, its own names; nothing near, nothing suggested."""
    from rlhls.core.errors import RlhlsError
    from rlhls.core.registry import Registry, did_you_mean
    from rlhls.host.experiments import get_experiment

    reg = Registry("widget")
    reg.add = lambda obj: None
    reg.put("sprocket", object(), origin="here")
    reg.put("gear", object(), origin="here")
    assert str(reg.unknown("sprockt")) == "unknown widget 'sprockt': did you mean 'sprocket'? (known: sprocket, gear)"
    assert str(reg.unknown("zzzzzz")) == "unknown widget 'zzzzzz' (known: sprocket, gear)"
    assert str(reg.unknown("a\nb")).startswith("unknown widget 'a\\nb'")  # one line, whatever was typed
    assert did_you_mean("PPO", ["ppo", "a2c"]) == "did you mean 'ppo'?"  # case aside
    with pytest.raises(RlhlsError, match=r"^unknown experiment 'heppo-tabel3': did you mean 'heppo-table3'\?"):
        get_experiment("heppo-tabel3")


# ---------------------------------------------------------------- shell completion


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o bashdefault -F _shtab_rlhls rlhls"), ("zsh", "#compdef rlhls")])
def test_completion_script_for_bash_and_zsh(shell, marker, capsys):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert marker in script
    for command in ("train", "experiment", "kernel", "cache", "apdrl-table3", "heppo-ppo"):  # commands, experiments, designs
        assert command in script, command


def test_completion_of_another_shell_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = refused(["completion", "fish"], capsys, tmp_path)
    assert "invalid choice: 'fish'" in err


# ---------------------------------------------------------------- -q / -v before or after the command


def _leaves(parser, path=()):
    import argparse

    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield path, parser
    for a in subs:
        for name, p in a.choices.items():
            yield from _leaves(p, (*path, name))


def test_every_command_takes_q_and_v_before_and_after():
    from rlhls.cli import build_parser

    parser = build_parser()
    for path, p in _leaves(parser):
        for flag in ("-q", "--quiet", "-v", "--verbose"):
            assert flag in p._option_string_actions, (path, flag)
    for argv, quiet, verbose in ((["designs"], False, False), (["-q", "designs"], True, False),
                                 (["designs", "-q"], True, False), (["-v", "designs", "-q"], True, True),
                                 (["designs", "--verbose"], False, True),
                                 (["experiment", "-q", "apdrl-table4", "-v"], True, True),
                                 (["-q", "train", "apdrl-dqn-cartpole"], True, False),
                                 (["train", "apdrl-dqn-cartpole", "-v"], False, True)):
        args = parser.parse_args(argv)
        assert (getattr(args, "quiet", False), getattr(args, "verbose", False)) == (quiet, verbose), argv


def test_train_q_after_the_command_is_quiet(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "apdrl-dqn-cartpole", "--steps", "50", "--precision", "fp32"]
    assert main([*argv, "--out", "a", "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("1 updates, 50 env steps -> a")


# ---------------------------------------------------------------- a kernel at a design's layers


def test_kernel_with_a_design_shows_its_layers(capsys):
    import json

    from rlhls.designs.registry import get_design

    design = get_design("apdrl-ddpg-lunarcont")
    assert main(["kernel", "dense_forward", "--design", "apdrl-ddpg-lunarcont", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    shapes = {(i["params"]["k"], i["params"]["m"]) for i in rep["instances"]}
    assert shapes == {(8, 400), (10, 400), (400, 300), (300, 2), (300, 1)}  # actor 8-400-300-2, critic 10-400-300-1
    assert all(i["params"]["n"] == design.batch_size == 256 for i in rep["instances"])
    assert all(i["params"]["storage"] == "fp16" and i["params"]["acc"] == "fp32" for i in rep["instances"])
    fc1 = next(i for i in rep["instances"] if i["params"]["m"] == 400 and i["params"]["k"] == 8)
    assert sorted(fc1["nodes"]) == ["actor.fc1.fwd", "actor.fc1.tfwd"] and fc1["params"]["pf"] == 8
    assert rep["params"] == rep["instances"][0]["params"] and rep["cycles"] == rep["instances"][0]["cycles"]
    assert main(["kernel", "dense_forward", "--design", "apdrl-ddpg-lunarcont"]) == 0
    text = capsys.readouterr().out
    assert "nodes       actor.fc1.tfwd, actor.fc1.fwd" in text and "k=8, m=400, pf=8" in text
    assert "n=8, k=16, m=16" not in text  # not the kernel's defaults
    # --set over every instance; the kernel alone keeps its defaults
    assert main(["kernel", "dense_forward", "--design", "apdrl-ddpg-lunarcont", "--set", "pf=1", "--json"]) == 0
    assert {i["params"]["pf"] for i in json.loads(capsys.readouterr().out)["instances"]} == {1}
    assert main(["kernel", "dense_forward", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"]["k"] == 16


# ---------------------------------------------------------------- one build summary


def test_build_summary_counts_the_host_nodes_its_warning_counts(user_design, capsys):
    import json
    import re

    assert main(["build", user_design, "--out", "b"]) == 0
    out, err = capsys.readouterr()
    warned = re.search(r"rlhls: warning: (\d+) PL node\(s\) have no kernel and run on the host", err)
    summary = re.search(r"(\d+) host node\(s\)", out.splitlines()[0])
    manifest = json.loads(Path("b/manifest.json").read_text())
    assert warned and summary, (out, err)
    assert int(summary[1]) == int(warned[1]) == len(manifest["unmapped"]) + len(manifest["host"]) > 0
    assert f"on the host, no PL kernel: {', '.join(manifest['unmapped'])}" in out


# ---------------------------------------------------------------- tables, reports, listings


def _episodes(folder: Path, returns, steps: int = 10):
    folder.mkdir(parents=True)
    lines = ["env_step,return,length"] + [f"{(i + 1) * steps},{r},{steps}" for i, r in enumerate(returns)]
    (folder / "episodes.csv").write_text("\n".join(lines) + "\n")
    (folder / "config.json").write_text('{"steps": %d}\n' % (len(returns) * steps))


def test_one_seed_has_no_spread_in_the_tables(tmp_path):
    from rlhls.host.experiments.apdrl import _lines, summarize_table3
    from rlhls.host.experiments.heppo import summarize
    from rlhls.host.figures import mean_std

    d = "apdrl-dqn-cartpole"
    for p, level in (("fp32", 100.0), ("mixed", 97.0)):
        _episodes(tmp_path / "a" / d / f"{p}-s0", [level] * 20)
        (tmp_path / "a" / d / f"{p}-s0" / "eval.csv").write_text(f"update,env_steps,mean_return\n1,200,{level}\n")
    rows = summarize_table3(tmp_path / "a", [d], 1)
    table = (tmp_path / "a" / "table3.md").read_text()
    assert "± 0.00" not in table and "| 100.00 | 97.00 |" in table
    assert "±" not in _lines(rows)[0] and "fp32    100.00" in _lines(rows)[0]
    configs = [{"name": "e1", "label": "baseline", "set": {}}]
    _episodes(tmp_path / "h" / "e1-s0", [5.0] * 20)
    rows = summarize(tmp_path / "h", configs, 1)
    assert "± 0.00" not in (tmp_path / "h" / "summary.md").read_text()
    # two seeds: the spread is there
    _episodes(tmp_path / "h" / "e1-s1", [7.0] * 20)
    summarize(tmp_path / "h", configs, 2)
    assert "6.00 ± 1.41" in (tmp_path / "h" / "summary.md").read_text()
    assert mean_std(6.0, 1.414, 2) == "6.00 ± 1.41" and mean_std(6.0, 0.0, 1) == "6.00"
    assert mean_std(6.0, 0.0, 1, "6.1f", "5.1f", pad=True) == "   6.0" + " " * 8


def test_a_users_design_report_has_no_empty_seed_line(tmp_path):
    from rlhls.host.report import write_report

    base = {"design": "my-a2c", "device": "zcu106", "batch": 8, "algorithm": "a2c"}
    for seed in ({"seed_file": "-", "seed_title": ""}, {"seed_file": "-", "seed_title": "-"}, {}):
        write_report(tmp_path / "report.md", {**base, **seed, "design_file": {"file": "/x/my_design.py"}})
        text = (tmp_path / "report.md").read_text()
        assert "Seed:" not in text and "(`-`)" not in text and "**" not in text.split("\n", 3)[2], text[:300]
        assert "Design file: `/x/my_design.py`." in text
    write_report(tmp_path / "report.md", {**base, "seed_file": "003_x.txt", "seed_title": "AP-DRL"})
    assert "Seed: *AP-DRL* (`003_x.txt`).  " in (tmp_path / "report.md").read_text().splitlines()


def test_designs_names_a_seed_by_its_title(user_design, capsys):
    from rlhls.designs.registry import get_design

    assert main(["designs", "apdrl-dqn-cartpole", user_design]) == 0
    out = capsys.readouterr().out.splitlines()
    d = get_design("apdrl-dqn-cartpole")
    assert out[0] == "apdrl-dqn-cartpole  [DQN]" and out[1] == f"  seed       {d.seed_title}"
    assert not any(d.seed_file in line for line in out)  # the title, not the paper's file name
    mine = out.index("my-a2c  [A2C]")
    assert out[mine + 1].startswith("  file       ") and out[mine + 1].endswith("my_design.py")
    assert not any(line.startswith("  seed") for line in out[mine:])  # it names no seed paper


# ---------------------------------------------------------------- the Gantt chart


def _plan():
    from rlhls.partition.plan import Plan

    # the PS's nodes short beside the PL's; p1 -> q1 and q0 -> p2 interleave in time
    times = {"p1": ("PS", 0.0, 0.5), "p2": ("PS", 25.0, 25.4), "p3": ("PS", 60.0, 60.2),
             "q0": ("PL", 0.0, 20.0), "q1": ("PL", 30.0, 80.0), "q2": ("PL", 80.0, 100.0)}
    return Plan(status="Optimal", makespan_us=100.0, gap=0.0, assignment={v: u for v, (u, _, _) in times.items()},
                start_us={v: s for v, (_, s, _) in times.items()}, point={v: "0" for v in times},
                finish_us={v: f for v, (_, _, f) in times.items()}, baselines={}, solve_seconds=0.0, solver="test",
                core={"p1": 0, "p2": 0, "p3": 0}, ps_cores=1)


def _texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in [*ax.texts, *fig.texts])


def _crosses(s, t) -> bool:
    """Whether segments s and t cross properly (each one's ends on either side of the other)."""
    def side(a, b, c):
        v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        return 0 if abs(v) < 1e-9 else (1 if v > 0 else -1)
    (a, b), (c, d) = s, t
    return side(a, b, c) * side(a, b, d) < 0 and side(c, d, a) * side(c, d, b) < 0


def test_gantt_names_every_bar_and_its_edges_do_not_cross():
    from matplotlib.text import Annotation

    plan = _plan()
    edges = [("p1", "q1", 64), ("q0", "p2", 64), ("p2", "q1", 8), ("q1", "p3", 8), ("p3", "q2", 8), ("q0", "q1", 8)]
    fig = plan.gantt(edges)
    texts = _texts(fig)
    for v in plan.assignment:  # the PS's short blocks too
        assert v in texts, (v, texts)
    arrows = [a for a in fig.axes[0].texts if isinstance(a, Annotation) and a.arrow_patch is not None]
    segments = [(a.xyann, a.xy) for a in arrows]
    assert len(segments) == 5  # the edges between units (q0 -> q1 stays on the PL)
    assert not any(_crosses(s, t) for i, s in enumerate(segments) for t in segments[i + 1:]), segments
    # each arrow ends on its consumer's bar, at its start
    ends = sorted(round(xy[0], 6) for _, xy in segments)
    assert ends == sorted(plan.start_us[b] for a, b, _ in edges if plan.assignment[a] != plan.assignment[b])


# ---------------------------------------------------------------- the compile cache

DAY = 86400.0


def _age(path: Path, days: float) -> None:
    """Every file under `path` (and itself) last modified `days` ago (a link itself, not its target)."""
    import time

    t = time.time() - days * DAY
    for p in [path, *(path.rglob("*") if path.is_dir() and not path.is_symlink() else [])]:
        os.utime(p, (t, t), follow_symlinks=False)


def _entry(kind_dir: Path, name: str, digest: str, days: float, size: int = 1000) -> list[Path]:
    """A csim-like entry: program, stamp, log, lock and its sources' folder, `days` old."""
    kind_dir.mkdir(parents=True, exist_ok=True)
    made = [kind_dir / f"csim-{name}-{digest}", kind_dir / f"csim-{name}-{digest}.sha256",
            kind_dir / f"src-{name}-{digest}"]
    made[0].write_bytes(b"x" * size)
    made[1].write_text(digest + "\n")
    made[2].mkdir()
    (made[2] / f"{name}.cpp").write_text("int main() {}\n")
    (kind_dir / f"csim-{name}-{digest}.lock").write_text("")
    for p in made:
        _age(p, days)
    _age(kind_dir / f"csim-{name}-{digest}.lock", days)
    return made


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An rlhls compile cache of its own (RLHLS_CACHE_DIR), made as a build makes it (its tag)."""
    from rlhls.core import toolchain

    root = tmp_path / "cache"
    monkeypatch.setenv("RLHLS_CACHE_DIR", str(root))
    monkeypatch.setattr(toolchain, "_USABLE", {})
    assert toolchain.cache_dir() == root and (root / "CACHEDIR.TAG").is_file()
    return root


def test_cache_shows_its_location_size_and_entries(cache, capsys):
    import json

    _entry(cache / "csim", "a", "0123456789abcdef", days=1, size=2_000_000)
    _entry(cache / "csim", "b", "fedcba9876543210", days=3, size=1_000_000)
    (cache / "pch" / "00112233445566778899").mkdir(parents=True)
    (cache / "pch" / "00112233445566778899" / "rlhls_ap_types.h.gch").write_bytes(b"p" * 500_000)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"compile cache {cache}: 3.5 MB in 3 entries"
    assert out[1] == "  csim             3.0 MB      2 entries  last used 1.0 days ago, least recently 3.0 days ago"
    assert out[2].startswith("  pch              0.5 MB      1 entries")
    assert main(["cache", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["entries"] == 3 and shown["kinds"]["csim"]["entries"] == 2 and shown["location"] == str(cache)


def test_cache_prune_removes_whole_entries_by_age_then_size(cache, capsys):
    old = _entry(cache / "csim", "old", "0123456789abcdef", days=40)
    mid = _entry(cache / "csim", "mid", "1123456789abcdef", days=10, size=3_000_000)
    new = _entry(cache / "csim", "new", "2123456789abcdef", days=2, size=2_000_000)
    keep = snapshot(cache)
    assert main(["cache", "--prune"]) == 0  # default: not used for 30 days
    assert capsys.readouterr().out.startswith("removed 1 entries (0.0 MB)")
    assert not any(p.exists() for p in old) and (cache / "csim" / "csim-old-0123456789abcdef.lock").is_file()
    assert all(p.exists() for p in mid + new)
    assert {k: v for k, v in keep.items() if "old" not in k or k.endswith(".lock")} == snapshot(cache)
    assert main(["cache", "--prune", "--max-size", "2.5"]) == 0  # the least recently used first
    assert not any(p.exists() for p in mid) and all(p.exists() for p in new)
    assert [p.name for p in cache.iterdir() if p.name.startswith(".trash")] == []  # the trash is gone
    assert main(["cache", "--clear"]) == 0
    assert not any(p.exists() for p in new) and (cache / "CACHEDIR.TAG").is_file()


def test_cache_prune_keeps_what_a_build_uses(cache, capsys):
    import fcntl

    held = _entry(cache / "csim", "held", "0123456789abcdef", days=40)
    fresh = _entry(cache / "csim", "fresh", "1123456789abcdef", days=0)  # used now: a build may load it next
    with open(cache / "csim" / "csim-held-0123456789abcdef.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build holds it
        assert main(["cache", "--clear"]) == 0
    assert capsys.readouterr().out.startswith("removed 0 entries (0.0 MB); 2 in use kept")
    assert all(p.exists() for p in held + fresh)


def test_cache_prune_never_leaves_the_cache_nor_follows_a_link(cache, tmp_path, capsys):
    outside = tmp_path / "mine"
    (outside / "sub").mkdir(parents=True)
    (outside / "precious.txt").write_text("keep me")
    (outside / "sub" / "also.txt").write_text("keep me too")
    _age(outside, 400)
    before = snapshot(outside)
    (cache / "csim").mkdir()
    (cache / "csim" / "link-0123456789abcdef").symlink_to(outside)  # an entry that is a link
    (cache / "csim" / "file-1123456789abcdef").symlink_to(outside / "precious.txt")
    (cache / "linked-kind").symlink_to(outside, target_is_directory=True)  # a kind folder that is a link
    for link in (cache / "csim").iterdir():
        _age(link, 40)
    _entry(cache / "csim", "x", "2123456789abcdef", days=40)
    assert main(["cache", "--clear"]) == 0
    assert snapshot(outside) == before
    assert not (cache / "csim" / "link-0123456789abcdef").is_symlink()  # the links themselves went, as links
    assert (cache / "linked-kind").is_symlink()
    capsys.readouterr()


@pytest.mark.parametrize("argv, needle", [
    (["cache", "--clear", "--prune"], "--clear removes every entry: it takes no --prune"),
    (["cache", "--older-than", "3"], "--older-than and --max-size choose what --prune removes: add --prune"),
    (["cache", "--prune", "--older-than", "-1"], "argument --older-than: -1 must be a number >= 0"),
    (["cache", "--prune", "--max-size", "nan"], "argument --max-size: nan must be a number >= 0"),
])
def test_cache_bad_options_are_refused(argv, needle, cache, capsys):
    _entry(cache / "csim", "x", "0123456789abcdef", days=40)
    assert needle in refused(argv, capsys, cache.parent)


def test_cache_prune_refuses_a_folder_that_is_not_its_cache(tmp_path, monkeypatch, capsys):
    from rlhls.core import toolchain

    home = tmp_path / "home"
    _entry(home / "projects", "x", "0123456789abcdef", days=400)  # a user's folder given by mistake
    monkeypatch.setattr(toolchain, "_USABLE", {})
    monkeypatch.setenv("RLHLS_CACHE_DIR", str(home))
    err = refused(["cache", "--clear"], capsys, tmp_path)
    assert f"'{home}' has no CACHEDIR.TAG of rlhls" in err
    link = tmp_path / "link"
    link.symlink_to(home, target_is_directory=True)
    (home / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    monkeypatch.setenv("RLHLS_CACHE_DIR", str(link))
    assert "is a symbolic link: rlhls prunes no folder through a link" in refused(["cache", "--clear"], capsys, tmp_path)


def test_a_build_beside_a_prune_gets_a_whole_entry(cache, tmp_path):
    """A compile of the entry being pruned waits for its lock, finds it gone, and builds it whole."""
    import subprocess
    import threading

    from rlhls.core import cache as cache_mod
    from rlhls.core.toolchain import compile_cpp

    src = tmp_path / "p.cpp"
    src.write_text('#include <cstdio>\nint main() { std::puts("built"); return 0; }\n')
    out = cache / "csim" / "csim-p-0123456789abcdef"
    compile_cpp([src], out)
    for p in (cache / "csim").iterdir():
        _age(p, 40)
    move, seen = cache_mod._move, {}

    def racing_move(root, e, trash):
        t = threading.Thread(target=lambda: seen.setdefault("exe", compile_cpp([src], out)))
        t.start()
        t.join(0.5)
        seen["waited"] = t.is_alive()  # the build waits on the entry's lock while the prune holds it
        ok = move(root, e, trash)
        seen["thread"] = t
        return ok

    cache_mod._move = racing_move
    try:
        result = cache_mod.prune(cache, clear=True)
    finally:
        cache_mod._move = move
    seen["thread"].join()
    assert result["removed"] == 1 and seen["waited"]
    assert subprocess.run([str(seen["exe"])], capture_output=True, text=True).stdout == "built\n"
    assert (cache / "csim" / "csim-p-0123456789abcdef.sha256").is_file()


def test_a_cache_hit_marks_its_last_use(cache, tmp_path):
    import time

    from rlhls.core.toolchain import compile_cpp

    src = tmp_path / "p.cpp"
    src.write_text("int main() { return 0; }\n")
    out = cache / "csim" / "csim-p-0123456789abcdef"
    compile_cpp([src], out)
    stamp = out.with_name(out.name + ".sha256")
    _age(stamp, 40)
    compile_cpp([src], out)  # from the cache
    assert stamp.stat().st_mtime > time.time() - DAY


# ---------------------------------------------------------------- TensorBoard


def test_tensorboard_has_cleanrls_eval_return_and_the_hyperparameters(tmp_path, monkeypatch):
    import json

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)
    assert main(["train", "apdrl-dqn-cartpole", "--steps", "50", "--precision", "fp32", "--out", "r", "-q"]) == 0
    acc = EventAccumulator("r", size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    ret = [(e.step, e.value) for e in acc.Scalars("eval/episodic_return")]
    assert ret == [(e.step, e.value) for e in acc.Scalars("eval/mean_return")] and len(ret) == 1
    text = acc.Tensors("hyperparameters/text_summary")[0].tensor_proto.string_val[0].decode()
    config = json.loads(Path("r/config.json").read_text())
    assert text.startswith("|param|value|\n|-|-|\n")
    assert "|design|apdrl-dqn-cartpole|" in text and "|env|CartPole-v1|" in text and "|seed|0|" in text
    for k, v in config["hyperparams"].items():
        assert f"|{k}|{v}|" in text, k
