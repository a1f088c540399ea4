"""A run's trained policy as ONNX: ``rlhls export RUN --onnx FILE``.

``export_run_onnx(run, out, design=None, force=False)`` loads the run folder as ``rlhls eval`` does
(``evaluation.load``: the run bound as it trained, its checkpoint checked against its config.json; a
run of a user's design file only with that file given again, its sha256 the recorded one), takes its
policy network from the checkpoint (``flow.build.policy_network``: DQN's Q-network, DDPG's actor, the
policy of PPO / A2C / TRPO) and writes it as float32 ONNX (``designs.onnx_export``: opset 17, IR 10,
atomically: ``flow.onnx_file.write_onnx``). onnxruntime runs it to the run's own FP32 acting forward
(``mixed.ps_forward``, on the PS whatever the plan: AP-DRL Fig. 10) to float32 rounding.

The file holds the float network, the weights as the run keeps them (its FP32 masters; BF16 values
where an AIE node kept them so). A run that trained in mixed precision (``precision mixed``: F-DDPG's
fixed point, AP-DRL's FP16 / BF16) computed its forward nodes in its units' formats: they are noted in
the model's metadata (``rlhls.formats``: {plan node: "UNIT storage / accumulator"}), not applied. Its
metadata also says what the input and the output are (``rlhls.input``, ``rlhls.output``: Atari frames
are read as x / 255, DDPG's tanh output is scaled to the action box by rlhls) and where it comes from
(``rlhls.design``, ``rlhls.algorithm``, ``rlhls.env``, ``rlhls.network``, ``rlhls.precision``).

A network imported from ONNX (``designs.onnx_import``) goes out in the layout it came in: the graph's
name, its input and output names and dims as the file wrote them (a fixed batch of 1 stays 1), a
leading flatten of a multi-axis input and an output written without its batch axis as Reshapes;
otherwise the input is 'input' (N, *shape) and the output 'output' (N, *shape). The layers are in
the network's order (the importer's folds, BatchNorm into its Gemm, are kept folded); a QONNX file's
Quant nodes go out as Quant nodes, on the data path and on the quantized weights (qonnx runs them,
onnxruntime does not).

The output file is checked before the run is loaded: an existing file is never replaced without
``force`` (rlhls cannot tell a user's model from its own), and its folder must exist and be writable.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from rlhls.core.errors import RlhlsError

__all__ = ["export_run_onnx", "onnx_model"]


def export_run_onnx(run, out, *, design=None, force: bool = False, log=None) -> dict:
    """Write the trained policy network of run folder `run` to `out` (module docstring); returns what
    was written: {run, onnx, design, algorithm, env, network, layers, input, output, formats}. `design`:
    the design file (``FILE.py[:NAME]``) of a run of a user's design. `log`: a file that takes what the
    environments' libraries print while the run is loaded (None: discarded)."""
    from rlhls.core.fileio import check_file_out, path_arg
    from rlhls.flow.onnx_file import write_onnx

    out = path_arg(out, "export", "onnx")
    check_file_out(out, force=force, what="--onnx")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise RlhlsError(f"--onnx '{out}': folder '{folder}' does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RlhlsError(f"--onnx '{out}': folder '{folder}' is not writable")
    net, policy, bound = _run_policy(path_arg(run, "export", "run"), design, log)
    formats = _formats(bound, policy.config, net)
    model = onnx_model(net, _metadata(bound, policy, net, formats))
    write_onnx(model, out)
    g = model.graph
    return {"run": str(policy.folder), "onnx": str(out), "design": bound.design.name,
            "algorithm": bound.design.algorithm, "env": policy.env_id, "network": net.name,
            "layers": [n.op_type for n in g.node],
            "input": {"name": g.input[0].name, "dims": _dims(g.input[0])},
            "output": {"name": g.output[0].name, "dims": _dims(g.output[0])},
            "formats": formats or None}


def _run_policy(run: Path, design, log):
    """(the policy network with the checkpoint's weights, the run's Policy, its BoundRun)."""
    from rlhls.flow.build import policy_network

    from .bound import bind_recorded
    from .checkpoint import load_checkpoint
    from .evaluation import load
    from .runfolder import CHECKPOINT

    policy = load(run, design=design, log=log)  # every check of the folder, the checkpoint and the binding
    folder = policy.folder
    assert folder is not None  # a run's policy
    bound = bind_recorded(policy.config, given=design, where=f"run folder '{folder}'")
    try:
        state = load_checkpoint(folder / CHECKPOINT)["trainer"]
        net = policy_network(bound.design, state)
    except RlhlsError:
        raise
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, EOFError, zipfile.BadZipFile) as e:
        raise RlhlsError(f"run folder '{folder}': its checkpoint's weights do not fit design '{bound.design.name}''s "
                         f"policy network ({type(e).__name__}: {str(e)[:120]})") from None
    bad = next((f"{l.name}.{k}" for l in net.layers for k, a in l.params.items()
                if not np.all(np.isfinite(np.asarray(a, dtype=np.float64)))), None)
    if bad is not None:
        raise RlhlsError(f"run folder '{folder}': weight '{bad}' of its policy is not finite (NaN or infinite: the "
                         "training diverged); nothing to export")
    return net, policy, bound


