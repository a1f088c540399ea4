"""A trained policy rolled out: ``eval``."""

from __future__ import annotations

from rlhls.host.hyperparams import MAX_EVAL_EPISODES

from .common import at_most, print_json, seed_int


def register(sub) -> None:
    s = sub.add_parser("eval", help="evaluate a run's trained policy (deterministic, its own environment)",
                       description="Roll out the trained policy of a run folder (rlhls train's, or rlhls run's) "
                                   "deterministically, as the run's own evaluation does (eval.csv): the mean and "
                                   "standard deviation of the episode returns and lengths. With --untrained, a "
                                   "design's policy before any training (an imported ONNX policy as it came).")
    s.add_argument("run", metavar="RUN", help="run folder (with config.json and checkpoint.npz); with --untrained a "
                                              "design: a registered name or a design file ./FILE.py[:NAME]")
    s.add_argument("--untrained", action="store_true",
                   help="evaluate the design RUN names before any training: its networks as a run of --seed starts "
                        "them (a network imported from ONNX: the file's weights)")
    s.add_argument("--design", metavar="FILE.py",
                   help="the design file of a run of a user's design (./FILE.py[:NAME]): a run folder never makes "
                        "rlhls import a file by itself; the file's sha256 must be the one the run recorded")
    s.add_argument("--episodes", type=at_most(MAX_EVAL_EPISODES), default=10,
                   help=f"episodes (default 10, at most {MAX_EVAL_EPISODES})")
    s.add_argument("--seed", type=seed_int,
                   help="evaluation seed (default: the run's seed, as its eval.csv; the episodes never repeat "
                        "a training episode); with --untrained also the networks' seed (default 0)")
    s.add_argument("--gif", metavar="FILE.gif",
                   help="write the first episode (at most 1000 frames) as an animated GIF")
    s.add_argument("--force", action="store_true", help="replace a --gif file that rlhls did not write")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_eval)


def cmd_eval(args) -> int:
    from pathlib import Path

    from rlhls.core.errors import RlhlsError
    from rlhls.core.fileio import check_file_out, image_ours
    from rlhls.core.procs import library_output
    from rlhls.host.evaluation import load, renders_rgb, untrained, write_gif

    if args.untrained and args.design:
        raise RlhlsError("--design: with --untrained the design is RUN itself (a registered name or ./FILE.py[:NAME])")
    gif = Path(args.gif) if args.gif else None
    if gif is not None and (gif.is_dir() or not gif.parent.is_dir()):
        raise RlhlsError(f"--gif '{gif}': " + ("it is a folder" if gif.is_dir() else
                                               f"folder '{gif.parent}' does not exist"))
    if gif is not None:  # before the policy is loaded and played: a GIF of rlhls' own is replaced, nothing else
        check_file_out(gif, ours=image_ours, force=args.force, what="--gif")
    with library_output(None):  # what the environments' libraries print (the ALE's banner, SDL)
        policy = (untrained(args.run, seed=args.seed or 0) if args.untrained
                  else load(args.run, design=args.design))
        if gif is not None and not renders_rgb(policy.env_id):
            raise RlhlsError(f"--gif: environment '{policy.env_id}' does not render rgb_array frames")
        frames: list | None = [] if gif is not None else None
        res = policy.evaluate(episodes=args.episodes, seed=args.seed, frames=frames)
    if gif is not None and frames is not None:
        import gymnasium as gym

        write_gif(frames, gif, gym.spec(policy.env_id).kwargs.get("render_fps")
                  or _fps(policy.env_id))
    res = {"run": str(policy.folder) if policy.folder else None, **({"design": policy.config["design"],
           "untrained": True} if args.untrained else {}), "env": policy.env_id, **res,
           **({"gif": str(gif)} if gif else {})}
    if args.json:
        print_json(res)
    else:
        print(("untrained " if args.untrained else "") +
              f"{res['episodes']} episodes of {policy.env_id} (seed {res['seed']}): return {res['mean_return']:.2f} "
              f"+- {res['std_return']:.2f}, length {res['mean_length']:.1f} +- {res['std_length']:.1f}"
              + (f" -> {gif}" if gif else ""))
    return 0


def _fps(env_id: str):
    from rlhls.host.envs import make_env

    env = make_env(env_id)
    try:
        return env.metadata.get("render_fps")
    finally:
        env.close()
