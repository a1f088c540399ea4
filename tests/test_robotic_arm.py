"""The F-DDPG seed's arm (host/envs/robotic_arm.py): kinematics against hand-computed poses, pick-up,
carrying and free fall, the reward terms of eq. 8-11 on constructed states, §V-C's tasks, eq. 1-6's
sampling, determinism, gymnasium's check_env (render included) and a scripted controller that
completes a task."""

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlhls.envs  # noqa: F401
from rlhls.core.errors import RlhlsError
from rlhls.host.envs.robotic_arm import (ATTACH_MM, BOX_MM, DT, EPS_M, G_MM_S2, GROUND_MM, HOME, LIMITS, LINKS_MM,
                                         PUT_MM, STEP_DEG, TASKS, WEIGHTS, RoboticArm, forward_kinematics,
                                         reward_terms)

ID = "rlhls/RoboticArm-v0"
L0, L1, L2, L3 = LINKS_MM
SHOULDER = GROUND_MM + L0


def _arm(**kw):
    env = RoboticArm(**kw)
    env.reset(seed=0)
    return env


def _ik(tip):
    """Joint steps that put the magnet's face at `tip` pointing down (elbow up)."""
    w = np.asarray(tip, float) + (0, 0, L3)
    th, r, z = math.atan2(w[1], w[0]), math.hypot(w[0], w[1]), w[2] - SHOULDER
    q2 = -math.acos((r * r + z * z - L1 * L1 - L2 * L2) / (2 * L1 * L2))
    phi1 = math.atan2(z, r) - math.atan2(L2 * math.sin(q2), L1 + L2 * math.cos(q2))
    d = math.radians(STEP_DEG)
    return [round(v / d) for v in (th, phi1, q2, -math.pi / 2 - phi1 - q2)]


def _drive(env, target, magnet):
    a = [max(-1.0, min(1.0, (t - c) / 4)) for t, c in zip(target, env.unwrapped.q)]
    return np.array(a + [1.0 if magnet else -1.0], np.float32)


def test_kinematics_hand_computed_poses():
    # home: link 1 up, link 2 forward, link 3 down
    np.testing.assert_allclose(forward_kinematics(HOME), [[0, 0, SHOULDER], [0, 0, SHOULDER + L1],
                                                          [L2, 0, SHOULDER + L1], [L2, 0, SHOULDER + L1 - L3]],
                               atol=1e-9)
    # base +90 deg (50 steps), everything stretched forward horizontally: along +y at shoulder height
    np.testing.assert_allclose(forward_kinematics((50, 0, 0, 0))[-1], [0, L1 + L2 + L3, SHOULDER], atol=1e-9)
    # base -45 deg, link 1 at 45 deg, link 2 and 3 straight on: the tip at 45 deg elevation
    s = (L1 + L2 + L3) / math.sqrt(2)
    np.testing.assert_allclose(forward_kinematics((-25, 25, 0, 0))[-1], [s / math.sqrt(2), -s / math.sqrt(2),
                                                                         SHOULDER + s], atol=1e-9)
    # one motor step is 1.8 degrees
    tip = forward_kinematics((0, 0, 0, 1))[-1]
    np.testing.assert_allclose(tip, [L1 + L2 + L3 * math.cos(math.radians(1.8)), 0,
                                     SHOULDER + L3 * math.sin(math.radians(1.8))], atol=1e-9)