def _formats(bound, cfg: dict, net) -> dict:
    """{plan node: "UNIT storage / acc"} of the policy's forward nodes where the run trained in mixed
    precision ({} otherwise: every node in FP32 on the PS, or PPO's float64 path)."""
    from rlhls.flow.build import policy_specs

    from .mixed import unit_precisions

    plan = cfg.get("plan")
    if bound.hyperparams.get("precision") != "mixed" or not isinstance(plan, dict):
        return {}
    prec = unit_precisions(bound.design)
    fresh = bound.design.build_networks(0)
    out = {}
    for spec in policy_specs(bound.design):
        for layer in fresh[spec.name].layers:
            node = f"{spec.name}.{layer.name}.fwd"
            unit = plan.get(node)
            if unit in prec:  # a Flatten has no node: it moves data, in no format
                out[node] = f"{unit} {prec[unit].storage} / {prec[unit].acc}"
    return out


def _metadata(bound, policy, net, formats: dict) -> dict:
    """The model's metadata_props (module docstring)."""
    d, alg = bound.design, bound.design.algorithm
    space = policy.observation_space
    frames = np.dtype(space.dtype) == np.uint8 and len(space.shape) == 3
    normalized = bool(bound.hyperparams.get("obs_norm")) and not frames
    inp = ("observations / 255 (the environment's uint8 frames, as the run's network reads them)" if frames else
           "observations normalized by the run's running mean and variance (obs_norm; kept in its checkpoint, not "
           "here)" if normalized else "the environment's observations, as they are")
    act = policy.action_space
    if alg == "dqn":
        outp = "Q-values, one per action (the greedy action is their argmax)"
    elif alg in ("ddpg", "td3"):
        low, high = np.asarray(act.low, dtype=np.float64), np.asarray(act.high, dtype=np.float64)
        outp = (f"the actor's tanh output in [-1, 1]; rlhls acts with output * {((high - low) / 2).tolist()} + "
                f"{((high + low) / 2).tolist()} (the action box), clipped to the box")
    elif alg == "sac":
        low, high = np.asarray(act.low, dtype=np.float64), np.asarray(act.high, dtype=np.float64)
        outp = (f"the squashed Gaussian's mean and log_std ({act.shape[0]} each); rlhls acts deterministically with "
                f"tanh(mean) * {((high - low) / 2).tolist()} + {((high + low) / 2).tolist()} (the action box)")
    elif hasattr(act, "n"):
        outp = ("the policy's action logits (or probabilities, its last layer says which); the greedy action is "
                "their argmax")
    else:
        outp = "the Gaussian policy's mean action (its deterministic action), clipped to the action box"
    meta = {"rlhls.design": d.name, "rlhls.algorithm": alg, "rlhls.env": policy.env_id, "rlhls.network": net.name,
            "rlhls.precision": str(bound.hyperparams.get("precision", "fp64")), "rlhls.input": inp,
            "rlhls.output": outp}
    if formats:
        meta["rlhls.formats"] = json.dumps(formats)
    return meta


