"""bps_train pieces checked by hand: LAMB's trust ratio, Fixup's identity at init, GAE, the Args
parser, and the double-buffered rollout loop against a scripted environment."""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path
from collections import deque

import pytest
import torch

from bps_train.args import parse
from bps_train.lamb import Lamb
from bps_train.models import FixupSEBlock, Policy
from bps_train.ppo import Rollout, gae, ppo_loss
from bps_train.train import Args, collect_rollout, start_rollouts


# ----------------------------------------------------------------------------------- LAMB
def test_lamb_first_step_matches_hand_computation():
    w0 = torch.tensor([[1.0, 2.0], [2.0, 0.0]])
    g = torch.tensor([[0.5, -1.0], [0.0, 2.0]])
    p = torch.nn.Parameter(w0.clone())
    opt = Lamb([p], lr=0.1, weight_decay=0.5, min_trust=0.01, eps=1e-6)
    p.grad = g.clone()
    opt.step()
    # step 1: bias-corrected m = g, v = g^2 -> adam direction g / (|g| + eps) = sign(g) (0 where g = 0)
    adam = torch.tensor([[0.5 / (0.5 + 1e-6), -1.0 / (1.0 + 1e-6)], [0.0, 2.0 / (2.0 + 1e-6)]])
    u = adam + 0.5 * w0                          # + weight decay: [[1.5, 0], [1, 1]]
    trust = 3.0 / u.norm()                       # ||w0|| = sqrt(1 + 4 + 4) = 3; ||u|| = sqrt(4.25)
    assert trust.item() == pytest.approx(3 / 4.25 ** 0.5, rel=1e-5)
    torch.testing.assert_close(p.detach(), w0 - 0.1 * trust * u)


def test_lamb_trust_ratio_clamped_below_and_zero_weights_use_one():
    tiny = torch.nn.Parameter(torch.full((2, 2), 1e-6))
    zero = torch.nn.Parameter(torch.zeros(3))
    opt = Lamb([tiny, zero], lr=1.0, weight_decay=0.0, min_trust=0.01)
    tiny.grad = torch.ones(2, 2)
    zero.grad = torch.tensor([1.0, -1.0, 0.0])
    opt.step()
    # ||w|| / ||u|| = 1e-6 / 2 < 0.01: clamped to the minimum trust ratio
    torch.testing.assert_close(tiny.detach(), torch.full((2, 2), 1e-6) - 0.01 * torch.ones(2, 2), atol=1e-6, rtol=0)
    # a zero tensor (Fixup's zero-initialized layers) moves with ratio 1, and 1-d tensors get no decay
    torch.testing.assert_close(zero.detach(), -torch.tensor([1.0, -1.0, 0.0]), atol=1e-5, rtol=0)


def test_lamb_state_dict_roundtrip_continues_identically():
    torch.manual_seed(0)
    a = torch.nn.Linear(3, 2)
    b = torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    oa, ob = Lamb(a.parameters(), lr=0.01), Lamb(b.parameters(), lr=0.01)
    x = torch.randn(5, 3)
    for opt, m in ((oa, a), (ob, b)):
        m(x).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    ob2 = Lamb(b.parameters(), lr=0.01)
    ob2.load_state_dict(ob.state_dict())
    for opt, m in ((oa, a), (ob2, b)):
        m(x).pow(2).sum().backward()
        opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


# ----------------------------------------------------------------------------------- Fixup
def test_fixup_block_is_identity_plus_shortcut_at_init():
    torch.manual_seed(0)
    x = torch.rand(2, 8, 6, 6)  # non-negative, like the previous block's ReLU output
    same = FixupSEBlock(8, 8, stride=1, num_blocks=4)
    assert torch.count_nonzero(same.conv2.weight) == 0
    with torch.no_grad():
        torch.testing.assert_close(same(x), x, rtol=0, atol=0)
        down = FixupSEBlock(8, 16, stride=2, num_blocks=4)
        # the block subsamples then runs a stride-1 1x1 conv (models.py): another kernel, float rounding
        torch.testing.assert_close(down(x), torch.relu(down.shortcut(x)), rtol=1e-5, atol=1e-6)
    # the branch is not dead: the zero layer gets a gradient
    same(x).sum().backward()
    assert same.conv2.weight.grad.abs().sum() > 0


