"""A2C traffic-signal control (seed 004): a small convnet A2C whose MAC-array compute element runs
on the PL of a Zynq, environment SUMO through sumo-rl (host/envs/sumo_intersection.py).

The signal plan (the seed's Fig. 3 table) lives here; the environment builds its SUMO program and
its actions from it. Rows are the four movements, columns the eight intervals of one cycle::

    interval   0 (30s)  1 (5s)  2 (15s)  3 (5s)  4 (30s)  5 (5s)  6 (15s)  7 (5s)
    EW-forward    G       Y        R        R       R        R       R        R
    EW-left       g       g        G        Y       R        R       R        R
    NS-forward    R       R        R        R       G        Y       R        R
    NS-left       R       R        R        R       g        g       G        Y       (g: yield on green)

Actions (the seed's A = {NSL, NS, EWL, EW}, NEMA numbering of Fig. 1 as the usual dual ring: the
through movements are phases 2+6 (NS) and 4+8 (EW), the protected lefts 1+5 (NSL) and 3+7 (EWL);
the figure itself is not in the seed's text). An action picks one of the table's green intervals
(EW -> 0, EWL -> 2, NS -> 4, NSL -> 6) and holds the signal for ``YELLOW + green`` seconds: first
5 s of clearance -- every link that has right of way now and loses it in the chosen green turns
yellow, a link that keeps it keeps its state (so EW -> EWL clears with interval 1, EWL -> NS with
3, NS -> NSL with 5, NSL -> EW with 7) -- then the chosen green (30 s through, 15 s left). An
action equal to the current green extends it by the same 35 s / 20 s, without yellow. Choosing
EW, EWL, NS, NSL in turn (``FIXED_TIME``) therefore runs exactly the table's cycle, 110 s: that is
the seed's fixed-time plan, the baseline of ``rlhls experiment traffic``. An episode starts at
the end of interval 6 (NS-left green), so the fixed-time plan's first step is 7 then 0.
"""

from __future__ import annotations

from .design import Design, KernelSpec, NetSpec
from .network import Conv2d, Dense, Flatten, Network, ReLU, Softmax

SEED = "004_9e2832805631524e.txt"
TITLE = "Hardware Acceleration of Deep Reinforcement Learning: Application in Traffic Signal Control"

MOVEMENTS = ("EW", "EWL", "NS", "NSL")  # the table's rows: EW-forward, EW-left, NS-forward, NS-left
# Fig. 3: (seconds, {movement: signal}) per interval; G green, g green but yield, Y yellow, R red
SIGNAL_PLAN = (
    (30, {"EW": "G", "EWL": "g", "NS": "R", "NSL": "R"}),
    (5, {"EW": "Y", "EWL": "g", "NS": "R", "NSL": "R"}),
    (15, {"EW": "R", "EWL": "G", "NS": "R", "NSL": "R"}),
    (5, {"EW": "R", "EWL": "Y", "NS": "R", "NSL": "R"}),
    (30, {"EW": "R", "EWL": "R", "NS": "G", "NSL": "g"}),
    (5, {"EW": "R", "EWL": "R", "NS": "Y", "NSL": "g"}),
    (15, {"EW": "R", "EWL": "R", "NS": "R", "NSL": "G"}),
    (5, {"EW": "R", "EWL": "R", "NS": "R", "NSL": "Y"}),
)
ACTIONS = ("NSL", "NS", "EWL", "EW")  # action index -> movement, in the seed's order
NEMA = {"NSL": (1, 5), "NS": (2, 6), "EWL": (3, 7), "EW": (4, 8)}
GREEN_INTERVAL = {"EW": 0, "EWL": 2, "NS": 4, "NSL": 6}  # the table's green interval of each action
YELLOW = 5  # seconds of clearance (intervals 1, 3, 5, 7)
FIXED_TIME = ("EW", "EWL", "NS", "NSL")  # the table's order: the seed's fixed-time plan
FIRST_GREEN = "NSL"  # the green an episode starts from (interval 6 just ended)


def action_seconds(movement: str) -> int:
    """Seconds one action holds the signal: clearance (or green extension) + its green."""
    return YELLOW + SIGNAL_PLAN[GREEN_INTERVAL[movement]][0]