def onnx_model(net, metadata: dict | None = None):
    """The float32 ONNX model of `net` (``Network.to_onnx``), in the layout of the file it was imported
    from where it was (``Network.onnx_io``), `metadata` as its metadata_props; checked by onnx."""
    import onnx
    from onnx import helper

    model = net.to_onnx(quant_params=net.onnx_io is not None)  # a QONNX file's quantized weights as they came
    if net.onnx_io is not None:
        _in_layout(model, net, net.onnx_io)
    if metadata:
        helper.set_model_props(model, {str(k): str(v) for k, v in metadata.items()})
        model.doc_string = (f"rlhls: the trained network '{net.name}' of design '{metadata.get('rlhls.design')}' "
                            f"({metadata.get('rlhls.algorithm')} on {metadata.get('rlhls.env')}); input: "
                            f"{metadata.get('rlhls.input')}; output: {metadata.get('rlhls.output')}")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # a layout the network cannot take (the import accepted it: not expected)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RlhlsError(f"network '{net.name}': its ONNX model does not check ({first[:200]})") from None
    return model


def _in_layout(model, net, io: dict) -> None:
    """Rename and reshape export_onnx's model ('input' (N, *in), 'output' (N, *out)) to `io`: the graph
    name, input and output of the file the network was imported from."""
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    x, y = str(io["input"]), str(io["output"])
    for want in (x, y):  # a name of the file's that one of our tensors holds: ours moves aside
        if want not in ("input", "output") and want in _names(g):
            _rename(g, want, _free(g, want))
    _rename(g, "input", x)
    _rename(g, "output", y)
    in_dims, out_dims = list(io["input_dims"]), list(io["output_dims"])
    if in_dims[1:] != list(net.input_shape):  # the file flattened its input first: a Reshape again
        inner = _free(g, f"{x}_reshaped")
        shape = _free(g, "input_shape")
        for n in g.node:
            n.input[:] = [inner if i == x else i for i in n.input]
        g.initializer.append(numpy_helper.from_array(np.array([-1, *net.input_shape], dtype=np.int64), shape))
        g.node.insert(0, helper.make_node("Reshape", [x, shape], [inner], name=_free(g, "input_reshape")))
    if out_dims[1:] != list(net.output_shape):  # written without its batch axis (x.flatten()): a Reshape again
        inner = _free(g, f"{y}_unshaped")
        shape = _free(g, "output_shape")
        for n in g.node:
            n.output[:] = [inner if o == y else o for o in n.output]
        dims = [d if isinstance(d, int) and d > 0 else -1 for d in out_dims]
        g.initializer.append(numpy_helper.from_array(np.array(dims, dtype=np.int64), shape))
        g.node.append(helper.make_node("Reshape", [inner, shape], [y], name=_free(g, "output_reshape")))
    del g.input[:]
    del g.output[:]
    g.input.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, in_dims))
    g.output.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, out_dims))
    if io.get("graph"):
        g.name = str(io["graph"])


def _names(g) -> set:
    return ({t.name for t in g.initializer} | {o for n in g.node for o in n.output} | {n.name for n in g.node}
            | {v.name for v in (*g.input, *g.output)})


def _free(g, name: str) -> str:
    """`name`, or `name`_1, _2, ...: the first no tensor or node of `g` has."""
    taken, i, out = _names(g), 0, name
    while out in taken:
        i += 1
        out = f"{name}_{i}"
    return out


def _rename(g, old: str, new: str) -> None:
    """Tensor `old` of `g` (a node's input or output, an initializer, a graph input or output) is `new`."""
    if old == new:
        return
    for n in g.node:
        n.input[:] = [new if i == old else i for i in n.input]
        n.output[:] = [new if o == old else o for o in n.output]
    for t in g.initializer:
        if t.name == old:
            t.name = new
    for v in (*g.input, *g.output):
        if v.name == old:
            v.name = new


def _dims(v) -> list:
    return [d.dim_param if d.HasField("dim_param") else int(d.dim_value) if d.HasField("dim_value") else None
            for d in v.type.tensor_type.shape.dim]
