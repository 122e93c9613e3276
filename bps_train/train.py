"""bps-train: large-batch PPO for PointGoal navigation on bps_runtime, read top to bottom.

The recipe is the paper's (Shacklett et al., 2021): SE-ResNet-9 + Fixup on 64x64 depth, an LSTM
state encoder, PPO with 32-step rollouts, 1 epoch, 2 minibatches, gradient clip 1.0, LAMB
(min trust ratio 0.01, weight decay 1e-2, lr 5e-4 scaled with batch size), normalized advantages.
Simulation and inference overlap: the environments are split into groups of ``batch_size``
(EnvPool's send/recv); while the simulator thread steps one group, the policy acts on the other.

Multi-GPU / multi-node: run under ``torchrun``; each rank drives its own environments over a
disjoint share of the scenes (``make(scene_shard=(rank, world))``) and gradients are
all-reduced (DD-PPO style). On CPU the backend is gloo.

Checkpoints (OUT_DIR/checkpoint.pt) resume exactly what can be resumed: the weights, the
optimizer's moments and step counts, the update / frame counters, cumulative wall time and
every rank's torch / numpy / python RNG streams. Episodes in flight and recurrent states are
not saved (as in habitat-baselines): a resumed run restarts its environments with new episodes
(the env seed includes the update index), so its trajectory after the resume point differs from
an uninterrupted run's.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from bps_train.args import arg, parse
from bps_train.lamb import Lamb
from bps_train.models import Policy
from bps_train.ppo import Rollout, gae, ppo_loss


@dataclass
class Args:
    dataset: str = arg("demo_out/manifest.json", "dataset manifest written by `bps-assets preprocess` / `demo`")
    split: str = arg("train", "scene subset to train on")
    episodes: str = arg("sample", "training episodes: sample (fresh, habitat-lab's rules) or dataset (the split's files)")
    eval: str = arg("", "evaluate this checkpoint (or 'random': a uniform random policy) instead of training")
    eval_split: str = arg("val", "scene subset used by --eval (its dataset episodes)")
    eval_episodes: int = arg(0, "distinct episodes to evaluate with --eval (0: all of the split's)")
    eval_greedy: bool = arg(False, "--eval takes the most likely action (default: sample, as habitat-baselines)")
    out_dir: str = arg("runs/ppo", "where checkpoints and logs go")
    resume: bool = arg(True, "continue from OUT_DIR/checkpoint.pt when it exists")
    seed: int = arg(1, "seed of the environments, the policy and the sampler")
    device: str = arg("cpu", "torch device of the environments and the policy (cuda, cpu)")
    renderer: str = arg("embree", "render backend: embree (CPU) or warp (CUDA; CPU for tests)")
    sensor: str = arg("depth", "visual input: depth or rgb")
    resolution: int = arg(64, "square sensor resolution in pixels")
    num_envs: int = arg(32, "environments per rank")
    double_buffer: bool = arg(True, "two groups of NUM_ENVS/2 so inference on one overlaps simulation of the other")
    cache_slots: int = arg(0, "resident scenes per rank (the scene cache's slots; 0: the runtime's default)")
    total_steps: int = arg(2_000_000, "environment steps (frames) to train for, all ranks together")
    rollout_steps: int = arg(32, "steps per environment per rollout")
    epochs: int = arg(1, "PPO epochs per rollout")
    minibatches: int = arg(2, "PPO minibatches per epoch (split over environments)")
    lr: float = arg(5e-4, "LAMB base learning rate, scaled by max(1, sqrt(minibatch frames x ranks / LR_REF_BATCH))")
    lr_ref_batch: int = arg(256, "minibatch size (frames, all ranks) at which --lr applies unscaled (bps-nav: 256)")
    lr_schedule: str = arg("cosine", "cosine: 1% warm-up from half, cosine decay to 1% (bps-nav); constant")
    weight_decay: float = arg(1e-2, "LAMB weight decay")
    min_trust: float = arg(0.01, "LAMB minimum trust ratio")
    max_grad_norm: float = arg(1.0, "gradient-norm clip")
    gamma: float = arg(0.99, "discount")
    gae_lambda: float = arg(0.95, "GAE lambda")
    clip: float = arg(0.2, "PPO ratio clip")
    value_coef: float = arg(0.5, "value loss weight")
    entropy_coef: float = arg(0.01, "entropy bonus weight")
    hidden: int = arg(256, "LSTM and visual feature width")
    width: int = arg(16, "channels of the first ResNet stage (x2 per stage)")
    sim_only_steps: int = arg(20, "random-action steps per group at the start and the end, timed as simulation-only fps (0: skip)")
    log_every: int = arg(1, "log every N updates")
    save_every: int = arg(10, "checkpoint every N updates")
    snapshot_every: int = arg(0, "also keep OUT_DIR/ckpt_UPDATE.pt every N updates, for learning curves (0: never)")
    tensorboard: bool = arg(False, "also write TensorBoard events to OUT_DIR/tb (needs `pip install tensorboard`)")
    threads: int = arg(0, "CPU threads for the env's renderer and step, and torch's intra-op threads for the policy "
                          "(0: every core this process may use for the env; torch's default)")


# ----------------------------------------------------------------------------------- set-up
def check_args(args):
    from bps_assets.errors import ConfigError

    if args.sensor not in ("depth", "rgb"):
        raise ConfigError(None, f"--sensor {args.sensor!r}: expected depth or rgb")
    if args.episodes not in ("sample", "dataset"):
        raise ConfigError(None, f"--episodes {args.episodes!r}: expected sample or dataset")
    if args.lr_schedule not in ("cosine", "constant"):
        raise ConfigError(None, f"--lr-schedule {args.lr_schedule!r}: expected cosine or constant")
    if args.num_envs < 1 or args.rollout_steps < 1 or args.epochs < 1 or args.total_steps < 1:
        raise ConfigError(None, "--num-envs, --rollout-steps, --epochs and --total-steps must be >= 1")
    if not 1 <= args.minibatches <= args.num_envs:
        raise ConfigError(None, f"--minibatches {args.minibatches}: must be in 1..NUM_ENVS ({args.num_envs}); "
                                "minibatches split the environments (whole recurrent sequences)")


def setup_distributed(args):
    """(rank, world): torchrun sets WORLD_SIZE; gloo on CPU, nccl on CUDA."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if args.device.startswith("cuda") else "gloo")
    rank = dist.get_rank() if world > 1 else 0
    if args.device.startswith("cuda") and world > 1:
        args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    return rank, world