def test_policy_shapes_and_episode_start_resets_state():
    torch.manual_seed(0)
    pol = Policy(1, hidden=32, width=4)
    n = 3
    vis, goal = torch.rand(n, 64, 64, 1), torch.rand(n, 2)
    prev = torch.tensor([-1, 0, 3])
    h = (torch.randn(1, n, 32), torch.randn(1, n, 32))
    logits, v, (h2, c2) = pol(vis, goal, prev, h, torch.tensor([False, True, True]))
    assert logits.shape == (n, 4) and v.shape == (n,) and h2.shape == (1, n, 32)
    _, v0, _ = pol(vis, goal, prev, pol.initial_state(n), torch.ones(n, dtype=torch.bool))
    assert v[0] == v0[0] and v[1] != v0[1]  # env 0 started an episode: its old state is ignored


# ----------------------------------------------------------------------------------- GAE
def test_gae_matches_hand_computation():
    ro = Rollout.empty(3, 1, (1, 1, 1), torch.float32, 4, "cpu")
    ro.rewards[:, 0] = torch.tensor([1.0, 0.0, 2.0])
    ro.values[:, 0] = torch.tensor([0.5, 0.4, 0.3, 0.2])
    ro.not_done[:, 0] = torch.tensor([True, True, False, True])  # the episode ends with step 1's action
    adv, ret = gae(ro, gamma=0.9, lam=0.8)
    # t=2: 2 + .9*.2 - .3 = 1.88; t=1: 0 - .4 = -.4 (cut); t=0: 1 + .9*.4 - .5 + .9*.8*(-.4) = .572
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.572, -0.4, 1.88]))
    torch.testing.assert_close(ret[:, 0], torch.tensor([1.072, 0.0, 2.18]))


def test_ranks_normalise_advantages_as_one_process_with_all_of_them(tmp_path):
    """With 2 gloo ranks, ``normalized_advantages`` uses the mean and unbiased std of both ranks'
    advantages together: each rank's half equals the same rows of one process's normalisation
    of the whole (per rank, as before, it would not)."""
    script = tmp_path / "norm.py"
    script.write_text(
        "import torch, torch.distributed as dist\n"
        "from bps_train.ppo import normalized_advantages\n"
        "dist.init_process_group('gloo'); r = dist.get_rank()\n"
        "a = torch.randn(8, 6, generator=torch.Generator().manual_seed(0)) * 3 + 1\n"
        "a[:, 3:] += 5   # the ranks' halves differ in mean: per-rank normalisation would differ\n"
        "whole = normalized_advantages(a)\n"
        "mine = normalized_advantages(a[:, 3 * r:3 * r + 3].contiguous(), 2)\n"
        "own = normalized_advantages(a[:, 3 * r:3 * r + 3].contiguous())\n"
        "torch.testing.assert_close(mine, whole[:, 3 * r:3 * r + 3], rtol=1e-5, atol=1e-5)\n"
        "assert not torch.allclose(own, whole[:, 3 * r:3 * r + 3], atol=1e-2)\n"
        "dist.destroy_process_group(); print('rank', r, 'ok', flush=True)\n"
        "import os; os._exit(0)   # the teardown abort train.main avoids the same way\n")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        str(script)], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0 and r.stdout.count(" ok") == 2, r.stdout[-2000:] + r.stderr[-3000:]


