"""The F-DDPG seed's robotic arm (seed 002 §IV, §V-A, §V-C) as a gymnasium environment.

``rlhls/RoboticArm-v0``: a 4-DoF arm (a rotating base, then four rigid links joined by three
joints) moves an 80 mm box with an electromagnet from a start to a goal.

Frame and units (the seed's, in mm): ``x``, ``y`` horizontal, ``z`` vertical. Eq. 9 takes the
horizontal distance from ``x`` and ``y``, and §V-C's tasks are ``(x, y)`` points with ``y = 0`` the
line through the arm's centre (the line a planar arm reaches: the TRPO column of Table VII), so
``z`` is the height. The ground is at ``z = 200`` mm, the lower bound of eq. 3 and 6 (a box
resting on it has ``z = 200``); a box position is the centre of its bottom face. The base
stands on the ground at ``x = y = 0``.

Choices where the seed is silent (it bases the arm on Zortrax's printable design and gives no
lengths or limits):

* links: ``L0 = 150`` mm upright on the base (the shoulder at ``z = 350``), ``L1 = L2 = 250`` mm,
  ``L3 = 100`` mm to the magnet's face. With the magnet pointing down this reaches a box on the
  ground from 200 to 460 mm out and a box top up to 480 mm high at 430 mm out: eq. 1-6's
  workspace (``x < 400``, ``y < 150``: radius < 430 mm) and the tasks.
* joints: stepper motors of 1.8 degrees (§IV-A); the state keeps whole steps, so every pose is
  exact. Base ``[-50, 50]`` steps (+-90 deg about z), shoulder ``[0, 100]`` (elevation of link 1
  from the forward horizontal, 0..180 deg), elbow and wrist ``[-90, 90]`` (+-162 deg, relative to
  the previous link). Home: shoulder 90 deg, elbow -90, wrist -90 (link 2 forward, the magnet
  pointing down, 220 mm above a resting box's top).
* actions: 5 values in [-1, 1] (§IV-B). Motor i turns ``round(a_i * 4)`` steps this env step (at
  most 7.2 deg, sign = direction; "a step proportional to the action value"), base first, then
  shoulder, elbow, wrist; a joint stops at its limit, and a joint whose move would put a link
  tip, or a held box's bottom, below the ground does not move this step. The magnet is on when
  ``a_4 > 0`` (§IV-B: 'greater than 0').
* pick-up (§IV-B): the box sticks to the magnet when the magnet is on and the magnet's face is
  within ``ATTACH_MM = 25`` mm of the centre of the box's top; it stays while the magnet stays on
  (carried rigidly, its top at the magnet); with the magnet off it falls freely
  (``g = 9.81 m/s^2``, ``DT = 0.05`` s per env step) to the ground. A start above the ground
  (eq. 3 allows up to 400) is dropped before the first step. The box is 80 mm on each side and
  at most 120 g (§V-A): the steppers hold it, so its mass does not enter the kinematics.
* state (17 values, metres): the vector from the centre of the box's top to the tip of each link
  ``p0..p3`` (12: "the distances of the links to the box"), the vector from the box to the goal
  (3: "the goal states"), and the two booleans: box held, box near the goal (within
  ``NEAR_MM = 60`` mm, twice the 'put' radius, so the flag is seen before the episode ends).
* reward (eq. 7-11), distances in metres, angles in radians: ``R = -(w1 r1 + w2 r2 + w3 r3 +
  w4 r4)`` with ``r1 = d(p3, box top)``, ``r2 = pi/2 - arccos(h(p2, p3) / d(p2, p3))`` (``h`` the
  horizontal distance: 0 when the last link is vertical), ``r3 = 0`` if ``r1 < EPS`` else
  ``max(a_mag, 0)``, ``r4 = d(box, goal)``; ``W = (1.0, 0.1, 0.1, 1.0)``, ``EPS = 0.05`` m. The
  weights keep |Q| well inside fixed<32,8>'s +-128 at gamma 0.99 (per-step |R| < 1.3).
* episode: terminated when the box is within ``PUT_MM = 30`` mm of the goal (§V-C's 'put'),
  truncated after 300 steps (the seed's 300 gradients per episode). ``info``: ``attach`` (the box
  became attached this step), ``held``, ``put``, ``ever_attached``, ``distance_mm`` (box to goal).
* starts and goals: eq. 1-6 sampled uniformly (``x`` in [200, 400), start ``y = 0``, goal ``y`` in
  [0, 150), ``z`` in [200, 400)); ``task="A"`` .. ``"F"`` fix §V-C's (start, goal) in ``(x, y)`` on
  the ground (``z = 200``): A (400, 0) -> (400, 150), B (400, 0) -> (200, 0), C (300, 0) ->
  (400, 150), D (300, 0) -> (200, 150), E (200, 0) -> (400, 150), F (200, 0) -> (400, 0).

Deterministic given the reset seed and the actions (integer joint steps, float64 box state).
``render_mode="rgb_array"`` draws a top view and a side view (matplotlib's object API, Agg).
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlhls.core.errors import RlhlsError

__all__ = ["RoboticArm", "TASKS", "ENVIRONMENTS", "forward_kinematics", "reward_terms", "LINKS_MM", "STEP_DEG",
           "GROUND_MM", "BOX_MM", "ATTACH_MM", "PUT_MM", "NEAR_MM", "EPS_M", "WEIGHTS", "MAX_STEPS", "HOME",
           "LIMITS", "OBS_DIM", "ACT_DIM"]

LINKS_MM = (150.0, 250.0, 250.0, 100.0)  # L0 (upright) .. L3 (to the magnet's face)
STEP_DEG = 1.8                            # stepper motor step (§IV-A)
STEPS_PER_ACTION = 4                      # motor steps of a full-scale action in one env step
LIMITS = ((-50, 50), (0, 100), (-90, 90), (-90, 90))  # base, shoulder, elbow, wrist, in motor steps
HOME = (0, 50, -50, -50)
GROUND_MM = 200.0
BOX_MM = 80.0
ATTACH_MM = 25.0
PUT_MM = 30.0
NEAR_MM = 60.0
EPS_M = 0.05
WEIGHTS = (1.0, 0.1, 0.1, 1.0)
G_MM_S2 = 9810.0
DT = 0.05
MAX_STEPS = 300
OBS_DIM, ACT_DIM = 17, 5
# §V-C: (start (x, y), goal (x, y)) on the ground
TASKS = {"A": ((400, 0), (400, 150)), "B": ((400, 0), (200, 0)), "C": ((300, 0), (400, 150)),
         "D": ((300, 0), (200, 150)), "E": ((200, 0), (400, 150)), "F": ((200, 0), (400, 0))}


def forward_kinematics(steps) -> np.ndarray:
    """Tips of links 0..3 (4, 3) in mm for joint positions in motor steps (base, shoulder, elbow, wrist)."""
    d = math.radians(STEP_DEG)
    t0 = steps[0] * d
    phi1 = steps[1] * d
    phi2 = phi1 + steps[2] * d
    phi3 = phi2 + steps[3] * d
    c0, s0 = math.cos(t0), math.sin(t0)
    l0, l1, l2, l3 = LINKS_MM
    pts = [(0.0, 0.0, GROUND_MM + l0)]
    r, z = 0.0, GROUND_MM + l0
    for length, phi in ((l1, phi1), (l2, phi2), (l3, phi3)):
        r += length * math.cos(phi)
        z += length * math.sin(phi)
        pts.append((r * c0, r * s0, z))
    return np.array(pts)


def reward_terms(tips_mm, box_mm, goal_mm, a_mag: float) -> tuple:
    """(r1, r2, r3, r4) of eq. 8-11 (metres, radians) for link tips (4, 3), a box and a goal in mm."""
    top = np.asarray(box_mm, dtype=np.float64) + (0.0, 0.0, BOX_MM)
    p2, p3 = np.asarray(tips_mm[2], dtype=np.float64), np.asarray(tips_mm[3], dtype=np.float64)
    r1 = float(np.linalg.norm(p3 - top)) / 1000.0
    d23 = float(np.linalg.norm(p2 - p3))
    h = math.hypot(p2[0] - p3[0], p2[1] - p3[1])
    r2 = math.pi / 2 - math.acos(min(1.0, h / d23))
    r3 = 0.0 if r1 < EPS_M else max(float(a_mag), 0.0)
    r4 = float(np.linalg.norm(np.asarray(box_mm, dtype=np.float64) - goal_mm)) / 1000.0
    return r1, r2, r3, r4


class RoboticArm(gym.Env):
    """The seed's simulated arm (module docstring). ``task``: None (eq. 1-6 sampled per reset) or
    'A'..'F' (§V-C); ``reset(options={'task': ...})`` overrides it for one episode."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, task: str | None = None, render_mode: str | None = None):
        if task is not None and task not in TASKS:
            raise RlhlsError(f"rlhls/RoboticArm-v0: task {task!r}: expected one of {', '.join(TASKS)} or None")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise RlhlsError(f"rlhls/RoboticArm-v0: render_mode {render_mode!r}: expected 'rgb_array' or None")
        self.task, self.render_mode = task, render_mode
        high = np.full(OBS_DIM, 2.0, dtype=np.float32)
        low = -high
        low[-2:], high[-2:] = 0.0, 1.0
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (ACT_DIM,), dtype=np.float32)
        self.q = list(HOME)
        self.box = np.array([300.0, 0.0, GROUND_MM])
        self.goal = np.array([300.0, 100.0, GROUND_MM])
        self.vz = 0.0
        self.held = self.magnet = self.ever = False
        self.tips = forward_kinematics(self.q)
        self._fig = None

    # -- episode
    def _sample(self, task):
        if task is not None:
            (sx, sy), (gx, gy) = TASKS[task]
            return np.array([sx, sy, GROUND_MM], float), np.array([gx, gy, GROUND_MM], float)
        u = self.np_random.uniform
        start = np.array([u(200.0, 400.0), 0.0, u(200.0, 400.0)])
        goal = np.array([u(200.0, 400.0), u(0.0, 150.0), u(200.0, 400.0)])
        return start, goal

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = (options or {}).get("task", self.task)
        if task is not None and task not in TASKS:
            raise RlhlsError(f"rlhls/RoboticArm-v0: task {task!r}: expected one of {', '.join(TASKS)} or None")
        start, self.goal = self._sample(task)
        start[2] = GROUND_MM  # eq. 3 allows a start above the ground: it falls before the first step
        self.box, self.vz = start, 0.0
        self.q = list(HOME)
        self.tips = forward_kinematics(self.q)
        self.held = self.magnet = self.ever = False
        return self._obs(), {"held": False, "put": False, "attach": False, "ever_attached": False,
                             "distance_mm": self._dist()}

    def _dist(self) -> float:
        return float(np.linalg.norm(self.box - self.goal))

    def _obs(self) -> np.ndarray:
        top = self.box + (0.0, 0.0, BOX_MM)
        o = np.empty(OBS_DIM)
        o[:12] = ((self.tips - top) / 1000.0).ravel()
        o[12:15] = (self.goal - self.box) / 1000.0
        o[15] = float(self.held)
        o[16] = float(self._dist() < NEAR_MM)
        return o.astype(np.float32)

    def _valid(self, tips, held: bool) -> bool:
        if np.any(tips[1:, 2] < GROUND_MM):
            return False
        return not (held and tips[3, 2] - BOX_MM < GROUND_MM)

    def step(self, action):
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (ACT_DIM,) or not np.all(np.isfinite(a)):
            raise RlhlsError(f"rlhls/RoboticArm-v0: action {action!r}: expected {ACT_DIM} finite values in [-1, 1]")
        a = np.clip(a, -1.0, 1.0)
        for i in range(4):  # motors in order; a blocked joint stays
            n = int(math.floor(a[i] * STEPS_PER_ACTION + 0.5))
            if n == 0:
                continue
            lo, hi = LIMITS[i]
            cand = list(self.q)
            cand[i] = min(hi, max(lo, cand[i] + n))
            if cand[i] == self.q[i]:
                continue
            tips = forward_kinematics(cand)
            if self._valid(tips, self.held):
                self.q, self.tips = cand, tips
        self.magnet = bool(a[4] > 0.0)
        attach = False
        top = self.box + (0.0, 0.0, BOX_MM)
        if self.held and not self.magnet:
            self.held = False  # released: falls from here
        elif not self.held and self.magnet and np.linalg.norm(self.tips[3] - top) < ATTACH_MM:
            self.held = attach = self.ever = True
            self.vz = 0.0
        if self.held:
            self.box = self.tips[3] - (0.0, 0.0, BOX_MM)
        elif self.box[2] > GROUND_MM:  # free fall to the ground
            self.vz -= G_MM_S2 * DT
            self.box = self.box + (0.0, 0.0, self.vz * DT)
            if self.box[2] <= GROUND_MM:
                self.box[2], self.vz = GROUND_MM, 0.0
        r = reward_terms(self.tips, self.box, self.goal, a[4])
        reward = -sum(w * t for w, t in zip(WEIGHTS, r))
        dist = self._dist()
        put = dist < PUT_MM
        info = {"held": self.held, "put": put, "attach": attach, "ever_attached": self.ever, "distance_mm": dist}
        return self._obs(), float(reward), put, False, info

    # -- drawing
    def _figure(self):
        """The figure and its artists, made once (a frame only moves them)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle

        fig = Figure(figsize=(6.4, 3.2), dpi=80)
        FigureCanvasAgg(fig)
        top, side = fig.subplots(1, 2)
        top.set(xlim=(-100, 550), ylim=(-300, 350), aspect="equal", title="top (x, y) mm")
        side.set(xlim=(-100, 600), ylim=(150, 800), aspect="equal", title="side (radius, z) mm")
        side.axhline(GROUND_MM, color="k", lw=1)
        art = {}
        for name, ax in (("top", top), ("side", side)):  # animated: left out of the background
            art[name + "_box"] = ax.add_patch(Rectangle((0, 0), BOX_MM, BOX_MM, color="tab:orange", alpha=0.8,
                                                        animated=True))
            art[name + "_goal"], = ax.plot([], [], "*", color="tab:green", ms=14, animated=True)
            art[name + "_arm"], = ax.plot([], [], "-o", color="tab:blue", lw=3, ms=4, animated=True)
            art[name + "_tip"], = ax.plot([], [], "s", ms=7, animated=True)
        fig.tight_layout()
        fig.canvas.draw()
        return fig, art, fig.canvas.copy_from_bbox(fig.bbox)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._fig is None:
            self._fig = self._figure()
        fig, art, background = self._fig
        pts = np.vstack([[0.0, 0.0, GROUND_MM], self.tips])
        rr = np.hypot(pts[:, 0], pts[:, 1])
        h = BOX_MM / 2
        views = {"top": (pts[:, 0], pts[:, 1], (self.box[0] - h, self.box[1] - h), (self.goal[0], self.goal[1])),
                 "side": (rr, pts[:, 2], (math.hypot(self.box[0], self.box[1]) - h, self.box[2]),
                          (math.hypot(self.goal[0], self.goal[1]), self.goal[2]))}
        for name, (x, y, corner, goal) in views.items():
            art[name + "_arm"].set_data(x, y)
            art[name + "_tip"].set_data([x[-1]], [y[-1]])
            art[name + "_tip"].set_color("tab:red" if self.magnet else "tab:gray")
            art[name + "_goal"].set_data([goal[0]], [goal[1]])
            art[name + "_box"].set_xy(corner)
        fig.canvas.restore_region(background)  # blit: only the moving artists are drawn
        for a in art.values():
            a.axes.draw_artist(a)
        return np.asarray(fig.canvas.buffer_rgba())[:, :, :3].copy()

    def close(self):
        self._fig = None


ENVIRONMENTS = {
    "rlhls/RoboticArm-v0": {"entry_point": "rlhls.host.envs.robotic_arm:RoboticArm", "max_episode_steps": MAX_STEPS},
}
