"""An algorithm of your own: A2C's trainer with one more metric and a training graph with one more
node, registered from your code; a design then names it.

    python docs/examples/my_algorithm.py OUT_DIR
"""

import csv
import sys

from rlhls.designs import Dense, Design, NetSpec, Network, Tanh
from rlhls.designs.graph import build_graph, graph_builder
from rlhls.host.algorithms import Algorithm, register_algorithm
from rlhls.host.algorithms.a2c import A2C, A2CArgs, batch_size
from rlhls.host.train import train_design


class ClippedA2C(A2C):
    """A2C with a metric of its own in metrics.csv (here: the update count)."""

    def train_update(self, update, total_updates):
        row = super().train_update(update, total_updates)
        row["updates_done"] = update
        return row


def clipped_a2c_graph(bld, design, nets):
    graph_builder("a2c")(bld, design, nets)  # A2C's nodes and edges ...
    # ... and a node of its own: (name, kind, stage, FLOPs, bytes), after the returns
    bld.node("return_clip", "return_clip", "returns", 3 * bld.batch, 3 * bld.batch * bld.B)


register_algorithm(Algorithm("clipped_a2c", ClippedA2C, A2CArgs, batch_size,
                             summary="A2C with a clipped-return node", graph=clipped_a2c_graph))


def net(name, out):
    return lambda seed: Network(name, (4,), [Dense(16), Tanh(), Dense(out)], seed=seed)


design = Design(
    name="cartpole-clipped-a2c", seed_file="-", seed_title="a user's algorithm", algorithm="clipped_a2c",
    env_id="CartPole-v1", env_notes="Gymnasium classic control", obs_shape=(4,), action_dim=2,
    action_space="discrete",
    networks=(NetSpec("policy", "actor", net("policy", 2), optimizer="rmsprop"),
              NetSpec("value", "critic", net("value", 1), optimizer="rmsprop")),
    kernels=(), formats={"storage": "fp32", "acc": "fp32"}, device="zcu106", clocks_mhz={"PL": 200.0},
    batch_size=8, hyperparams={"num_envs": 2, "n_steps": 4, "rollouts_per_update": 1, "optimizer": "rmsprop"})

graph = build_graph(design)  # dispatched to the registered builder
print("graph:", len(graph.nodes), "nodes, with", [n.name for n in graph.nodes if n.name == "return_clip"])

out = sys.argv[1] if len(sys.argv) > 1 else "runs/clipped-a2c"
train_design(design, out=out, steps=32, progress=False)
with open(f"{out}/metrics.csv", newline="") as f:
    rows = list(csv.DictReader(f))
print("updates:", [(r["env_steps"], r["updates_done"]) for r in rows])
