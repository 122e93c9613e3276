"""bps-train's output folder and checkpoints under careless use: one run per OUT_DIR (a lock
that survives kill -9), every checkpoint field checked (whole-payload checksum, counter ranges,
RNG states, weights that do not fit) with one line per failure."""
from __future__ import annotations

import math
import re
import os
import signal
import subprocess
import sys

import pytest
import torch


HOLD = """
import sys, time
from bps_train import run_lock
lock = run_lock.hold(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def _holder(folder):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def _cli(args):
    return subprocess.run([sys.executable, "-m", "bps_train.train", *args], capture_output=True, text=True,
                          timeout=300)


def test_a_second_run_on_a_held_folder_refuses_naming_the_holder(tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    out = tmp_path / "run"
    out.mkdir()
    p = _holder(out)
    try:
        r = _cli(["--dataset", str(manifest), "--out-dir", str(out)])
        assert r.returncode == 2 and "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {p.pid}" in lines[0] and str(out) in lines[0], lines
        # --eval writes its own files: a training run holding OUT_DIR does not stop it
        r = _cli(["--dataset", str(manifest), "--out-dir", str(out), "--eval", "random", "--video", "1"])
        assert "another bps-train run" not in r.stderr
    finally:
        p.kill()
        p.wait()


def test_a_lock_left_by_kill_9_is_taken_over_with_one_line(tmp_path):
    from bps_train import run_lock

    p = _holder(tmp_path)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    said = []
    lock = run_lock.hold(tmp_path, log=said.append)
    assert len(said) == 1 and f"pid {p.pid}" in said[0] and "taking over" in said[0]
    assert (tmp_path / run_lock.TRAIN).read_text().strip() == str(os.getpid())
    lock.release()
    said.clear()
    run_lock.hold(tmp_path, log=said.append).release()   # released cleanly: nothing to say
    assert said == []


def test_a_run_stopped_at_once_releases_its_lock(tmp_path):
    """stop_now (SIGTERM during setup, a second Ctrl-C) ends with os._exit, which skips the
    lock's release: it releases the run's locks first, so the next run does not call a run
    that exited cleanly (130) one that "ended without releasing" the lock (journey f finding 9)."""
    from bps_train import run_lock

    code = HOLD.replace("time.sleep(120)", "from bps_train.stop import stop_now; stop_now('stopped by SIGTERM')")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 130 and "stopped by SIGTERM" in r.stderr, r.stderr
    assert (tmp_path / run_lock.TRAIN).read_text() == ""
    said = []
    run_lock.hold(tmp_path, log=said.append).release()
    assert said == []


def test_a_forked_child_stopping_leaves_its_parents_lock_alone(tmp_path):
    """release_held in a forked child (a worker given the run's signal handlers) must not empty
    the lock file of the parent, which still runs and holds it."""
    from bps_assets.pipeline.run_lock import release_held
    from bps_train import run_lock

    lock = run_lock.hold(tmp_path)
    try:
        pid = os.fork()
        if pid == 0:
            release_held()
            os._exit(0)
        os.waitpid(pid, 0)
        assert (tmp_path / run_lock.TRAIN).read_text().strip() == str(os.getpid())
    finally:
        lock.release()


def _state(**kw):
    from bps_train import checkpoint

    policy = {"w": torch.full((4, 4), 0.5), "b": torch.zeros(4)}
    s = {"policy": policy, "optimizer": {"state": {}, "param_groups": []}, "update": 2, "global_step": 64,
         "seconds": 3.0, "world": 1, "args": {}, "identity": {}, "rng": [checkpoint.rng_state()]}
    s.update(kw)
    return s


def _resave(path, edit):
    """Edit a saved checkpoint's payload and store it again with a valid checksum."""
    from bps_train import checkpoint

    ckpt = torch.load(path, weights_only=True)
    edit(ckpt)
    ckpt["checksum"] = checkpoint.payload_checksum(ckpt)
    torch.save(ckpt, path)


def test_a_flipped_rng_byte_is_caught_by_the_payload_checksum(tmp_path):
    from bps_assets.errors import CorruptFileError
    from bps_train import checkpoint

    path = tmp_path / "c.pt"
    checkpoint.save(path, _state())
    ckpt = torch.load(path, weights_only=True)
    ckpt["rng"][0]["numpy"]["keys"][7] ^= 1   # the RNG state sits outside the tensors of the weights
    torch.save(ckpt, path)
    with pytest.raises(CorruptFileError, match="checksum does not match"):
        checkpoint.load(path)


@pytest.mark.parametrize("edit,msg", [
    (lambda c: c.update(update=10**12, global_step=10**12 * 32), "'update' = 1000000000000 is out of range"),
    (lambda c: c.update(update=-5), "'update' = -5 is out of range"),
    (lambda c: c.update(global_step=2**60), "'global_step'"),
    (lambda c: c.update(update=100, global_step=64), "100 updates but only 64 frames"),
    (lambda c: c.update(seconds=math.nan), "'seconds' = nan"),
    (lambda c: c.update(world=0), "'world' = 0"),
    (lambda c: c["rng"][0].update(torch=torch.zeros(17, dtype=torch.uint8)), "RNG state of rank 0: torch state"),
    (lambda c: c["rng"][0]["numpy"].update(pos=9999), "numpy state pos"),
    (lambda c: c["rng"][0]["python"]["internal"].pop(), "python state"),
])
def test_checkpoint_fields_out_of_range_are_one_line(tmp_path, edit, msg):
    from bps_assets.errors import CorruptFileError
    from bps_train import checkpoint

    path = tmp_path / "c.pt"
    checkpoint.save(path, _state())
    _resave(path, edit)
    with pytest.raises(CorruptFileError, match=msg.replace("(", r"\(").replace("[", r"\[")) as e:
        checkpoint.load(path)
    assert len(str(e.value).splitlines()) == 1 and str(path) in str(e.value)


@pytest.mark.parametrize("edit", [
    lambda c: c["policy"].update(w=torch.zeros(3, 3)),            # wrong shape
    lambda c: c["policy"].update(extra=torch.zeros(1)),           # a key the policy lacks
])
def test_weights_that_do_not_fit_are_one_line(tmp_path, edit):
    from bps_assets.errors import CorruptFileError
    from bps_train import checkpoint

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(4, 4))
            self.b = torch.nn.Parameter(torch.zeros(4))

    path = tmp_path / "c.pt"
    checkpoint.save(path, _state())
    _resave(path, edit)
    ckpt = checkpoint.load(path)
    with pytest.raises(CorruptFileError, match="weights do not fit") as e:
        checkpoint.restore(path, ckpt, Tiny())
    assert len(str(e.value).splitlines()) == 1
    good = tmp_path / "good.pt"
    checkpoint.save(good, _state())
    checkpoint.restore(good, checkpoint.load(good), Tiny())   # the unedited one fits