def seed_everything(seed: int):
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_envs(args, split, num_envs, seed, episodes, double_buffer, scene_shard=None):
    import bps_runtime

    kw = {} if scene_shard is None or scene_shard[1] == 1 else {"scene_shard": scene_shard}
    if args.cache_slots:
        kw["cache"] = args.cache_slots
    if args.threads:
        kw["threads"] = args.threads
    return bps_runtime.make(
        args.dataset, split=split, num_envs=num_envs,
        batch_size=num_envs // 2 if double_buffer and num_envs >= 2 and num_envs % 2 == 0 else num_envs,
        device=args.device, sensors=(args.sensor,), resolution=(args.resolution, args.resolution),
        seed=seed, renderer=args.renderer, episodes=episodes, **kw)


def visual_of(obs, sensor):
    """Depth arrives normalized 0..1 (habitat's 0-10 m), RGB as uint8; both go in as they are."""
    return obs[sensor]


def build_policy(args, device):
    channels = 3 if args.sensor == "rgb" else 1
    return Policy(channels, hidden=args.hidden, width=args.width,
                  resolution=(args.resolution, args.resolution)).to(device)


def scaled_lr(args, world: int) -> float:
    """bps-nav's rule: the base rate times sqrt(minibatch frames over all ranks / 256), never below 1x."""
    minibatch = args.num_envs * args.rollout_steps / args.minibatches * world
    return args.lr * max(1.0, math.sqrt(minibatch / args.lr_ref_batch))


