"""Environments: the registry (one module per environment in host/envs/, ``rlhls/...`` ids),
gymnasium's env checker on every design's environment as rlhls builds it, and the Atari stack's
seeded resets and re-creation from its spec."""

import importlib
import sys
import types
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env, data_equivalence

import rlhls.host.envs as envs_pkg
from rlhls.core.errors import RlhlsError
from rlhls.designs.registry import design_names, get_design
from rlhls.host.envs import (ReplayableVecEnv, environment_modules, make_env, make_vec_env,
                             register_environments, register_module)
from rlhls.host.envs.atari import is_atari, make_atari


class _Walk(gym.Env):
    """A seeded random walk: the start and every step's drift come from the env's RNG; the goal is |x| >= 3."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = float(self.np_random.uniform(-1, 1))
        return self._obs(), {}

    def step(self, action):
        self.x += (1.0 if action == 1 else -1.0) * 0.5 + float(self.np_random.normal(0, 0.1))
        done = abs(self.x) >= 3.0
        return self._obs(), float(done), done, False, {"x": self.x}

    def _obs(self):
        return np.array([self.x, abs(self.x)], np.float32)


# the same table an environment module in host/envs/ declares
ENVIRONMENTS = {"rlhls/TestWalk-v0": {"entry_point": _Walk, "max_episode_steps": 40}}

# design environments whose modules arrive later (their own issues): until then they are unknown ids
PENDING: set = set()
# gymnasium's notes that are not faults of an environment: check_env is given the wrapped env on
# purpose (the stack rlhls trains on), MuJoCo / classic-control spaces are unbounded or not [-1, 1]
BENIGN = ("is different from the unwrapped version", "Box observation space minimum value is -infinity",
          "Box observation space maximum value is infinity", "we recommend using a symmetric and normalized space")


def _registered(env_id: str) -> bool:
    try:
        is_atari(env_id)  # registers ale-py's ids
    except RlhlsError:
        return False
    return env_id in gym.registry


register_environments()
DESIGN_ENV_IDS = sorted({get_design(n).env_id for n in design_names()})
BUILT = [e for e in DESIGN_ENV_IDS if _registered(e)]


@pytest.fixture
def walk():
    ids = register_module(sys.modules[__name__])
    yield ids[0]
    for env_id in ids:
        gym.registry.pop(env_id, None)


def _check(env_id: str) -> None:
    """check_env on make_env(env_id) (the sub-env make_vec_env builds); gymnasium's warnings but BENIGN fail it.
    Render check skipped: rlhls builds its envs with render_mode=None and trains headless, and the
    check opens every declared mode ('human' needs a display)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = make_env(env_id)
        check_env(env, skip_render_check=True)
        env.close()
    notes = [str(w.message) for w in caught if "WARN:" in str(w.message)]
    bad = [m for m in notes if not any(b in m for b in BENIGN)]
    assert not bad, f"{env_id}: {bad}"


def _chain(env) -> list[str]:
    names = []
    while env is not env.unwrapped:
        names.append(type(env).__name__)
        env = env.env
    return names + [type(env).__name__]


@pytest.mark.parametrize("env_id", BUILT)
def test_design_environment_passes_check_env_as_rlhls_builds_it(env_id):
    vec = make_vec_env(env_id, 1)
    assert _chain(vec.envs[0]) == _chain(make_env(env_id))  # the env checked is the one trained on
    vec.close()
    _check(env_id)


def test_every_design_environment_is_built_or_pending():
    missing = set(DESIGN_ENV_IDS) - set(BUILT)
    assert missing <= PENDING, f"design environments not registered: {sorted(missing - PENDING)}"
    assert {"Humanoid-v5", "CartPole-v1", "BreakoutNoFrameskip-v4", "MsPacmanNoFrameskip-v4"} <= set(BUILT)
    for env_id in missing:  # not built yet: one line, no traceback of gymnasium's
        with pytest.raises(RlhlsError, match=f"unknown environment '{env_id}'") as e:
            make_env(env_id)
        assert "\n" not in str(e.value)


def test_environment_registered_from_a_module_table_passes_check_env(walk):
    assert walk == "rlhls/TestWalk-v0" and gym.spec(walk).max_episode_steps == 40
    spec = gym.registry[walk]
    assert register_module(sys.modules[__name__]) == (walk,) and gym.registry[walk] is spec  # again: no-op
    _check(walk)
    # training's vector env takes the id, and its replay (seeded resets) rebuilds the state
    live, rng = ReplayableVecEnv(walk, 2, seed=3), np.random.default_rng(0)
    live.reset()
    ends = 0
    for _ in range(30):
        ends += int(np.logical_or(*live.step(rng.integers(0, 2, 2))[2:4]).sum())
    assert ends > 0
    twin = ReplayableVecEnv(walk, 2, seed=3)
    twin.restore(live.state())
    np.testing.assert_array_equal(twin.obs, live.obs)