def test_ppo_loss_normalizes_advantages_and_is_finite():
    torch.manual_seed(0)
    pol = Policy(1, hidden=16, width=4, resolution=(16, 16))
    ro = Rollout.empty(4, 2, (16, 16, 1), torch.float32, 16, "cpu")
    ro.visual.uniform_()
    ro.not_done.fill_(True)
    adv = torch.randn(4, 2) * 100 + 50
    loss, m = ppo_loss(pol, ro, torch.arange(2), adv, torch.zeros(4, 2), 0.2, 0.5, 0.01)
    assert torch.isfinite(loss)
    # ratio == 1 at the data's own log-probs? not here (logp=0), but the normalized advantages make
    # the clipped objective's scale independent of adv's scale:
    loss2, m2 = ppo_loss(pol, ro, torch.arange(2), adv * 10 + 3, torch.zeros(4, 2), 0.2, 0.5, 0.01)
    assert m["policy_loss"].item() == pytest.approx(m2["policy_loss"].item(), rel=1e-3)


# ----------------------------------------------------------------------------------- Args
def test_args_parse_types_and_defaults():
    a = parse(Args, ["--num-envs", "8", "--double-buffer", "false", "--lr", "1e-3", "--sensor", "rgb"])
    assert a.num_envs == 8 and a.double_buffer is False and a.lr == 1e-3 and a.sensor == "rgb"
    # --double-buffer: auto (None, the default: train.double_buffered's rule), or a boolean that decides
    assert parse(Args, []).double_buffer is None and parse(Args, ["--double-buffer", "auto"]).double_buffer is None
    assert parse(Args, ["--double-buffer"]).double_buffer is True
    assert parse(Args, ["--double-buffer", "TRUE"]).double_buffer is True
    assert parse(Args, ["--no-double-buffer"]).double_buffer is False
    assert a.rollout_steps == 32 and a.epochs == 1 and a.minibatches == 2 and a.max_grad_norm == 1.0
    assert a.min_trust == 0.01 and a.weight_decay == 1e-2 and a.lr == 1e-3
    assert parse(Args, ["--resume"]).resume is True
    with pytest.raises(SystemExit):
        parse(Args, ["--num-envs", "many"])