def lr_factor(schedule: str, progress: float) -> float:
    """Multiplier of the scaled rate at ``progress`` (0..1 of total steps)."""
    if schedule == "constant":
        return 1.0
    if schedule != "cosine":
        raise ValueError(f"--lr-schedule {schedule!r}: expected cosine or constant")
    if progress < 0.01:
        return 0.5 + 0.5 * progress / 0.01
    x = min(1.0, (progress - 0.01) / 0.99)
    return 0.01 + 0.99 * (math.cos(x * math.pi) + 1) / 2


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(s: dict):
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


def save_checkpoint(path: Path, state: dict):
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-save never leaves a half checkpoint


# ----------------------------------------------------------------------------------- simulation only
def measure_sim_fps(env, steps: int, seed: int, actions=(0, 1, 2, 3)) -> float:
    """Frames/s of the environments alone: random ``actions`` through the same send/recv
    double buffer the trainer uses, no policy, no learning."""
    g = torch.Generator().manual_seed(seed)
    choice = torch.tensor(actions)
    rand = lambda: choice[torch.randint(0, len(actions), (env.batch_size,), generator=g)].to(env.device)  # noqa: E731
    env.async_reset()
    groups = env.num_envs // env.batch_size
    for _ in range(groups):  # the reset observations
        env.recv()
    for _ in range(groups):
        env.send(rand())
    t0 = time.perf_counter()
    for _ in range(steps * groups):
        env.recv()
        env.send(rand())
    for _ in range(groups):
        env.recv()
    dt = time.perf_counter() - t0
    return (steps + 1) * env.num_envs / dt


def measure_sim_only(env, steps: int, seed: int) -> dict:
    """Simulation-only fps two ways: uniform random actions (a STOP every 4 steps: reset-heavy)
    and random moves without STOP (episodes end at the step limit, like a trained policy's
    long episodes). The trainer divides by the faster, so its ratio is not flattered."""
    uniform = measure_sim_fps(env, steps, seed)
    moves = measure_sim_fps(env, steps, seed + 1, actions=(1, 2, 3))
    return {"uniform": uniform, "no_stop": moves, "sim_fps": max(uniform, moves)}


# ----------------------------------------------------------------------------------- rollouts
@dataclass
class Carry:
    """What one rollout hands to the next: recurrent state, previous actions, episode starts,
    and each group's latest observation (received, not yet acted on)."""

    state: tuple
    prev_action: torch.Tensor
    not_done: torch.Tensor
    pending: list
    scenes: list  # the scenes the environments started in


