"""bps-train: large-batch PPO for PointGoal navigation on bps_runtime, read top to bottom.

The recipe is the paper's (Shacklett et al., 2021): SE-ResNet-9 + Fixup on 64x64 depth, an LSTM
state encoder, PPO with 32-step rollouts, 1 epoch, 2 minibatches, gradient clip 1.0, LAMB
(min trust ratio 0.01, weight decay 1e-2, lr 5e-4 scaled with batch size), normalized advantages.
Simulation and inference overlap: the environments are split into groups of ``batch_size``
(EnvPool's send/recv); while one group simulates, the policy acts on the other.

Multi-GPU / multi-node: run under ``torchrun``; each rank drives its own environments over a
disjoint share of the scenes and gradients are all-reduced (DD-PPO style).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import random
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
    dataset: str = arg("demo_out/manifest.json", "dataset manifest written by `bps-assets preprocess`")
    split: str = arg("train", "scene subset to train on (episodes of that split)")
    eval: str = arg("", "evaluate this checkpoint on --eval-split instead of training")
    eval_split: str = arg("val", "subset used by --eval")
    eval_episodes: int = arg(50, "episodes to evaluate with --eval")
    out_dir: str = arg("runs/ppo", "where checkpoints and logs go")
    resume: bool = arg(True, "continue from OUT_DIR/checkpoint.pt when it exists")
    seed: int = arg(1, "seed of the environments, the policy and the sampler")
    device: str = arg("cpu", "torch device of the environments and the policy (cuda, cpu)")
    renderer: str = arg("embree", "render backend: embree (CPU) or warp (CUDA; CPU for tests)")
    sensor: str = arg("depth", "visual input: depth or rgb")
    resolution: int = arg(64, "square sensor resolution in pixels")
    num_envs: int = arg(64, "environments per rank")
    double_buffer: bool = arg(True, "split environments in two groups so inference overlaps simulation")
    cache_slots: int = arg(4, "resident scenes per rank (the scene cache's slots)")
    total_steps: int = arg(2_000_000, "environment steps to train for, all ranks together")
    rollout_steps: int = arg(32, "steps per environment per rollout")
    epochs: int = arg(1, "PPO epochs per rollout")
    minibatches: int = arg(2, "PPO minibatches per epoch (split over environments)")
    lr: float = arg(5e-4, "LAMB learning rate at the reference batch size")
    lr_ref_batch: int = arg(2048, "batch (envs x steps) at which --lr applies; scaled by sqrt(batch/ref)")
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
    log_every: int = arg(1, "log every N updates")
    save_every: int = arg(10, "checkpoint every N updates")
    threads: int = arg(0, "torch intra-op threads for the policy (0: leave torch's default)")


# ----------------------------------------------------------------------------------- set-up
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


def make_envs(args, rank, world, split, num_envs, seed, auto_reset=True):
    import bps_runtime

    return bps_runtime.make(
        args.dataset, split=split, num_envs=num_envs,
        batch_size=num_envs // 2 if args.double_buffer and num_envs >= 2 else num_envs,
        device=args.device, sensors=(args.sensor,), resolution=(args.resolution, args.resolution),
        cache=args.cache_slots, seed=seed, renderer=args.renderer, scene_shard=(rank, world),
    )


def visual_of(obs, sensor):
    v = obs[sensor]
    return v if sensor == "rgb" else v / 10.0  # depth in metres -> ~0..1


def save_checkpoint(path: Path, policy, opt, update, global_step, args):
    state = {"policy": policy.state_dict(), "optimizer": opt.state_dict(), "update": update,
             "global_step": global_step, "args": dataclasses.asdict(args),
             "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # a crash mid-save never leaves a half checkpoint


def build_policy(args, device):
    channels = 3 if args.sensor == "rgb" else 1
    return Policy(channels, hidden=args.hidden, width=args.width,
                  resolution=(args.resolution, args.resolution)).to(device)


# ----------------------------------------------------------------------------------- eval
def evaluate(args) -> dict:
    ckpt = torch.load(args.eval, map_location=args.device, weights_only=False)
    for k in ("sensor", "resolution", "hidden", "width"):
        setattr(args, k, ckpt["args"][k])
    policy = build_policy(args, args.device)
    policy.load_state_dict(ckpt["policy"])
    policy.eval()
    n = min(args.num_envs, args.eval_episodes)
    args.double_buffer = False
    env = make_envs(args, 0, 1, args.eval_split, n, args.seed + 10_000)
    obs = env.reset()
    state = policy.initial_state(n, args.device)
    prev = torch.full((n,), -1, dtype=torch.long, device=args.device)
    not_done = torch.zeros(n, dtype=torch.bool, device=args.device)
    done_eps, succ, spl = 0, [], []
    with torch.no_grad():
        while done_eps < args.eval_episodes:
            logits, _, state = policy(visual_of(obs, args.sensor), obs["pointgoal"], prev, state, not_done)
            action = logits.argmax(-1)  # greedy, as habitat's eval
            obs, reward, done, info = env.step(action)
            prev = torch.where(done, torch.full_like(action, -1), action)
            not_done = ~done
            for i in torch.nonzero(done).flatten().tolist():
                if done_eps < args.eval_episodes:
                    succ.append(float(info["success"][i]))
                    spl.append(float(info["spl"][i]))
                    done_eps += 1
    env.close()
    res = {"checkpoint": args.eval, "split": args.eval_split, "episodes": done_eps,
           "success": float(np.mean(succ)), "spl": float(np.mean(spl))}
    print(json.dumps(res))
    return res


# ----------------------------------------------------------------------------------- train
def train(args) -> dict:
    rank, world = setup_distributed(args)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed + 1000 * rank)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    policy = build_policy(args, device)
    batch = args.num_envs * args.rollout_steps * world
    lr = args.lr * math.sqrt(batch / args.lr_ref_batch)
    opt = Lamb(policy.parameters(), lr=lr, weight_decay=args.weight_decay, min_trust=args.min_trust)
    update, global_step = 0, 0
    ckpt_path = out / "checkpoint.pt"
    if args.resume and ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
        policy.load_state_dict(ckpt["policy"])
        opt.load_state_dict(ckpt["optimizer"])
        update, global_step = ckpt["update"], ckpt["global_step"]
        torch.set_rng_state(ckpt["rng"]["torch"])
        np.random.set_state(ckpt["rng"]["numpy"])
        random.setstate(ckpt["rng"]["python"])
    if world > 1:  # every rank starts from rank 0's weights
        for p in policy.parameters():
            dist.broadcast(p.data, 0)

    n = args.num_envs
    env = make_envs(args, rank, world, args.split, n, args.seed + 7919 * rank + update)
    groups = n // env.batch_size
    log_file = open(out / f"log_rank{rank}.csv", "a", newline="") if rank == 0 else None
    log = csv.writer(log_file) if log_file else None
    if log_file is not None and log_file.tell() == 0:
        log.writerow(["update", "global_step", "fps", "sim_fps", "reward", "success", "spl", "episodes",
                      "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "lr", "seconds"])

    visual_shape = (args.resolution, args.resolution, 3 if args.sensor == "rgb" else 1)
    ro = Rollout.empty(args.rollout_steps, n, visual_shape,
                       torch.uint8 if args.sensor == "rgb" else torch.float32, args.hidden, device)
    state = policy.initial_state(n, device)
    prev_action = torch.full((n,), -1, dtype=torch.long, device=device)
    not_done = torch.zeros(n, dtype=torch.bool, device=device)
    num_updates = max(1, args.total_steps // batch)
    ep_stats = {"reward": [], "success": [], "spl": []}
    ep_reward = torch.zeros(n, device=device)
    t_start, sim_time = time.perf_counter(), 0.0
    last_metrics: dict = {}

    def act(ids, t, obs):
        """Store obs of envs ``ids`` at step t, pick their actions, and send them."""
        nonlocal state
        ro.visual[t, ids] = visual_of(obs, args.sensor).to(ro.visual.dtype)
        ro.pointgoal[t, ids] = obs["pointgoal"]
        ro.prev_action[t, ids] = prev_action[ids]
        ro.not_done[t, ids] = not_done[ids]
        with torch.no_grad():
            h, c = state[0][:, ids], state[1][:, ids]
            logits, value, (h, c) = policy(ro.visual[t, ids], ro.pointgoal[t, ids], prev_action[ids],
                                           (h, c), not_done[ids])
            state[0][:, ids], state[1][:, ids] = h, c
            d = torch.distributions.Categorical(logits=logits)
            a = d.sample()
        ro.actions[t, ids], ro.logp[t, ids], ro.values[t, ids] = a, d.log_prob(a), value
        env.send(a, ids)

    def receive():
        """Receive one group's results: store reward/done for its last action."""
        nonlocal sim_time
        t0 = time.perf_counter()
        obs, reward, done, info = env.recv()
        sim_time += time.perf_counter() - t0
        ids = info["env_id"].to(device)
        t = step_of[ids[0].item()]  # >= 1: every group acted at least once this rollout
        ro.rewards[t - 1, ids] = reward
        ep_reward[ids] += reward
        for j in torch.nonzero(done).flatten().tolist():
            ep_stats["reward"].append(ep_reward[ids[j]].item())
            ep_stats["success"].append(float(info["success"][j]))
            ep_stats["spl"].append(float(info["spl"][j]))
        ep_reward[ids[done]] = 0
        prev_action[ids] = torch.where(done, torch.full_like(ro.actions[t - 1, ids], -1), ro.actions[t - 1, ids])
        not_done[ids] = ~done
        return ids, t, obs

    # first observation of every group
    env.async_reset()
    step_of = {}
    pending = []
    for _ in range(groups):
        obs, reward, done, info = env.recv()
        ids = info["env_id"].to(device)
        pending.append((ids, obs))

    while update < num_updates:
        t_update = time.perf_counter()
        ro.state0 = (state[0].clone(), state[1].clone())
        for ids, obs in pending:  # step 0 of this rollout for every group
            for i in ids.tolist():
                step_of[i] = 0
            act(ids, 0, obs)
            for i in ids.tolist():
                step_of[i] = 1
        pending = []
        while len(pending) < groups:
            ids, t, obs = receive()
            if t == args.rollout_steps:  # this group's rollout is complete: bootstrap values
                ro.visual[t, ids] = visual_of(obs, args.sensor).to(ro.visual.dtype)
                ro.pointgoal[t, ids] = obs["pointgoal"]
                ro.prev_action[t, ids] = prev_action[ids]
                ro.not_done[t, ids] = not_done[ids]
                with torch.no_grad():
                    _, v, _ = policy(ro.visual[t, ids], ro.pointgoal[t, ids], prev_action[ids],
                                     (state[0][:, ids], state[1][:, ids]), not_done[ids])
                ro.values[t, ids] = v
                pending.append((ids, obs))
                continue
            act(ids, t, obs)
            for i in ids.tolist():
                step_of[i] = t + 1
        global_step += n * args.rollout_steps * world

        # ---- PPO update: one epoch, minibatches split over environments
        adv, returns = gae(ro, args.gamma, args.gae_lambda)
        perm = torch.randperm(n, device=device)
        metrics = {}
        for _ in range(args.epochs):
            for mb in perm.chunk(args.minibatches):
                loss, metrics = ppo_loss(policy, ro, mb, adv, returns, args.clip, args.value_coef,
                                         args.entropy_coef)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if world > 1:
                    for p in policy.parameters():
                        if p.grad is not None:
                            dist.all_reduce(p.grad)
                            p.grad /= world
                torch.nn.utils.clip_grad_norm_(policy.parameters(), args.max_grad_norm)
                opt.step()
                metrics["loss"] = loss.item()
                if not math.isfinite(metrics["loss"]):
                    raise FloatingPointError(f"non-finite loss at update {update}")
        update += 1
        last_metrics = metrics

        # ---- log and checkpoint
        elapsed = time.perf_counter() - t_start
        if log is not None and update % args.log_every == 0:
            mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
            row = [update, global_step, round(n * args.rollout_steps * world * update / max(elapsed, 1e-9), 1),
                   round(n * args.rollout_steps * update / max(sim_time, 1e-9), 1),
                   mean(ep_stats["reward"]), mean(ep_stats["success"]), mean(ep_stats["spl"]),
                   len(ep_stats["reward"]), metrics["loss"], metrics["policy_loss"], metrics["value_loss"],
                   metrics["entropy"], metrics["approx_kl"], lr, round(elapsed, 2)]
            log.writerow(row)
            log_file.flush()
            print(f"update {update}/{num_updates} step {global_step} fps {row[2]} success {row[5]:.3f} "
                  f"spl {row[6]:.3f} loss {metrics['loss']:.4f} ({time.perf_counter() - t_update:.1f}s)",
                  flush=True)
            ep_stats = {k: [] for k in ep_stats}
        if rank == 0 and (update % args.save_every == 0 or update == num_updates):
            save_checkpoint(ckpt_path, policy, opt, update, global_step, args)

    env.close()
    if log_file:
        log_file.close()
    if world > 1:
        dist.destroy_process_group()
    return {"updates": update, "global_step": global_step, **last_metrics}


def main(argv=None):
    args = parse(Args, argv, description=__doc__.split("\n")[0])
    if args.eval:
        return evaluate(args)
    return train(args)


if __name__ == "__main__":
    main()
