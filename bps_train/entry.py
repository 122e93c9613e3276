"""The ``bps-train`` command's entry point: signal handlers before the heavy imports.

Importing torch and the trainer takes seconds; a SIGTERM then would kill the process by signal
(Python's default) with no message. This module installs, before that import, handlers that end
the process at once with exit status 130 and one line; the trainer installs its own
stop-after-this-update handlers while it trains, and its second signal ends the same way
(``stop_now``). Once the trainer returns, further signals are ignored, so a late
signal cannot turn the exit into a death by signal (``python -m bps_train.train`` has no
early handlers).
"""
from __future__ import annotations

import signal
import sys

from bps_train.stop import stop_now


def _early(signum, frame):
    stop_now(f"stopped by {signal.Signals(signum).name}; the last checkpoint (if any) is kept")


def main(argv=None) -> int:
    """Install the early handlers, import the trainer and run it."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _early)
    try:
        from bps_train.train import main as train_main

        return train_main(argv)
    finally:  # leaving: a signal now must not end the process by signal
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