def test_a_saved_checkpoint_round_trips_and_its_rng_states_set(tmp_path):
    from bps_train import checkpoint

    path = tmp_path / "c.pt"
    checkpoint.save(path, _state())
    ckpt = checkpoint.load(path)
    assert ckpt["version"] == checkpoint.VERSION and ckpt["update"] == 2
    checkpoint.set_rng_state(ckpt["rng"][0])
    a = torch.rand(3)
    checkpoint.set_rng_state(ckpt["rng"][0])
    assert torch.equal(a, torch.rand(3))



def test_eval_video_count_is_capped_at_the_episodes_evaluated(dataset, tmp_path, capsys):
    from bps_train.train import run

    out = tmp_path / "run"
    res = run(["--dataset", str(dataset), "--out-dir", str(out), "--eval", "random", "--eval-episodes", "2",
               "--video", "5", "--video-format", "png", "--resolution", "32", "--threads", "1"])
    assert res["episodes"] == 2 and len(res["videos"]) == 2
    err = capsys.readouterr().err
    assert "--video 5 capped at the 2 episode(s) evaluated" in err


def test_step_counters_share_one_range_check():
    """LAMB's per-tensor ``step`` and the checkpoint's ``global_step`` are checked by one helper
    (``checkpoint.int_in`` over 0..``MAX_STEP`` = 2^53): the same values pass and fail."""
    from bps_train import checkpoint
    from bps_train.lamb import Lamb

    p = torch.zeros(2)
    for step, ok in ((0, True), (2**53, True), (2**53 + 1, False), (-1, False), (True, False), (3.0, False)):
        st = {"step": step, "m": torch.zeros(2), "v": torch.zeros(2)}
        assert (Lamb.state_problem(p, st) is None) == ok == checkpoint.int_in(step, 0, checkpoint.MAX_STEP), step
        assert ok or Lamb.state_problem(p, st) == f"step = {step!r}"
    assert checkpoint.MAX_STEP == 2**53
    from bps_train import counters
    assert (checkpoint.int_in, checkpoint.MAX_STEP) == (counters.int_in, counters.MAX_STEP)


