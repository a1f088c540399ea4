"""The shell: ``completion bash|zsh`` prints a completion script of every command and option (shtab)."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh")


def register(sub) -> None:
    s = sub.add_parser("completion", help="print a bash or zsh completion script of every command and option",
                       description="Print the shell completion script of rlhls (generated from its commands by "
                                   "shtab): commands, options, choices, experiment names, and a DESIGN's registered "
                                   "names or files. bash: `rlhls completion bash > "
                                   "~/.local/share/bash-completion/completions/rlhls`; zsh: `rlhls completion zsh > "
                                   "~/.zfunc/_rlhls` with ~/.zfunc on $fpath before compinit. Made again after "
                                   "installing plug-ins, it completes theirs too.")
    s.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    s.set_defaults(func=cmd_completion)


def cmd_completion(args) -> int:
    import shtab

    from rlhls.designs.registry import design_names

    parser = args.root_parser  # main's (the command line's parser: no import of the package back)
    names = design_names()
    preamble = {"bash": "_shtab_rlhls_design() {\n  compgen -W \"" + " ".join(names) + "\" -- \"$1\"\n"
                        "  compgen -f -- \"$1\"\n}\n",
                "zsh": ""}
    design = {"bash": "_shtab_rlhls_design", "zsh": "(" + " ".join(names) + ")"}
    for p in _parsers(parser):
        for a in p._actions:
            metavar = str(a.metavar or "")
            if a.option_strings and any(x in metavar for x in ("FILE", ".json", ".csv", ".yaml", ".png", "XPFM")):
                a.complete = shtab.FILE  # type: ignore[attr-defined]
            elif a.dest == "design" or "--design" in a.option_strings:
                a.complete = design  # type: ignore[attr-defined]
            elif a.option_strings and metavar.upper() in ("DIR", "RUN_FOLDER", "BUILD_DIR", "FLOW_DIR"):
                a.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    print(shtab.complete(parser, shell=args.shell, preamble=preamble[args.shell]), end="")
    return 0


def _parsers(parser):
    yield parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for p in a.choices.values():
                yield from _parsers(p)
