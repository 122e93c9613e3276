"""The ``bps-train`` command's entry point: signal handlers before the heavy imports.

Importing torch and the trainer takes seconds; a SIGTERM then would kill the process by signal
(Python's default) with no message. This module installs, before that import, handlers that turn
SIGINT / SIGTERM into KeyboardInterrupt (the trainer installs its own stop-after-this-update
handlers once it runs), and maps every interruption to exit status 130 with one line. Once the
trainer returns, further signals are ignored, so a late second Ctrl-C cannot turn the exit into
a death by signal.
"""
from __future__ import annotations

import signal
import sys

INTERRUPTED = 130


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    """Install the early handlers, import the trainer and run it; 130 on any interruption."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
    try:
        try:
            from bps_train.train import main as train_main

            code = train_main(argv)
        finally:  # leaving: a signal now must not end the process by signal
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)
    except KeyboardInterrupt:
        print("bps-train: interrupted before training began or while stopping; the last checkpoint "
              "(if any) is kept", file=sys.stderr, flush=True)
        return INTERRUPTED
    return code


if __name__ == "__main__":
    sys.exit(main())