def test_seeded_walk_is_deterministic_and_checked(walk):
    env = make_env(walk)
    a, _ = env.reset(seed=5)
    b, _ = env.reset(seed=6)
    c, _ = env.reset(seed=5)
    assert np.array_equal(a, c) and not np.array_equal(a, b)  # the check above sees a real RNG


MODULE = '''
import gymnasium as gym
import numpy as np


class Line(gym.Env):
    observation_space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = int(self.np_random.integers(-3, 4))
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x += int(action) - 1
        return np.array([self.x], np.float32), -abs(self.x) / 10.0, self.x == 0, False, {}


ENVIRONMENTS = {"rlhls/TestLine-v0": {"entry_point": "rlhls.host.envs.test_line:Line", "max_episode_steps": 25}}
'''


@pytest.fixture
def extra_dir(tmp_path, monkeypatch):
    """A second folder of host/envs/ modules (as if they were in the package)."""
    monkeypatch.setattr(envs_pkg, "__path__", list(envs_pkg.__path__) + [str(tmp_path)])
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("rlhls.host.envs.test_")]:
        del sys.modules[name]
    gym.registry.pop("rlhls/TestLine-v0", None)


def test_a_module_in_host_envs_is_found_by_training_and_by_import_rlhls_envs(extra_dir):
    (extra_dir / "test_line.py").write_text(MODULE)
    assert "rlhls.host.envs.test_line" in environment_modules()
    assert not any(m.rsplit(".", 1)[1] in ("vector", "atari", "registry") for m in environment_modules())
    assert "rlhls/TestLine-v0" not in gym.registry
    envs = make_vec_env("rlhls/TestLine-v0", 2)  # what the trainers call: no import needed first
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 1) and gym.spec("rlhls/TestLine-v0").max_episode_steps == 25
    envs.close()
    gym.registry.pop("rlhls/TestLine-v0")
    import rlhls.envs

    importlib.reload(rlhls.envs)  # importing rlhls.envs registers every module's ids
    assert "rlhls/TestLine-v0" in rlhls.envs.IDS and "rlhls/TestLine-v0" in gym.registry
    _check("rlhls/TestLine-v0")


def test_broken_environment_modules_are_one_line_errors(extra_dir):
    (extra_dir / "test_broken.py").write_text("import traci_not_installed\nENVIRONMENTS = {}\n")
    with pytest.raises(RlhlsError, match=r"rlhls.host.envs.test_broken failed to import: ModuleNotFoundError"):
        register_environments()
    with pytest.raises(RlhlsError, match="test_broken failed to import"):
        make_vec_env("CartPole-v1", 1)  # a broken module is not hidden behind another id
    (extra_dir / "test_broken.py").unlink()
    sys.modules.pop("rlhls.host.envs.test_broken", None)
    (extra_dir / "test_notable.py").write_text("X = 1\n")  # no table: a module of plumbing, nothing to register
    assert "rlhls.host.envs.test_notable" not in environment_modules() and register_environments()
    (extra_dir / "test_badtable.py").write_text("ENVIRONMENTS = []\n")
    with pytest.raises(RlhlsError, match="test_badtable: expected ENVIRONMENTS") as e:
        register_environments()
    assert "\n" not in str(e.value)


def _module(table):
    m = types.ModuleType("user_envs")
    m.ENVIRONMENTS = table
    return m


@pytest.mark.parametrize("table,match", [
    ({"TestWalk-v0": {"entry_point": _Walk}}, "expected an id 'rlhls/<Name>-v<k>'"),
    ({"rlhls/TestWalk": {"entry_point": _Walk}}, "expected an id"),
    ({"rlhls/TestWalk-v01": {"entry_point": _Walk}}, "expected an id"),
    ({"rlhls/Test-Walk-v0": {"entry_point": _Walk}}, "expected an id"),
    ({"rlhls/TestWalk-v0": _Walk}, "expected a dict of gymnasium.register keyword arguments, got type"),
    ({"rlhls/TestWalk-v0": {"entry_point": _Walk, "max_steps": 3}}, "max_steps not gymnasium.register arguments"),
    ({"rlhls/TestWalk-v0": {"max_episode_steps": 3}}, "no entry_point"),
    ({}, "expected ENVIRONMENTS, a non-empty dict"),
    ([("rlhls/TestWalk-v0", {"entry_point": _Walk})], "expected ENVIRONMENTS"),
])
def test_malformed_tables_are_one_line_errors(table, match):
    with pytest.raises(RlhlsError, match=match) as e:
        register_module(_module(table))
    assert "\n" not in str(e.value) and "rlhls/TestWalk-v0" not in gym.registry


