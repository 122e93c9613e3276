"""The typed errors survive the trip from a worker process to its parent (pickling), every
subclass with its own constructor arguments, and keep their attributes."""
from __future__ import annotations

import errno
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from bps_assets import errors as E


def _raise(kind: str):
    if kind == "write":
        raise E.OutputWriteError("/out/x.bin", "cannot write: No space left on device", errno=errno.ENOSPC)
    if kind == "corrupt":
        raise E.CorruptFileError("/in/x.bps", "CRC mismatch", section="indices")
    raise E.MissingDependencyError(None, "MP4 videos", "av")


@pytest.mark.parametrize("err", [
    E.OutputWriteError("/out/x.bin", "cannot write: No space left on device", errno=errno.ENOSPC),
    E.InputError("/in/a.glb", "not a glTF file"),
    E.CorruptFileError("/in/x.bps", "CRC mismatch", section="indices"),
    E.MissingDependencyError(None, "MP4 videos", "av"),
    E.ConfigError(None, "num_envs must be >= 1"),
])
def test_errors_pickle_with_their_message_and_attributes(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == str(err) and back.__dict__ == err.__dict__


def test_a_worker_processs_error_reaches_the_parent_typed():
    with ProcessPoolExecutor(1) as pool:
        for kind, cls in (("write", E.OutputWriteError), ("corrupt", E.CorruptFileError),
                          ("missing", E.MissingDependencyError)):
            with pytest.raises(cls) as got:
                pool.submit(_raise, kind).result()
            assert got.value.path in (None, "/out/x.bin", "/in/x.bps")
    assert got.value.exit_code == E.MissingDependencyError.exit_code


def test_a_full_disk_is_told_by_its_errno():
    from bps_train.checkpoint import _space_cause

    assert _space_cause(E.OutputWriteError("/o", "cannot write: x", errno=errno.ENOSPC)).startswith("no space left")
    assert "ulimit -f" in _space_cause(E.OutputWriteError("/o", "cannot write: x", errno=errno.EFBIG))
    assert _space_cause(E.OutputWriteError("/o", "cannot write: other")) == "cannot write: other"