def _trunk(seed):
    # 12x12 occupancy -> conv 2x2 (4 filters) -> 11x11x4 = 484 -> fc 48: the 48 x 484 weight-gradient
    # stage with 4 MACs gives the seed's 48*484/4 = 5808 iterations.
    return Network("trunk", (1, 12, 12), [Conv2d(4, 2, stride=1), ReLU(), Flatten(), Dense(48), ReLU()], seed=seed)


def designs():
    return [
        Design(
            name="a2c-traffic",
            seed_file=SEED,
            seed_title=TITLE,
            algorithm="a2c",
            env_id="rlhls/SumoIntersection-v0",
            env_notes="one four-way intersection with protected left turns in SUMO via sumo-rl (three-lane "
                      "approaches, four route sets); actions {NSL, NS, EWL, EW} run the seed's Fig. 3 table (30/5/15/5 "
                      "s); state a 12x12 lane-occupancy matrix (four road blocks); reward the drop in waiting time",
            obs_shape=(1, 12, 12),
            action_dim=4,
            action_space="discrete",
            networks=(
                NetSpec("trunk", "trunk", _trunk, optimizer="rmsprop"),
                NetSpec("policy", "actor", lambda s: Network("policy", (48,), [Dense(4, gain=0.01), Softmax()], seed=s),
                        input_from="trunk", optimizer="rmsprop"),
                NetSpec("value", "critic", lambda s: Network("value", (48,), [Dense(1, gain=1.0)], seed=s),
                        input_from="trunk", optimizer="rmsprop"),
            ),
            kernels=(
                KernelSpec("mac_array", "PL", "fp32", "fp32", {"macs": 4},
                           "Fig. 4 and the FSM listing: four MACs, input_1 shared, one BRAM output buffer per MAC",
                           notes={"fsm_states": 11, "stages": ["fwd_conv", "fwd_fc", "bwd_delta", "bwd_wgrad",
                                                               "bwd_conv_wgrad"]}),
            ),
            formats={"storage": "fp32", "acc": "fp32"},
            device="zcu106",
            clocks_mhz={"PL": 100.0},
            batch_size=32,
            hyperparams={"optimizer": "rmsprop", "learning_rate": 7e-4, "rmsprop_alpha": 0.99, "rmsprop_eps": 1e-5,
                         "gamma": 0.99, "num_envs": 1, "n_steps": 32, "ent_coef": 0.01, "vf_coef": 0.5,
                         "max_grad_norm": 0.5, "rollouts_per_update": 10, "precision": "mixed"},
            # ~50 hour-long episodes: a couple of minutes on 2 cores
            demo={"steps": 6400},
            # the seed's PL is the MAC array alone: the heads, activations, loss and RMSprop stay on the PS
            pins={"*": "PS"},
            seed_figures={"fc1_weight_gradient_iterations": 5808, "macs": 4, "fc1_out": 48},
            choices=(
                "conv 2x2 stride 1 with 4 filters on one 12x12 channel: the seed gives 484 = 11x11x4 inputs to fc1 "
                "but not the kernel",
                "ReLU after conv and fc1 (the seed does not name them); softmax policy head, linear value head",
                "fp32 arithmetic: the seed does not give the number format",
                "ZCU106 at 100 MHz: the seed names a Zynq PS+PL but not the board or clock",
                "batch 32 (n_steps) and RMSprop settings of Stable-Baselines3's A2C; the seed gives RMSprop only",
                "one SUMO environment (32-step rollouts): libsumo runs one simulation per process, and the batch "
                "stays the seed's accumulation count of the weight-gradient stage",
                "precision 'mixed': every node in its planned unit's format (all fp32 here), so the plan's PL nodes "
                "run through the backend (the trunk through the MAC array's stages)",
                "the intersection: 250 m roads, approaches of three lanes (right+through, through, left), two-lane "
                "exits, 50 km/h; occupancy cells of 7.5 m (12 cells = 90 m from the stop line), the covered "
                "fraction per cell; the seed gives the 12x12 shape and four road blocks only",
                "an action = 5 s of clearance (or green extension) + its green of the table (module docstring); "
                "the episode an hour of traffic from one of four route sets (balanced, NS-heavy, EW-heavy, "
                "rush-hour ramp): 2400 veh/h, the ramp 1200 -> 3360 veh/h",
            ),
        )
    ]