def test_the_optimizer_does_not_import_the_checkpoint():
    """The checkpoint holds the optimizer's state, not the other way round: the counters' range
    check both use lives in bps_train.counters (before: lamb imported it from checkpoint)."""
    from test_layering import import_graph

    graph = import_graph()
    assert "bps_train.checkpoint" not in graph["bps_train.lamb"], graph["bps_train.lamb"]
    assert "bps_train.counters" in graph["bps_train.lamb"] & graph["bps_train.checkpoint"]


def test_optimizer_moments_of_another_shape_are_one_line(tmp_path):
    from bps_assets.errors import CorruptFileError
    from bps_train import checkpoint
    from bps_train.lamb import Lamb

    model = torch.nn.Linear(4, 2)
    opt = Lamb(model.parameters(), lr=1e-3)
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    path = tmp_path / "c.pt"
    checkpoint.save(path, _state(policy=model.state_dict(), optimizer=opt.state_dict()))
    fresh = torch.nn.Linear(4, 2)
    checkpoint.restore(path, checkpoint.load(path), fresh, Lamb(fresh.parameters(), lr=1e-3))

    def shrink(c):
        st = c["optimizer"]["state"][0]
        key = next(k for k, v in st.items() if isinstance(v, torch.Tensor) and v.dim())
        st[key] = st[key][:1]
    _resave(path, shrink)
    with pytest.raises(CorruptFileError, match=r"optimizer state: [mv] is not a torch.float32 tensor of shape \(2, 4\)"):
        checkpoint.restore(path, checkpoint.load(path), fresh, Lamb(fresh.parameters(), lr=1e-3))


@pytest.mark.parametrize("edit,msg", [
    (lambda g: g.update(lr=math.nan), "optimizer settings: lr = nan outside"),
    (lambda g: g.update(weight_decay=1e308), "optimizer settings: weight_decay = 1e+308 outside"),
    (lambda g: g.update(betas=(0.9,)), "optimizer settings: betas = (0.9,)"),
    (lambda g: g.pop("eps"), "optimizer settings: settings ["),
])
def test_optimizer_settings_that_would_fail_the_first_step_are_one_line(tmp_path, edit, msg):
    from bps_assets.errors import CorruptFileError
    from bps_train import checkpoint
    from bps_train.lamb import Lamb

    model = torch.nn.Linear(4, 2)
    opt = Lamb(model.parameters(), lr=1e-3)
    path = tmp_path / "c.pt"
    checkpoint.save(path, _state(policy=model.state_dict(), optimizer=opt.state_dict()))
    _resave(path, lambda c: edit(c["optimizer"]["param_groups"][0]))
    fresh = torch.nn.Linear(4, 2)
    with pytest.raises(CorruptFileError, match=re.escape(msg)):
        checkpoint.restore(path, checkpoint.load(path), fresh, Lamb(fresh.parameters(), lr=1e-3))


def test_a_truncated_checkpoint_is_refused_in_whole_sentences_with_the_way_out(tmp_path):
    """A checkpoint.pt cut short: one message naming the file, torch's cause as a whole
    sentence (it was cut mid-sentence at 200 characters: '... that your checkpoint file is'),
    and the way out (another checkpoint, or --no-resume) (journey f finding 10)."""
    from bps_assets.errors import CorruptFileError
    from bps_train import checkpoint

    state = {"policy": {"w": torch.ones(200_000)}, "optimizer": {}, "update": 1, "global_step": 8,
             "seconds": 1.0, "world": 1, "args": {}, "identity": {}, "rng": [checkpoint.rng_state()]}
    p = tmp_path / "checkpoint.pt"
    checkpoint.save(p, state)
    os.truncate(p, p.stat().st_size // 2)
    with pytest.raises(CorruptFileError) as e:
        checkpoint.load(p)
    msg = str(e.value)
    assert str(p) in msg and "not a readable checkpoint (" in msg and "--no-resume" in msg, msg
    cause = msg.split("(", 1)[1].split(")", 1)[0]
    assert cause and not cause.endswith((" is", " the", " a")) and "checkpoint file is" not in cause, cause
