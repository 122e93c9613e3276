"""Path-valued command-line options read the same way by ``bps-assets`` (cli.main) and the
training script (bps_train.args): the one rule for ``--opt=~/x``."""
from __future__ import annotations

import os


def expand_option_tilde(token: str) -> str:
    """``--out=~/x`` with ``~`` expanded: the shell expands ``~`` only at a word's start, so the
    ``=`` form would otherwise make a folder named ``~`` in the working directory. Any other token
    is returned as it is."""
    opt, eq, value = token.partition("=")
    return f"{opt}={os.path.expanduser(value)}" if token.startswith("--") and eq and value.startswith("~") else token