def start_rollouts(env, policy, device) -> Carry:
    env.async_reset()
    n = env.num_envs
    pending, scenes = [], set()
    for _ in range(n // env.batch_size):
        obs, _, _, info = env.recv()
        pending.append((info["env_id"].to(device), obs))
        scenes.update(info.get("scene_id", []))
    return Carry(policy.initial_state(n, device), torch.full((n,), -1, dtype=torch.long, device=device),
                 torch.zeros(n, dtype=torch.bool, device=device), pending, sorted(scenes))


def collect_rollout(env, policy, ro: Rollout, carry: Carry, sensor: str) -> tuple[list, float]:
    """Fill ``ro`` with T steps of every environment, group by group: while the simulator thread
    steps one group, the policy acts on the other. Returns the finished episodes' stats
    [(return, success, spl)] and the seconds spent waiting in ``recv``."""
    T = ro.steps
    b = env.batch_size
    groups = env.num_envs // b
    step_of = [0] * groups
    state, prev_action, not_done = carry.state, carry.prev_action, carry.not_done
    episodes, waited = [], 0.0

    def observe(ids, t, obs):
        ro.visual[t, ids] = visual_of(obs, sensor).to(ro.visual.dtype)
        ro.pointgoal[t, ids] = obs["pointgoal"]
        ro.prev_action[t, ids] = prev_action[ids]
        ro.not_done[t, ids] = not_done[ids]

    def act(ids, t, obs):
        observe(ids, t, obs)
        with torch.no_grad():
            logits, value, (h, c) = policy(ro.visual[t, ids], ro.pointgoal[t, ids], prev_action[ids],
                                           (state[0][:, ids], state[1][:, ids]), not_done[ids])
            d = torch.distributions.Categorical(logits=logits)
            a = d.sample()
        state[0][:, ids], state[1][:, ids] = h, c
        ro.actions[t, ids], ro.logp[t, ids], ro.values[t, ids] = a, d.log_prob(a), value
        env.send(a.to(env.device), ids)
        step_of[int(ids[0]) // b] = t + 1

    ro.state0 = (state[0].clone(), state[1].clone())
    for ids, obs in carry.pending:  # step 0 of every group
        act(ids, 0, obs)
    carry.pending = []
    while len(carry.pending) < groups:
        t0 = time.perf_counter()
        obs, reward, done, info = env.recv()
        waited += time.perf_counter() - t0
        ids = info["env_id"].to(ro.rewards.device)
        t = step_of[int(ids[0]) // b]  # >= 1: the group acted this rollout
        reward, done = reward.to(ro.rewards.device), done.to(ro.rewards.device)
        ro.rewards[t - 1, ids] = reward
        if bool(done.any()):
            ep = info["episode"]
            for j in torch.nonzero(done).flatten().tolist():
                episodes.append((float(ep["return"][j]), float(ep["success"][j]), float(ep["spl"][j])))
        a = ro.actions[t - 1, ids]
        prev_action[ids] = torch.where(done, torch.full_like(a, -1), a)
        not_done[ids] = ~done
        if t < T:
            act(ids, t, obs)
            continue
        observe(ids, T, obs)  # the group's rollout is complete: value of its last observation
        with torch.no_grad():
            _, v, _ = policy(ro.visual[T, ids], ro.pointgoal[T, ids], prev_action[ids],
                             (state[0][:, ids], state[1][:, ids]), not_done[ids])
        ro.values[T, ids] = v
        carry.pending.append((ids, obs))  # acted on as step 0 of the next rollout
    return episodes, waited


def all_reduce_grads(params, world):
    """DD-PPO: average gradients over ranks in one flat all-reduce."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    off = 0
    for p, g in zip(params, grads):
        p.grad = flat[off:off + g.numel()].view_as(p).clone()
        off += g.numel()


# ----------------------------------------------------------------------------------- eval
def count_split_episodes(dataset: str, split: str) -> int:
    """PointNav episodes of a manifest's subset (habitat v1: one content file per scene)."""
    from bps_assets.pipeline.manifest import load_manifest

    total = 0
    for entry in load_manifest(dataset).scenes(split):
        count = (entry.stats or {}).get("episodes")
        if count is None and entry.episodes is not None:
            with gzip.open(entry.episodes, "rt") as f:
                count = len(json.load(f)["episodes"])
        total += count or 0
    return total


def evaluate(args) -> dict:
    """Success and SPL over distinct episodes of ``eval_split`` (each counted once, first run)."""
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    device = torch.device(args.device)
    policy = None
    if args.eval != "random":
        ckpt = torch.load(args.eval, map_location=device, weights_only=False)
        for k in ("sensor", "resolution", "hidden", "width"):
            setattr(args, k, ckpt["args"][k])
        policy = build_policy(args, device)
        policy.load_state_dict(ckpt["policy"])
        policy.eval()
    total = count_split_episodes(args.dataset, args.eval_split)
    want = min(args.eval_episodes or total, total)
    n = max(1, min(want, 64))  # one env per episode when the split is small: each runs once
    env = make_envs(args, args.eval_split, n, args.seed + 10_000, "dataset", double_buffer=False)
    t0 = time.perf_counter()
    obs = env.reset()
    state = policy.initial_state(n, device) if policy else None
    prev = torch.full((n,), -1, dtype=torch.long, device=device)
    not_done = torch.zeros(n, dtype=torch.bool, device=device)
    results: dict = {}
    frames, max_frames = 0, 600 * total * 2 + 10_000  # a stuck policy still ends: 500-step limit
    with torch.no_grad():
        while len(results) < want and frames < max_frames:
            if policy is None:
                action = torch.randint(0, 4, (n,))
            else:
                logits, _, state = policy(visual_of(obs, args.sensor), obs["pointgoal"], prev, state, not_done)
                action = logits.argmax(-1) if args.eval_greedy else torch.distributions.Categorical(
                    logits=logits).sample()
            obs, reward, done, info = env.step(action.to(env.device))
            frames += n
            done = done.to(device)
            prev = torch.where(done, torch.full_like(action, -1), action.to(device))
            not_done = ~done
            ep = info["episode"]
            for i in torch.nonzero(done).flatten().tolist():
                key = (ep["scene_id"][i], ep["episode_id"][i])
                if key not in results and len(results) < want:
                    results[key] = (float(ep["success"][i]), float(ep["spl"][i]), int(ep["length"][i]))
    env.close()
    vals = list(results.values())
    res = {"checkpoint": args.eval, "split": args.eval_split, "episodes": len(vals),
           "success": float(np.mean([v[0] for v in vals])) if vals else float("nan"),
           "spl": float(np.mean([v[1] for v in vals])) if vals else float("nan"),
           "mean_length": float(np.mean([v[2] for v in vals])) if vals else float("nan"),
           "frames": frames, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(res), flush=True)
    return res


# ----------------------------------------------------------------------------------- train
LOG_FIELDS = ["update", "global_step", "fps", "sim_fps", "fps_ratio", "reward", "success", "spl", "episodes",
              "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "lr", "collect_s",
              "learn_s", "recv_wait", "seconds"]


def train(args) -> dict:
    rank, world = setup_distributed(args)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed + 1000 * rank)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    # ---- policy, optimizer, and the checkpoint to resume from
    policy = build_policy(args, device)
    batch = args.num_envs * args.rollout_steps * world
    lr = scaled_lr(args, world)
    opt = Lamb(policy.parameters(), lr=lr, weight_decay=args.weight_decay, min_trust=args.min_trust)
    update, global_step, seconds_before = 0, 0, 0.0
    ckpt_path = out / "checkpoint.pt"
    if args.resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
        policy.load_state_dict(ckpt["policy"])
        opt.load_state_dict(ckpt["optimizer"])
        update, global_step = ckpt["update"], ckpt["global_step"]
        seconds_before = ckpt.get("seconds", 0.0)
        rngs = ckpt["rng"]
        if len(rngs) == world:  # a different world size keeps fresh per-rank streams
            set_rng_state(rngs[rank])
        if rank == 0:
            print(f"resumed {ckpt_path} at update {update}, step {global_step}", flush=True)
    if world > 1:  # every rank starts from rank 0's weights
        for p in policy.parameters():
            dist.broadcast(p.data, 0)

    # ---- environments: this rank's share of the scenes; simulation-only speed first
    n = args.num_envs
    env = make_envs(args, args.split, n, args.seed + 7919 * rank + update, args.episodes, args.double_buffer,
                    scene_shard=(rank, world))
    sim_fps = float("nan")
    if args.sim_only_steps > 0:
        m = measure_sim_only(env, args.sim_only_steps, args.seed + rank)
        sim = torch.tensor([m["uniform"], m["no_stop"]], dtype=torch.float64)
        if world > 1:  # every rank simulates its own environments at the same time
            dist.all_reduce(sim)
        sim_fps = sim.max().item()
        if rank == 0:
            print(f"simulation only ({world} rank(s), {n} envs each): {sim[0]:.0f} frames/s with uniform random "
                  f"actions, {sim[1]:.0f} with random moves (no STOP); ratios below use {sim_fps:.0f}", flush=True)
            with open(out / "sim_only.jsonl", "a") as f:
                f.write(json.dumps({"update": update, "uniform": sim[0].item(), "no_stop": sim[1].item(),
                                    "world": world, "num_envs": n}) + "\n")

    # ---- logs
    log = writer = None
    if rank == 0:
        log_path = out / "log.csv"
        new = not log_path.exists() or log_path.stat().st_size == 0
        log_file = open(log_path, "a", newline="")
        log = csv.DictWriter(log_file, LOG_FIELDS)
        if new:
            log.writeheader()
        if args.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ImportError("--tensorboard needs TensorBoard: pip install tensorboard") from e
            writer = SummaryWriter(str(out / "tb"))

    # ---- the loop: rollout (simulation overlapped with inference), then one PPO update
    visual_shape = (args.resolution, args.resolution, 3 if args.sensor == "rgb" else 1)
    ro = Rollout.empty(args.rollout_steps, n, visual_shape,
                       torch.uint8 if args.sensor == "rgb" else torch.float32, args.hidden, device)
    carry = start_rollouts(env, policy, device)
    print(f"SCENES {json.dumps(carry.scenes)}", flush=True)  # this rank's share (checked by the tests)
    num_updates = max(1, math.ceil(args.total_steps / batch))
    params = list(policy.parameters())
    episodes, recv_wait, collect_s, learn_s, metrics = [], 0.0, 0.0, 0.0, {}
    t_start, frames_run = time.perf_counter(), 0
    while update < num_updates:
        t_update = time.perf_counter()
        for group in opt.param_groups:  # from the frame counter, so a resumed run continues the schedule
            group["lr"] = lr * lr_factor(args.lr_schedule, global_step / (num_updates * batch))
        eps, waited = collect_rollout(env, policy, ro, carry, args.sensor)
        episodes += eps
        recv_wait += waited
        t_learn = time.perf_counter()
        collect_s += t_learn - t_update

        adv, returns = gae(ro, args.gamma, args.gae_lambda)
        for _ in range(args.epochs):
            for mb in torch.randperm(n, device=device).chunk(args.minibatches):
                loss, metrics = ppo_loss(policy, ro, mb, adv, returns, args.clip, args.value_coef,
                                         args.entropy_coef)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if world > 1:
                    all_reduce_grads(params, world)
                torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                opt.step()
                metrics["loss"] = loss.item()
                if not math.isfinite(metrics["loss"]):
                    raise FloatingPointError(f"non-finite loss at update {update}")
        learn_s += time.perf_counter() - t_learn
        update += 1
        global_step += batch
        frames_run += batch

        # ---- log (episode stats summed over ranks) and checkpoint
        if update % args.log_every == 0 or update == num_updates:
            s = torch.tensor([len(episodes), sum(e[0] for e in episodes), sum(e[1] for e in episodes),
                              sum(e[2] for e in episodes)], dtype=torch.float64)
            if world > 1:
                dist.all_reduce(s)
            elapsed = time.perf_counter() - t_start
            fps = frames_run / elapsed
            k = s[0].item()
            row = {"update": update, "global_step": global_step, "fps": round(fps, 1),
                   "sim_fps": round(sim_fps, 1), "fps_ratio": round(fps / sim_fps, 3),
                   "reward": s[1].item() / k if k else float("nan"),
                   "success": s[2].item() / k if k else float("nan"),
                   "spl": s[3].item() / k if k else float("nan"), "episodes": int(k),
                   **{f: metrics[f] for f in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                                               "clip_frac")},
                   "lr": opt.param_groups[0]["lr"], "collect_s": round(collect_s, 2), "learn_s": round(learn_s, 2),
                   "recv_wait": round(recv_wait, 2), "seconds": round(seconds_before + elapsed, 1)}
            if log is not None:
                log.writerow(row)
                log_file.flush()
                if writer is not None:
                    for key in ("fps", "fps_ratio", "reward", "success", "spl", "loss", "entropy"):
                        writer.add_scalar(key, row[key], global_step)
                print(f"update {update}/{num_updates} step {global_step} fps {row['fps']} "
                      f"(x{row['fps_ratio']} of sim) success {row['success']:.3f} spl {row['spl']:.3f} "
                      f"reward {row['reward']:.3f} ({k:.0f} eps) loss {metrics['loss']:.4f} "
                      f"({time.perf_counter() - t_update:.1f}s)", flush=True)
            episodes, recv_wait, collect_s, learn_s = [], 0.0, 0.0, 0.0
        if update % args.save_every == 0 or update == num_updates or (
                args.snapshot_every and update % args.snapshot_every == 0):
            rngs = [None] * world
            if world > 1:
                dist.all_gather_object(rngs, rng_state())
            else:
                rngs = [rng_state()]
            if rank == 0:
                state = {"policy": policy.state_dict(), "optimizer": opt.state_dict(), "update": update,
                         "global_step": global_step, "seconds": seconds_before + time.perf_counter() - t_start,
                         "world": world, "args": dataclasses.asdict(args), "rng": rngs}
                save_checkpoint(ckpt_path, state)
                if args.snapshot_every and update % args.snapshot_every == 0:
                    save_checkpoint(out / f"ckpt_{update:06d}.pt", state)

    if args.sim_only_steps > 0:  # again at the end: the machine's load may have changed meanwhile
        m = measure_sim_only(env, args.sim_only_steps, args.seed + rank + 1)
        sim = torch.tensor([m["uniform"], m["no_stop"]], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(sim)
        fps_run = frames_run / max(time.perf_counter() - t_start, 1e-9)
        if rank == 0:
            print(f"simulation only at the end: {sim[0]:.0f} frames/s uniform, {sim[1]:.0f} no STOP; this run's "
                  f"end-to-end {fps_run:.0f} frames/s = x{fps_run / sim.max().item():.2f} of the end measurement",
                  flush=True)
            with open(out / "sim_only.jsonl", "a") as f:
                f.write(json.dumps({"update": update, "uniform": sim[0].item(), "no_stop": sim[1].item(),
                                    "world": world, "num_envs": n, "end_to_end_fps": fps_run}) + "\n")
    env.close()
    if log is not None:
        log_file.close()
    if writer is not None:
        writer.close()
    if world > 1:  # leave together: a rank tearing gloo down while a peer still talks to it aborts
        dist.barrier()
        dist.destroy_process_group()
    return {"updates": update, "global_step": global_step, "sim_fps": sim_fps,
            "fps": frames_run / max(time.perf_counter() - t_start, 1e-9), **metrics}


def run(argv=None) -> dict:
    """Parse ``argv`` and train (or evaluate, with --eval); returns the final metrics."""
    args = parse(Args, argv, description=__doc__.split("\n")[0])
    check_args(args)
    if args.eval:
        return evaluate(args)
    return train(args)


def main(argv=None) -> int:
    """The ``bps-train`` entry point."""
    from bps_assets.errors import BpsError

    try:
        run(argv)
    except BpsError as e:  # bad dataset / settings: one clear line, non-zero exit
        print(f"bps-train: error: {e}", file=sys.stderr)
        return 2
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Under torchrun, about 1 run in 4 aborted *after* finishing (everything written, the
        # process group destroyed) with "terminate called without an active exception" in the
        # interpreter's teardown: a native thread of some extension still joinable at exit (not
        # gloo's: it happened without destroy_process_group too; never seen in one process).
        # Skip the teardown once all output is flushed and closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