def test_reward_terms_eq_8_to_11_on_constructed_states():
    box, goal = np.array([300.0, 0.0, GROUND_MM]), np.array([300.0, 120.0, GROUND_MM + 50.0])
    top = box + (0, 0, BOX_MM)
    # last link vertical: r2 = 0; the magnet 30 mm above the box top
    tips = np.array([[0, 0, SHOULDER], [0, 0, 600], [300, 0, top[2] + 130], [300, 0, top[2] + 30]], float)
    r1, r2, r3, r4 = reward_terms(tips, box, goal, a_mag=0.7)
    assert r1 == pytest.approx(0.030) and r2 == pytest.approx(0.0, abs=1e-12)
    assert r3 == 0.0  # within EPS of the box: the magnet costs nothing
    assert r4 == pytest.approx(math.hypot(120, 50) / 1000)
    # last link horizontal: r2 = pi/2; far from the box, the magnet costs max(a, 0)
    tips[2], tips[3] = [100, 0, 600], [200, 0, 600]
    r1, r2, r3, _ = reward_terms(tips, box, goal, a_mag=0.7)
    assert r2 == pytest.approx(math.pi / 2) and r1 > EPS_M and r3 == pytest.approx(0.7)
    assert reward_terms(tips, box, goal, a_mag=-0.3)[2] == 0.0
    # 45 degrees: pi/2 - arccos(cos 45) = pi/4
    tips[3] = [200, 0, 500]
    tips[2] = [100, 0, 600]
    assert reward_terms(tips, box, goal, 0.0)[1] == pytest.approx(math.pi / 4)


def test_step_reward_is_minus_the_weighted_terms():
    env = _arm()
    u = env
    obs, r, term, trunc, info = u.step(np.array([0, 0, 0, 0, 0.4], np.float32))
    terms = reward_terms(u.tips, u.box, u.goal, 0.4)
    assert r == pytest.approx(-sum(w * t for w, t in zip(WEIGHTS, terms)))
    assert not term and not trunc and info["put"] is False


def test_tasks_fix_the_seeds_starts_and_goals():
    for task, ((sx, sy), (gx, gy)) in TASKS.items():
        env = gym.make(ID, task=task)
        obs, info = env.reset(seed=7)
        u = env.unwrapped
        np.testing.assert_array_equal(u.box, [sx, sy, GROUND_MM])
        np.testing.assert_array_equal(u.goal, [gx, gy, GROUND_MM])
        np.testing.assert_allclose(obs[12:15], (u.goal - u.box) / 1000, atol=1e-7)
        assert obs[15] == 0 and info["distance_mm"] == pytest.approx(math.hypot(gx - sx, gy - sy))
    assert set(TASKS) == set("ABCDEF") and TASKS["A"] == ((400, 0), (400, 150)) and TASKS["D"][1] == (200, 150)
    with pytest.raises(RlhlsError, match="task 'G'"):
        RoboticArm(task="G")


def test_random_starts_and_goals_follow_eq_1_to_6():
    env = gym.make(ID)
    starts, goals = [], []
    for s in range(200):
        env.reset(seed=s)
        starts.append(env.unwrapped.box.copy())
        goals.append(env.unwrapped.goal.copy())
    starts, goals = np.array(starts), np.array(goals)
    assert np.all((starts[:, 0] >= 200) & (starts[:, 0] < 400)) and np.all(starts[:, 1] == 0)
    assert np.all(starts[:, 2] == GROUND_MM)  # eq. 3's height: dropped to the ground before the first step
    assert np.all((goals[:, 0] >= 200) & (goals[:, 0] < 400)) and np.all((goals[:, 1] >= 0) & (goals[:, 1] < 150))
    assert np.all((goals[:, 2] >= 200) & (goals[:, 2] < 400))
    assert goals[:, 2].std() > 30 and starts[:, 0].std() > 30  # really sampled