def test_help_shows_every_field_with_its_doc():
    out = subprocess.run([sys.executable, "-m", "bps_train.train", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    # the description is the docstring's first paragraph, not its first line (cut mid-list)
    assert "(PointNav, ObjectNav, ImageNav, InstanceImageNav), read top to bottom." in text
    for f in Args.__dataclass_fields__.values():
        assert "--" + f.name.replace("_", "-") in text
        assert " ".join(f.metadata["doc"].split()[:4]) in text, f.name


# ----------------------------------------------------------------------------------- rollout loop
class ScriptedEnv:
    """The runtime's send/recv contract, scripted: env e's k-th step returns reward k + e/1000,
    episodes last 5 steps, pointgoal = (steps taken, e). Records the call order."""

    def __init__(self, num_envs=4, batch_size=2):
        self.num_envs, self.batch_size, self.device = num_envs, batch_size, torch.device("cpu")
        self.count = torch.zeros(num_envs)
        self.calls, self.queue, self.in_flight = [], deque(), 0
        self.max_in_flight = 0

    def _obs(self, sl):
        ids = torch.arange(sl.start, sl.stop)
        return {"depth": torch.full((len(ids), 8, 8, 1), 0.5),
                "pointgoal": torch.stack([self.count[sl], ids.float()], 1)}

    def _info(self, sl, done):
        ids = torch.arange(sl.start, sl.stop)
        return {"env_id": ids, "episode": {"return": torch.where(done, 1.0, 0.0), "success": done & (ids % 2 == 0),
                                           "spl": torch.where(done, 0.5, 0.0), "length": torch.where(done, 3, 0)}}

    def async_reset(self):
        self.count.zero_()
        for g in range(self.num_envs // self.batch_size):
            sl = slice(g * self.batch_size, (g + 1) * self.batch_size)
            no = torch.zeros(self.batch_size, dtype=torch.bool)
            self.queue.append((False, (self._obs(sl), torch.zeros(self.batch_size), no, self._info(sl, no))))

    def send(self, actions, env_id):
        sl = slice(int(env_id[0]), int(env_id[-1]) + 1)
        assert actions.shape == (self.batch_size,) and actions.dtype == torch.long
        self.calls.append(("send", sl.start))
        self.count[sl] += 1
        k = self.count[sl]
        reward = k + torch.arange(sl.start, sl.stop) / 1000
        done = (k % 5) == 0
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.queue.append((True, (self._obs(sl), reward, done, self._info(sl, done))))

    def recv(self):
        sent, out = self.queue.popleft()
        self.in_flight -= int(sent)
        self.calls.append(("recv", int(out[3]["env_id"][0])))
        return out


def test_double_buffered_rollout_stores_each_step_where_it_belongs():
    torch.manual_seed(0)
    env = ScriptedEnv(4, 2)
    pol = Policy(1, hidden=8, width=4, resolution=(8, 8))
    T = 7
    ro = Rollout.empty(T, 4, (8, 8, 1), torch.float32, 8, "cpu")
    carry = start_rollouts(env, pol, torch.device("cpu"))
    eps, _ = collect_rollout(env, pol, ro, carry, "depth")
    e = torch.arange(4).float()
    for t in range(T):
        torch.testing.assert_close(ro.goal[t, :, 0], torch.full((4,), float(t)))  # obs before step t+1
        torch.testing.assert_close(ro.goal[t, :, 1], e)
        torch.testing.assert_close(ro.rewards[t], t + 1 + e / 1000)                     # reward of step t
    # episodes end with the 5th action: obs 5 starts a new episode (state reset, prev action -1)
    assert ro.not_done[5].sum() == 0 and ro.not_done[1:5].all() and ro.not_done[6:].all()
    assert (ro.prev_action[5] == -1).all()
    assert torch.equal(ro.prev_action[3], ro.actions[2])
    assert eps.tolist() == [4.0, 4.0, 2.0, 2.0, 12.0]   # episodes, return, successes (even envs), SPL, length
    torch.testing.assert_close(ro.goal[T, :, 0], torch.full((4,), float(T)))  # bootstrap obs
    assert len(carry.pending) == 2
    # double buffering: both groups in flight, each group's results received before its next send
    assert env.max_in_flight == 2
    assert env.calls[:6] == [("recv", 0), ("recv", 2), ("send", 0), ("send", 2), ("recv", 0), ("send", 0)]
    # the next rollout continues the counters and the LSTM state
    state_before = carry.state[0].clone()
    collect_rollout(env, pol, ro, carry, "depth")
    torch.testing.assert_close(ro.state0[0], state_before)
    torch.testing.assert_close(ro.goal[0, :, 0], torch.full((4,), float(T)))
    torch.testing.assert_close(ro.rewards[0], T + 1 + e / 1000)


def test_rollout_never_waits_for_the_device():
    """On the real env (CPU here, counted as on CUDA): a whole rollout, inference, sends, receives
    and episode stats included, calls nothing that would make the host wait for a CUDA device
    (``step_profile``'s sync list). The CPU env's own per-step action range check ("input
    check": once on CUDA) and Embree's reads ("render") are CPU-only and marked apart."""
    from inmemory_scenes import make_env, room
    from cli.step_profile import count_ops

    env = make_env([room("a", 3.0, 4.0), room("b", 4.0, 3.0)], num_envs=8, batch_size=4, seed=0)
    try:
        torch.manual_seed(0)
        pol = Policy(1, hidden=16, width=4, resolution=(16, 16))
        env.task = dataclasses.replace(env.task, max_episode_steps=4)   # episodes end inside the rollout
        ro = Rollout.empty(6, 8, (16, 16, 1), torch.float32, 16, "cpu")
        carry = start_rollouts(env, pol, torch.device("cpu"))
        collect_rollout(env, pol, ro, carry, "depth")
        with count_ops() as c:
            eps, _ = collect_rollout(env, pol, ro, carry, "depth")
        assert c.num_syncs == 0, c.syncs
        assert set(c.phases()) == {"step", "input check", "render"}, c.summary()
        assert eps[0] >= 8 and 0 <= eps[2] <= eps[0]     # every env ended an episode in 6 steps of 4
    finally:
        env.close()


def test_one_update_reads_the_device_once():
    """``learn``: two minibatches, each forward, backward, clip and LAMB step, and one read of
    the metrics at the end (``tolist``): nothing in between waits for the device."""
    from cli.step_profile import count_ops
    from bps_train.train import learn

    torch.manual_seed(0)
    args = parse(Args, ["--num-envs", "4", "--rollout-steps", "5", "--hidden", "16", "--width", "4"])
    pol = Policy(1, hidden=16, width=4, resolution=(16, 16))
    ro = Rollout.empty(5, 4, (16, 16, 1), torch.float32, 16, "cpu")
    ro.visual.uniform_()
    ro.not_done.fill_(True)
    ro.rewards.normal_()
    opt = Lamb(pol.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in pol.parameters()]
    with count_ops() as c:
        m = learn(pol, opt, ro, args, contextlib.nullcontext)
    assert dict(c.syncs) == {"step": {"Tensor.tolist": 1}}, c.syncs
    assert set(m) == {"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac"}
    assert all(isinstance(v, float) and math.isfinite(v) for v in m.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, pol.parameters()))   # it did learn


# ----------------------------------------------------------------------------------- lr rule, arg checks
def test_lr_scaling_and_schedule_follow_bps_nav():
    from bps_train.train import lr_factor, scaled_lr

    a = parse(Args, [])
    assert scaled_lr(a, 1) == pytest.approx(5e-4 * (32 * 32 / 2 / 256) ** 0.5)   # 512-frame minibatches
    big = parse(Args, ["--num-envs", "1024"])
    assert scaled_lr(big, 8) == pytest.approx(5e-4 * 512 ** 0.5)                 # bps-nav's 8-GPU batch
    assert scaled_lr(parse(Args, ["--num-envs", "4", "--rollout-steps", "8"]), 1) == 5e-4  # never below 1x
    assert lr_factor("cosine", 0.0) == 0.5 and lr_factor("cosine", 0.01) == pytest.approx(1.0)
    assert lr_factor("cosine", 1.0) == pytest.approx(0.01) and lr_factor("constant", 0.7) == 1.0
    assert lr_factor("cosine", 0.3) > lr_factor("cosine", 0.6)


def test_bad_settings_exit_with_one_line(capsys):
    from bps_train.train import main

    for argv, what in ((["--sensor", "sonar"], "--sensor 'sonar': expected depth or rgb"),
                       (["--num-envs", "2", "--minibatches", "4"], "--minibatches 4: must be in 1..NUM_ENVS (2)")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("bps-train: error: ") and what in err[0], err


def test_rgb_policy_takes_uint8_frames():
    torch.manual_seed(0)
    pol = Policy(3, hidden=16, width=4, resolution=(32, 32))
    rgb = torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8)
    g, prev, nd = torch.rand(2, 2), torch.tensor([-1, 1]), torch.zeros(2, dtype=torch.bool)
    logits, v, _ = pol(rgb, g, prev, pol.initial_state(2), nd)
    assert logits.shape == (2, 4) and torch.isfinite(v).all()
    # uint8 is scaled to 0..1 inside: the same frame as floats / 255 gives the same output
    logits2, v2, _ = pol(rgb.float() / 255, g, prev, pol.initial_state(2), nd)
    torch.testing.assert_close(logits, logits2)
    torch.testing.assert_close(v, v2)


def test_lamb_foreach_step_matches_the_per_tensor_loop():
    """The fused (torch._foreach_*) step equals LAMB written tensor by tensor, over several steps
    of the real policy's tensors (matrices with decay, 1-d Fixup scalars, zero-initialized convs)."""

    def reference_step(params, state, lr, b1=0.9, b2=0.999, eps=1e-6, wd=1e-2, min_trust=0.01):
        for p in params:
            st = state.setdefault(p, {"step": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
            st["step"] += 1
            t = st["step"]
            st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
            st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            u = (st["m"] / (1 - b1 ** t)) / ((st["v"] / (1 - b2 ** t)).sqrt() + eps)
            if p.dim() > 1:
                u = u + wd * p
            w_n, u_n = p.norm(), u.norm()
            trust = torch.where((w_n > 0) & (u_n > 0), w_n.clamp(max=10.0) / u_n, torch.ones_like(w_n))
            p.sub_(lr * trust.clamp(min_trust, 1 / min_trust) * u)

    torch.manual_seed(0)
    a = Policy(1, hidden=32, width=4, resolution=(32, 32))
    b = Policy(1, hidden=32, width=4, resolution=(32, 32))
    b.load_state_dict(a.state_dict())
    opt, ref_state = Lamb(a.parameters(), lr=0.02), {}
    for _ in range(3):
        grads = [torch.randn_like(p) for p in a.parameters()]
        for pa, pb, g in zip(a.parameters(), b.parameters(), grads):
            pa.grad, pb.grad = g.clone(), g.clone()
        opt.step()
        with torch.no_grad():
            reference_step(list(b.parameters()), ref_state, lr=0.02)
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-7)


def test_bf16_autocast_reaches_the_policy_only_and_the_loss_stays_fp32():
    """The autocast factory the trainer enters on CUDA, exercised here with CPU bf16: the policy's
    forward passes run in bf16, the loss, log-probs and stored values are fp32 and close to fp32's."""
    from bps_train.train import autocast_of

    assert autocast_of(parse(Args, []), "cpu") is not None  # nullcontext on CPU
    assert not torch.is_autocast_enabled("cpu")
    seen = []
    bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    torch.manual_seed(0)
    pol = Policy(1, hidden=16, width=4, resolution=(16, 16))
    pol.actor.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    ro = Rollout.empty(4, 2, (16, 16, 1), torch.float32, 16, "cpu")
    ro.visual.uniform_()
    ro.not_done.fill_(True)
    adv, ret = torch.randn(4, 2), torch.randn(4, 2)
    ref, _ = ppo_loss(pol, ro, torch.arange(2), adv, ret, 0.2, 0.5, 0.01)
    loss, _ = ppo_loss(pol, ro, torch.arange(2), adv, ret, 0.2, 0.5, 0.01, amp=bf16)
    assert seen == [torch.float32, torch.bfloat16] and loss.dtype == torch.float32
    assert loss.item() == pytest.approx(ref.item(), rel=0.05, abs=0.05)
    loss.backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in pol.parameters())
    env = ScriptedEnv(4, 2)
    ro = Rollout.empty(3, 4, (8, 8, 1), torch.float32, 8, "cpu")
    pol = Policy(1, hidden=8, width=4, resolution=(8, 8))
    carry = start_rollouts(env, pol, torch.device("cpu"))
    collect_rollout(env, pol, ro, carry, "depth", amp=bf16)
    assert ro.values.dtype == ro.logp.dtype == torch.float32 and torch.isfinite(ro.logp).all()
    assert not torch.is_autocast_enabled("cpu")


def test_command_line_has_no_prefix_matching_and_suggests_the_option(capsys):
    """Issue 35 item 9: `--num-env 8` is not `--num-envs`; a typo is two lines with a suggestion."""
    with pytest.raises(SystemExit) as e:
        parse(Args, ["--num-env", "8"], description="x")
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 3 and "unrecognized arguments: --num-env 8" in err[0], err
    assert any("--num-env: did you mean --num-envs?" in ln for ln in err) and "--help" in err[-1]
    with pytest.raises(SystemExit):
        parse(Args, ["--task", "pointnv"])
    assert "invalid choice: 'pointnv'" in capsys.readouterr().err


def test_help_reads_right_for_switches_and_lists_the_tasks():
    out = subprocess.run([sys.executable, "-m", "bps_train.train", "--help"], capture_output=True, text=True,
                         timeout=60)
    text = " ".join(out.stdout.split())
    from bps_runtime.tasks import TASKS

    usage = " ".join(out.stdout.split("options:")[0].split())
    assert "--task {" + ",".join(TASKS) + "}" in usage
    assert "same as --resume false (default" not in text and "same as --resume false" in text
    assert parse(Args, ["--no-resume"]).resume is False and parse(Args, []).resume is True


def test_eval_episodes_help_and_docs_say_what_0_means():
    """--eval-episodes 0: the split's or the file's episodes, but SAMPLED_EVAL sampled ones (no
    file); min(N, 64) environments. --help and docs/TRAINING.md say the numbers the code uses."""
    from bps_train.train import SAMPLED_EVAL

    doc = " ".join(Args.__dataclass_fields__["eval_episodes"].metadata["doc"].split())
    assert f"without a file): {SAMPLED_EVAL})" in doc and "min(N, 64) environments" in doc
    training = " ".join((Path(__file__).parents[1] / "docs" / "TRAINING.md").read_text().split())
    assert f"or {SAMPLED_EVAL} sampled ones. It runs min(N, 64) environments" in training
    assert "`soft_spl`, `distance_to_goal`" in training and "one environment per episode" not in training


def test_episode_note_names_the_imagenav_heading_change_for_runs_on_episode_files(tmp_path):
    """An ImageNav checkpoint trained on episode files before the goal-heading rule for integer
    ids (a479ed0): resume and eval print one note naming it; the identity records the rules only
    where a change applies, so every other run keeps the identity it had; no refusal."""
    from bps_train import checkpoint

    def ident(task, episodes):
        args = parse(Args, ["--task", task, "--episodes", episodes])
        return checkpoint.identity(args, "sha", 1)

    ep_file = str(tmp_path / "eps.json.gz")
    new = ident("imagenav", ep_file)
    assert new["episode_rules"] == checkpoint.EPISODE_RULES == 2
    assert "episode_rules" in ident("imagenav", "dataset")
    for task, episodes in (("imagenav", "sample"), ("pointnav", ep_file), ("objectnav", ep_file)):
        assert "episode_rules" not in ident(task, episodes), (task, episodes)
    old = {"args": {"task": "imagenav", "episodes": ep_file}, "identity": {}}
    note = checkpoint.episode_note("c.pt", old)
    assert "c.pt" in note and ep_file in note and "JSON integer" in note and "a479ed0" in note
    assert checkpoint.episode_note("c.pt", {**old, "identity": {"episode_rules": 2}}) == ""
    assert checkpoint.episode_note("c.pt", {**old, "args": {"task": "imagenav", "episodes": "sample"}}) == ""
    assert checkpoint.episode_note("c.pt", {**old, "args": {"task": "pointnav", "episodes": ep_file}}) == ""
    saved = {k: v for k, v in new.items() if k != "episode_rules"}   # a checkpoint from before the rules
    checkpoint.check_same_run("c.pt", saved, new)   # resumes: the note, not a refusal


def test_expected_duration_line():
    from bps_train.train import duration_text, eta_line

    assert [duration_text(s) for s in (40, 720, 12_300)] == ["40 s", "12 min", "3 h 25 min"]
    # 3 updates of 1,024 frames in 30 s (~102 frames/s); 2M frames in all: 1,954 updates to go
    line = eta_line(3, 1957, 3072, 30.0, 1024)
    assert line.startswith("expected duration: 1954 more update(s), 2,000,896 frames at 102 frames/s")
    assert "about 5 h 25 min more" in line, line


def test_layout_note_names_an_older_two_rank_cpu_checkpoints_layout():
    """A 2-rank CPU checkpoint saved before layouts were recorded ran under one of two rules (625ac9c
    and before: two groups, every rank's renderer on every core; eef6654 to 8e960f4: the one-core
    rule, given as ``one_core``); resumed with a layout matching neither: one note naming both, no
    date; matching either: none; a recorded layout equal to this run's: none; an odd NUM_ENVS or
    --double-buffer false ran one group."""
    from bps_train import checkpoint

    old = {"args": {"num_envs": 64, "double_buffer": True, "threads": 0}, "identity": {}, "world": 2}
    assert checkpoint.saved_layout(old) == ({"groups": 2, "threads": 0}, False)
    note = checkpoint.layout_note("c.pt", old, checkpoint.layout(1, 2), checkpoint.layout(1, 1))
    assert note.startswith("bps-train: note: c.pt does not record its layout") and "2026" not in note
    assert ("625ac9c and before ran it with 2 env group(s) per rank on every core, of eef6654 to 8e960f4 "
            "(the one-core rule) with 1 env group(s) per rank on 1 thread(s); "
            "this run has 1 env group(s) per rank on 2 thread(s)") in note
    both = checkpoint.layout_note("c.pt", old, checkpoint.layout(1, 1), checkpoint.layout(2, 0))
    assert "625ac9c and before, and of eef6654 to 8e960f4, ran it with 2 env group(s) per rank on every core" in both
    alone = checkpoint.layout_note("c.pt", old, checkpoint.layout(1, 1))   # the one-core rule's not known
    assert "625ac9c and before ran it with 2 env group(s)" in alone and "eef6654" not in alone
    for have in (checkpoint.layout(2, 0), checkpoint.layout(1, 1)):
        assert checkpoint.layout_note("c.pt", old, have, checkpoint.layout(1, 1)) == ""
    assert checkpoint.layout_note("c.pt", {**old, "identity": {"layout": checkpoint.layout(1, 1)}},
                                  checkpoint.layout(1, 1), checkpoint.layout(2, 0)) == ""
    for args in ({"num_envs": 63, "double_buffer": True, "threads": 0}, {"num_envs": 64, "double_buffer": False}):
        assert checkpoint.saved_layout({**old, "args": args}) == ({"groups": 1, "threads": 0}, False)


def test_a_checkpoint_of_8e960f4s_one_rank_per_core_recipe_resumes_without_a_layout_note(monkeypatch):
    """TRAINING.md's "One rank per core" (2 torchrun ranks on a 2-core CPU host, default flags)
    saved at 8e960f4 records no layout; resumed with the same command its layout is the one-core
    rule's (one group, one thread per rank), so no note; on a 4-core host the same args then ran
    two groups on two threads each."""
    from bps_train import checkpoint
    from bps_train.train import Args, double_buffered, num_groups, one_core_rule_layout, rank_threads

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr("bps_assets.host.available_cores", lambda: 2)
    saved = {**dataclasses.asdict(Args()), "double_buffer": True}   # 8e960f4's default: true, the one-core rule
    ckpt = {"args": saved, "identity": {}, "world": 2}
    now = Args()   # this tree's default: auto
    have = checkpoint.layout(num_groups(now.num_envs, double_buffered(now, "cpu")), rank_threads(now, "cpu"))
    assert have == checkpoint.layout(1, 1) == one_core_rule_layout(saved, "cpu")
    assert checkpoint.layout_note("c.pt", ckpt, have, one_core_rule_layout(saved, "cpu")) == ""
    assert checkpoint.layout_note("c.pt", ckpt, have) != ""   # 625ac9c's rule alone: the false note of before
    assert one_core_rule_layout({**saved, "double_buffer": False}, "cpu") == checkpoint.layout(1, 1)
    monkeypatch.setattr("bps_assets.host.available_cores", lambda: 4)
    assert one_core_rule_layout(saved, "cpu") == checkpoint.layout(2, 2)
    assert one_core_rule_layout({**saved, "threads": 3}, "cpu") == checkpoint.layout(2, 3)


def test_noise_note_names_only_the_changes_that_apply():
    """A noisy checkpoint without ``noise_rules`` (saved before them): the note names what changed
    for its task and noise; none for a current one, a noiseless one, or noise no change touched."""
    from bps_train import checkpoint

    old = {"args": {"noise": "rgb=gaussian", "task": "imagenav"}, "identity": {}}
    note = checkpoint.noise_note("c.pt", old)
    assert "c.pt" in note and "goal image" in note and "Redwood" not in note
    assert "Redwood" in checkpoint.noise_note("c.pt", {**old, "args": {"noise": "challenge2021", "task": "imagenav"}})
    assert checkpoint.noise_note("c.pt", {**old, "args": {"noise": "rgb=gaussian", "task": "pointnav"}}) == ""
    assert checkpoint.noise_note("c.pt", {**old, "identity": {"noise_rules": checkpoint.NOISE_RULES}}) == ""
    assert checkpoint.noise_note("c.pt", {**old, "args": {"noise": "", "task": "imagenav"}}) == ""