def test_an_id_held_by_another_environment_is_refused_whole_table(walk):
    other = {"rlhls/TestOther-v0": {"entry_point": _Walk}, walk: {"entry_point": "somewhere:Else"}}
    with pytest.raises(RlhlsError, match="already registered with gymnasium for (tests.)?test_envs:_Walk"):
        register_module(_module(other))
    assert "rlhls/TestOther-v0" not in gym.registry  # nothing of a refused table is registered
    gym.register("rlhls/TestForeign-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    try:  # an id other code took with gym.register
        with pytest.raises(RlhlsError, match="already registered with gymnasium for gymnasium.envs.classic_control"):
            register_module(_module({"rlhls/TestForeign-v0": {"entry_point": _Walk}}))
        assert gym.registry["rlhls/TestForeign-v0"].entry_point.endswith("CartPoleEnv")
    finally:
        gym.registry.pop("rlhls/TestForeign-v0")


def test_bad_env_requests_are_one_line_errors():
    with pytest.raises(RlhlsError, match="unknown environment 'rlhls/Nothing-v0'"):
        make_vec_env("rlhls/Nothing-v0", 1)
    with pytest.raises(RlhlsError, match="autoreset 'sometimes' is not one of same_step, next_step, disabled"):
        make_vec_env("CartPole-v1", 1, autoreset="sometimes")
    with pytest.raises(RlhlsError, match="num_envs 0 must be >= 1"):
        make_vec_env("CartPole-v1", 0)


# -- Atari: seeded resets and re-creation from the spec


def _lose_a_life(env, rng, limit=600):
    for _ in range(limit):
        _, _, term, trunc, info = env.step(int(rng.integers(0, env.action_space.n)))
        if term and not info["game_over"]:
            return
    raise AssertionError("no life lost")


def test_atari_seeded_reset_starts_a_fresh_game_seedless_continues():
    env = make_atari("BreakoutNoFrameskip-v4")
    first, _ = env.reset(seed=3)
    lives = env.unwrapped.ale.lives()
    rng = np.random.default_rng(0)
    _lose_a_life(env, rng)
    cont, _ = env.reset()  # ReplayableVecEnv after a lost life: the same game goes on
    assert env.unwrapped.ale.lives() == lives - 1 and not np.array_equal(cont, first)
    _lose_a_life(env, rng)
    again, _ = env.reset(seed=3)  # a seed: that seed's game from its start
    assert env.unwrapped.ale.lives() == lives and np.array_equal(again, first)
    steps = [env.step(a) for a in (1, 3, 3, 2)]
    env.reset(seed=3)
    assert all(data_equivalence(s, env.step(a)) for s, a in zip(steps, (1, 3, 3, 2)))
    env.close()


def _rollout(env, seed, n=300):
    """Seeded start, fixed actions; lost life -> seedless reset, game over -> the next seed (as ReplayableVecEnv)."""
    out = [env.reset(seed=seed)]
    rng = np.random.default_rng(seed)
    for _ in range(n):
        step = env.step(int(rng.integers(0, env.action_space.n)))
        out.append(step)
        if step[2] or step[3]:
            out.append(env.reset() if not step[4]["game_over"] else env.reset(seed=seed + 1))
    return out


@pytest.mark.parametrize("env_id,kwargs", [("BreakoutNoFrameskip-v4", {}), ("MsPacmanNoFrameskip-v4", {}),
                                           ("MsPacmanNoFrameskip-v4", {"clip_rewards": False, "frame_stack": 2})])
def test_atari_stack_is_recreated_from_its_spec(env_id, kwargs):
    env = make_atari(env_id, **kwargs)
    names = [w.name for w in env.spec.additional_wrappers]
    assert names[0] == "AtariPreprocessing" and names[-1] == "FrameStackObservation"
    assert ("ClipReward" in names) == kwargs.get("clip_rewards", True)
    twin = env.spec.make()
    assert _chain(twin) == _chain(env) and twin.spec == env.spec
    assert twin.observation_space == env.observation_space
    a, b = _rollout(env, 7), _rollout(twin, 7)
    assert len(a) == len(b) and all(data_equivalence(x, y, exact=True) for x, y in zip(a, b))
    # the rollout saw lost lives (seedless resets) and scored
    assert sum(1 for s in a if len(s) == 5 and s[2] and not s[4]["game_over"]) > 0
    assert any(len(s) == 5 and s[1] > 0 for s in a)
    env.close()
    twin.close()