def test_pick_up_carry_release_and_free_fall():
    env = _arm()
    tip = env.tips[3]
    env.box = tip - (0, 0, BOX_MM) + (ATTACH_MM - 5, 0, 0)  # the box top within reach of the magnet
    env.box[2] = GROUND_MM + 60  # (in the air: held boxes may be)
    _, _, _, _, info = env.step(np.array([0, 0, 0, 0, -1], np.float32))  # magnet off: it falls
    assert not info["held"] and not info["attach"]
    assert env.box[2] == pytest.approx(GROUND_MM + 60 - G_MM_S2 * DT * DT)  # one step of free fall
    env.box = env.tips[3] - (0, 0, BOX_MM)
    _, _, _, _, info = env.step(np.array([0, 0, 0, 0, 1], np.float32))
    assert info["attach"] and info["held"] and info["ever_attached"]
    np.testing.assert_allclose(env.box + (0, 0, BOX_MM), env.tips[3])
    q0 = list(env.q)
    _, _, _, _, info = env.step(np.array([1, 0, 0, 0, 1], np.float32))  # base turns 4 steps, the box follows
    assert env.q[0] == q0[0] + 4 and info["held"] and not info["attach"]
    np.testing.assert_allclose(env.box + (0, 0, BOX_MM), env.tips[3])
    z0 = env.box[2]
    _, _, _, _, info = env.step(np.array([0, 0, 0, 0, -1], np.float32))  # released
    assert not info["held"] and env.box[2] == pytest.approx(z0 - G_MM_S2 * DT * DT)
    for _ in range(40):
        env.step(np.array([0, 0, 0, 0, -1], np.float32))
    assert env.box[2] == GROUND_MM  # on the ground, stopped
    far = _arm()
    far.box = far.tips[3] - (0, 0, BOX_MM) + (ATTACH_MM + 5, 0, 0)
    assert not far.step(np.array([0, 0, 0, 0, 1], np.float32))[4]["held"]  # too far: no pick-up


def test_joint_limits_and_the_ground_stop_the_motors():
    env = _arm()
    env.q = [LIMITS[0][1] - 1, 50, -50, -50]
    env.tips = forward_kinematics(env.q)
    env.step(np.array([1, 0, 0, 0, -1], np.float32))
    assert env.q[0] == LIMITS[0][1]  # clamped at the limit
    env.q = _ik((300, 0, GROUND_MM + 3))  # the magnet 3 mm above the ground
    env.tips = forward_kinematics(env.q)
    assert GROUND_MM < env.tips[3, 2] < GROUND_MM + 8
    before = list(env.q)
    env.step(np.array([0, -1, 0, 0, -1], np.float32))  # the shoulder down would bury the magnet
    assert env.q == before and env.tips[3, 2] >= GROUND_MM
    env.step(np.array([0, 1, 0, 0, -1], np.float32))  # up is free
    assert env.q[1] == before[1] + 4


def test_deterministic_given_seed_and_actions():
    def roll(seed):
        env = gym.make(ID)
        o, _ = env.reset(seed=seed)
        rng = np.random.default_rng(3)
        out = [o]
        for _ in range(60):
            o, r, *_ = env.step(rng.uniform(-1, 1, 5).astype(np.float32))
            out += [o, np.array([r])]
        return np.concatenate([np.ravel(x) for x in out])
    assert np.array_equal(roll(4), roll(4)) and not np.array_equal(roll(4), roll(5))


def test_check_env_and_render():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning of gymnasium's checker fails the test
        check_env(gym.make(ID, render_mode="rgb_array").unwrapped)
    env = gym.make(ID, render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    env.step(np.ones(5, np.float32))
    assert not np.array_equal(env.render(), img)  # the arm moved
    assert gym.spec(ID).max_episode_steps == 300


def test_scripted_controller_completes_task_c_with_attach_lift_and_put():
    env = gym.make(ID, task="C")
    env.reset(seed=0)
    u = env.unwrapped
    plan = [(u.box + (0, 0, BOX_MM + 60), False), (u.box + (0, 0, BOX_MM), True),
            (u.box + (0, 0, BOX_MM + 100), True), (u.goal + (0, 0, BOX_MM + 100), True), (u.goal + (0, 0, BOX_MM), True)]
    attached = lifted = put = False
    for tip, mag in plan:
        tgt = _ik(tip)
        for _ in range(40):
            _, _, term, trunc, info = env.step(_drive(env, tgt, mag))
            attached |= info["attach"]
            lifted |= info["held"] and u.box[2] > GROUND_MM + 50
            if term:
                put = True
                break
        if put:
            break
    assert attached and lifted and put and info["distance_mm"] < PUT_MM
