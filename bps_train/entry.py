"""The ``bps-train`` command's entry point: signal handlers before the heavy imports.

Importing torch and the trainer takes seconds; a SIGTERM then would kill the process by signal
(Python's default) with no message. This module installs, before that import, handlers that end
the process at once with exit status 130 and one line; the trainer installs its own
stop-after-this-update handlers while it trains, and its second signal ends the same way
(``stop_now``). Once the trainer returns, further signals are ignored, so a late
signal cannot turn the exit into a death by signal.

Stopping at once is ``os._exit``, not an exception: a KeyboardInterrupt raised at a random point
can leave a lock of the environment's threads held, and closing them then never returns. Every
file the trainer writes is renamed into place whole, so nothing half-written is left behind.
"""
from __future__ import annotations

import os
import signal
import sys

INTERRUPTED = 130


def stop_now(why: str) -> None:
    """Print ``bps-train: WHY`` and end the process with status 130 without unwinding."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    try:
        os.write(2, f"bps-train: {why}\n".encode())
    except OSError:
        pass
    os._exit(INTERRUPTED)


def _early(signum, frame):
    stop_now(f"stopped by {signal.Signals(signum).name} (before training began, or while closing); "
             "the last checkpoint (if any) is kept")


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
