"""bps-train: large-batch PPO for bps_runtime's tasks (PointNav, ObjectNav, ImageNav,
InstanceImageNav), read top to bottom.

The recipe is the paper's (Shacklett et al., 2021): SE-ResNet-9 + Fixup on 64x64 depth, an LSTM
state encoder, PPO with 32-step rollouts, 1 epoch, 2 minibatches, gradient clip 1.0, LAMB
(min trust ratio 0.01, weight decay 1e-2, lr 5e-4 scaled with batch size), normalized advantages.
Simulation and inference overlap: the environments are split into groups of ``batch_size``
(EnvPool's send/recv); while the simulator thread steps one group, the policy acts on the other.
Multi-GPU / multi-node: run under ``torchrun``; each rank drives its own environments over a
disjoint share of the scenes (``make(scene_shard=(rank, world))``) and gradients are
all-reduced (DD-PPO style; gloo on CPU). Checkpoints (OUT_DIR/checkpoint.pt) resume the
weights, the optimizer's moments and step counts, the update / frame counters, cumulative wall
time and every rank's torch / numpy / python RNG streams. Episodes in flight and recurrent
states are not saved (as in habitat-baselines): a resumed run restarts its environments with new
episodes (the env seed includes the update index), so it differs from an uninterrupted run.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import random
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import bps_runtime
from bps_runtime.tasks import TASKS
from bps_train.args import arg, check_device, check_minimums, parse, writable_dir
from bps_train.lazy import lazy

# torch and what is built on it load on first use: --help and argument errors answer at once
torch, dist = lazy("torch"), lazy("torch.distributed")
checkpoint, learner_cpu = lazy("bps_train.checkpoint"), lazy("bps_train.learner_cpu")
Lamb, Policy = lazy("bps_train.lamb", "Lamb"), lazy("bps_train.models", "Policy")
FrozenAct = lazy("bps_train.frozen_act", "FrozenAct")
Rollout, gae, ppo_loss, sample_actions = (lazy("bps_train.ppo", n) for n in ("Rollout", "gae", "ppo_loss",
                                                                              "sample_actions"))

# a run's files in OUT_DIR (written below; moved aside together by move_previous_run)
CHECKPOINT_FILE, LOG_FILE, SIM_ONLY_FILE, TB_DIR = "checkpoint.pt", "log.csv", "sim_only.jsonl", "tb"
RUN_FILES = (CHECKPOINT_FILE, LOG_FILE, SIM_ONLY_FILE, TB_DIR)
SNAPSHOT_PREFIX = "ckpt_"   # OUT_DIR/ckpt_UPDATE.pt (--snapshot-every)
SAMPLED_EVAL = 100   # --eval --eval-episodes 0 on sampled episodes (no file): this many


@dataclass
class Args:
    dataset: str = arg("demo_out/manifest.json", "dataset manifest written by `bps-assets preprocess` / `demo`")
    split: str = arg("train", "scene subset to train on")
    task: str = arg("pointnav", "the navigation task (habitat-lab's rules and defaults)", choices=TASKS)
    episodes: str = arg("sample", "training episodes: sample (fresh, habitat-lab's rules), dataset (the split's "
                                  "PointNav files) or a habitat v1 split file (ObjectNav: its ObjectNav v1 file)")
    eval: str = arg("", "evaluate this checkpoint (or 'random': a uniform random policy; 'stop': STOP at once) "
                        "instead of training")
    eval_episodes_file: str = arg("", "with --eval: a habitat v1 split file to evaluate on (default: the split's "
                                      "PointNav files; ObjectNav, InstanceImageNav: episodes sampled with --seed)")
    eval_split: str = arg("val", "scene subset used by --eval (its dataset episodes)")
    eval_episodes: int = arg(0, "distinct episodes to evaluate with --eval: the first N started, each counted "
                                "once, on its first run (0: all of the split's or of --eval-episodes-file; "
                                f"sampled episodes (ObjectNav, InstanceImageNav without a file): {SAMPLED_EVAL}); "
                                "min(N, 64) environments (sampled over more scenes than cache slots: fewer)")
    eval_greedy: bool = arg(False, "--eval takes the most likely action (false: samples it, as habitat-baselines)")
    video: int = arg(0, "with --eval: write this many distinct episodes (of those evaluated) as videos to "
                          "OUT_DIR/videos (sensors, map, metrics)")
    video_format: str = arg("auto", "--video files: auto (mp4 when PyAV is installed, else gif), mp4, gif or png (frames)")
    out_dir: str = arg("runs/ppo", "where checkpoints and logs go")
    resume: bool = arg(True, "continue from OUT_DIR/checkpoint.pt when it exists (same dataset, model and NUM_ENVS; --no-resume: start fresh)")
    seed: int = arg(1, "seed of the environments, the policy and the sampler")
    device: str = arg("cpu", "torch device of the environments and the policy: cpu, cuda or cuda:INDEX")
    renderer: str = arg("embree", "render backend: embree (CPU) or warp (CUDA; CPU for tests)")
    sensor: str = arg("depth", "visual input: depth or rgb")
    resolution: int = arg(64, "square sensor resolution in pixels")
    lod: str = arg("auto", "converter LOD level the scenes load: auto (the coarsest within a pixel at 1 m), "
                           "full (the full mesh) or a level index 0-7 (docs/RUNTIME.md, Converter LOD level)")
    num_envs: int = arg(32, "environments per rank")
    double_buffer: bool | None = arg(None, "two groups of NUM_ENVS/2 so inference on one overlaps simulation of "
                                           "the other (one group when NUM_ENVS is odd: make's groups are all one "
                                           "size); auto: two, except on the CPU when this rank has one core or less "
                                           "(torchrun with a rank per core, a 1-core host), where two groups cost more "
                                           "than they overlap; true / false decide everywhere")
    cache_slots: int = arg(0, "resident scenes per rank (the scene cache's slots; 0: the runtime's default)")
    scene_repeat_steps: int = arg(10_000, "training keeps each cache slot's scene about this many steps per env, then "
                                          "streams in the next (habitat-lab's max_scene_repeat_steps; only with more "
                                          "of the rank's scenes than slots; 0: never swap)")
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
    stop_bias: float = arg(0.0, "initial bias of the STOP logit (e.g. -3: STOP ~1% of the time at first, so early "
                                "ObjectNav episodes are long random walks instead of an early STOP)")
    hidden: int = arg(256, "LSTM and visual feature width")
    width: int = arg(16, "channels of the first ResNet stage (x2 per stage)")
    sim_only_steps: int = arg(20, "random-action steps per group at the start and the end, timed as simulation-only fps (0: skip)")
    log_every: int = arg(1, "log every N updates")
    save_every: int = arg(10, "checkpoint every N updates")
    snapshot_every: int = arg(0, "also keep OUT_DIR/ckpt_UPDATE.pt every N updates, for learning curves (0: never)")
    tensorboard: bool = arg(False, "also write TensorBoard events to OUT_DIR/tb (needs `pip install tensorboard`)")
    threads: int = arg(0, "CPU threads for the env's renderer and step, and torch's intra-op threads outside the "
                          "rollout's acting (--act-threads) and the update (--learn-threads), e.g. --eval's policy "
                          "(0: every core this process may use, shared between torchrun's ranks on a CPU host; "
                          "torch's default on one rank)")
    frozen_act: bool = arg(False, "on the CPU, the rollout acts through a frozen TorchScript copy of the policy "
                                  "(re-frozen after each update; the same function to float rounding, 3-5% less CPU; fp32 only: "
                                  "where --bf16 autocasts, the rollout acts eagerly; "
                                  "off by default: TorchScript is deprecated in torch 2.13 and the wall-clock gain is "
                                  "1.00-1.03x on a quiet machine)")
    act_threads: int = arg(0, "torch's intra-op threads while the rollout's policy acts (0: 1 on the CPU, where the "
                              "renderer's threads run beside it and more oversubscribe the cores; --threads on CUDA)")
    learn_threads: int = arg(0, "torch's intra-op threads during the PPO update on the CPU, when the simulator idles "
                                "(0: --threads, or with --threads 0 every core this process may use, shared between "
                                "torchrun's local ranks)")
    capture_graph: bool = arg(False, "on CUDA, replay each env group's step and frame as a captured CUDA graph "
                                     "(falls back to plain launches where capture fails; the log says which)")
    categories: str = arg("", "ObjectNav / InstanceImageNav goal categories of sampled episodes: hm3d (habitat's "
                              "six HM3D ones), mp3d (its 21 MP3D ones) or all (every object class); '': hm3d, "
                              "an episode file's own map, and with --eval of sampled episodes the checkpoint's")
    noise: str = arg("", "sensor and actuation noise (habitat-sim's models, docs/NOISE.md): a preset (challenge2021: "
                         "its noise) or key=value pairs, e.g. depth=redwood,rgb=gaussian,actuation=locobot-ilqr,"
                         "multiplier=0.5 ('': none; with --eval: the checkpoint's)")
    bf16: bool = arg(True, "bf16 autocast of the policy's forward passes on CUDA and on CPUs with native bf16 (AVX-512 "
                     "BF16 or AMX; fp32 on other CPUs); the loss stays fp32")


# ----------------------------------------------------------------------------------- set-up
def check_args(args):
    from bps_assets.errors import ConfigError
    from bps_runtime.tasks import TASKS

    if args.sensor not in ("depth", "rgb"):
        raise ConfigError(None, f"--sensor {args.sensor!r}: expected depth or rgb")
    check_device(args.device)
    if args.task not in TASKS:
        raise ConfigError(None, f"--task {args.task!r}: expected one of {', '.join(TASKS)}")
    if args.episodes not in ("sample", "dataset") and not os.path.exists(args.episodes):
        raise ConfigError(None, f"--episodes {args.episodes!r}: " + episodes_problem(args.episodes))
    if args.noise:
        from bps_runtime.noise.presets import noise_options
        noise_options(args.noise)   # a bad --noise fails here, before any work
    if args.lr_schedule not in ("cosine", "constant"):
        raise ConfigError(None, f"--lr-schedule {args.lr_schedule!r}: expected cosine or constant")
    if args.num_envs < 1 or args.rollout_steps < 1 or args.epochs < 1 or args.total_steps < 1:
        raise ConfigError(None, "--num-envs, --rollout-steps, --epochs and --total-steps must be >= 1")
    if args.video < 0 or (args.video and not args.eval):
        raise ConfigError(None, f"--video {args.video}: a number of episodes >= 0, written by --eval CKPT")
    eval_only = [f"--{k.replace('_', '-')}" for k in ("eval_episodes_file", "eval_episodes", "eval_greedy")
                 if getattr(args, k)]
    if eval_only and not args.eval:   # training never evaluates: a file named here would go unread
        raise ConfigError(None, f"{', '.join(eval_only)}: with --eval CKPT only (this run trains)")
    check_minimums(args, {"seed": 0, "save_every": 1, "log_every": 1, "resolution": 1, "threads": 0, "act_threads": 0,
                          "learn_threads": 0, "hidden": 1, "width": 1, "snapshot_every": 0, "sim_only_steps": 0,
                          "cache_slots": 0, "eval_episodes": 0, "lr_ref_batch": 1, "scene_repeat_steps": 0})
    if not 1 <= args.minibatches <= args.num_envs:
        raise ConfigError(None, f"--minibatches {args.minibatches}: must be in 1..NUM_ENVS ({args.num_envs}); "
                                "minibatches split the environments (whole recurrent sequences)")


def episodes_problem(value: str) -> str:
    """What is wrong with an --episodes value that is neither a mode nor an existing file."""
    from bps_assets.errors import did_you_mean

    if "{split}" in value:
        return "habitat-lab's {split} data_path template: give the file itself (fill in the split)"
    if os.sep in value or value.endswith((".json", ".json.gz")):
        return "no such episode file"
    hint = did_you_mean(value, ("sample", "dataset"), n=1)
    return "expected sample, dataset or an episode file" + (f"; {hint}" if hint else "")


def setup_distributed(args):
    """(rank, world): torchrun sets WORLD_SIZE; gloo on CPU, nccl on CUDA."""
    world = learner_cpu.launcher_count("WORLD_SIZE")
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


def host_share(device) -> tuple[int, int]:
    """(cores this rank may use, ranks on this host): on the CPU under torchrun the host's cores are
    shared between its ranks (``learner_cpu.core_share``); (every usable core, 1) otherwise."""
    from bps_assets.host import available_cores

    if torch.device(device).type != "cpu":
        return available_cores(), 1
    return learner_cpu.core_share(), learner_cpu.local_ranks()


def rank_threads(args, device) -> int:
    """This rank's CPU threads (the env's renderer and step; torch's outside the rollout's acting and
    the update): ``--threads``, else with several ranks on a CPU host its share of the cores
    (``host_share``), else 0 (the runtime's default: every usable core)."""
    if args.threads:
        return args.threads
    cores, local = host_share(device)
    return cores if local > 1 else 0


def double_buffered(args, device) -> bool:
    """``--double-buffer`` true / false as given; auto (None): double buffering except on a CPU
    rank with one core to itself (e.g. torchrun with a rank per core): the second group's policy
    would have no idle core to overlap the simulator on, and two groups cost more CPU per frame
    than one (docs/PERFORMANCE.md, "One rank per core")."""
    if args.double_buffer is not None:
        return args.double_buffer
    return not (torch.device(device).type == "cpu" and host_share(device)[0] == 1)


def one_core_rule_layout(saved_args: dict, device) -> dict:
    """The layout bps-train of eef6654 to 8e960f4 gave a checkpoint's saved args on this host
    (those checkpoints record none): ``--double-buffer`` true then meant auto (``double_buffered``)
    and ``rank_threads`` as now; for ``checkpoint.layout_note``."""
    import types

    old = types.SimpleNamespace(num_envs=saved_args.get("num_envs", 0), threads=saved_args.get("threads", 0),
                                double_buffer=None if saved_args.get("double_buffer", True) is not False else False)
    dev = saved_args.get("device", device)
    return checkpoint.layout(num_groups(old.num_envs, double_buffered(old, dev)), rank_threads(old, dev))


def num_groups(num_envs: int, double_buffer: bool) -> int:
    """Env groups the rollout alternates: 2 of NUM_ENVS/2 with double buffering, else 1 (also for
    an odd NUM_ENVS: make's batch_size must divide num_envs, so groups cannot differ in size)."""
    return 2 if double_buffer and num_envs >= 2 and num_envs % 2 == 0 else 1


def scenes_and_slots(args, split, num_envs, scene_shard=None) -> tuple[int, int]:
    """(the rank's scenes of ``split``, its cache slots K): the cache swaps only when the first
    outnumbers the second (``scene_rotation``, ``eval_envs_and_swaps``)."""
    from bps_assets.pipeline.manifest import load_manifest
    from bps_runtime.scenes.cache import DEFAULTS

    rank, world = scene_shard or (0, 1)
    return (len(load_manifest(args.dataset).scenes(split)[rank::world]),
            min(args.cache_slots or DEFAULTS.slots, num_envs))


def scene_rotation(args, split, num_envs, scene_shard=None) -> dict:
    """The scene cache's swap schedule of a training rank (``--scene-repeat-steps`` N): with more
    of the rank's scenes than its K slots, one slot swaps every ceil(N / K) rounds (a round: every
    env steps once), round robin, so each slot keeps a scene for about N steps of each of its envs
    (habitat-lab's ``max_scene_repeat_steps``); {} (the cache's default: no swaps) for N = 0 or when
    every scene has a slot."""
    n = args.scene_repeat_steps
    if not n:
        return {}
    scenes, slots = scenes_and_slots(args, split, num_envs, scene_shard)
    return {"swap_every": -(-n // slots)} if scenes > slots else {}


def env_config(args, split, num_envs, seed, episodes, double_buffer, scene_shard=None, swaps=None, threads=None):
    """The ``EnvConfig`` ``bps_runtime.make`` builds the environments from (compared on resume before
    anything is built); ``swaps``: the cache's swap fields (``scene_rotation``); ``threads``: the
    env's CPU threads (None: ``--threads``; 0: the runtime's default)."""
    from bps_runtime import EnvConfig

    kw = {} if scene_shard is None or scene_shard[1] == 1 else {"scene_shard": scene_shard}
    cache = {**({"slots": args.cache_slots} if args.cache_slots else {}), **(swaps or {})}
    if cache:
        kw["cache"] = cache
    threads = args.threads if threads is None else threads
    if threads:
        kw["threads"] = threads
    if args.noise:
        kw["noise"] = args.noise
    if args.lod != "auto":   # make's default: a run without it keeps the identity it had
        kw["lod"] = args.lod
    if args.categories:
        kw["categories"] = args.categories
    return EnvConfig.from_kwargs(
        args.dataset, split=split, num_envs=num_envs,
        batch_size=num_envs // num_groups(num_envs, double_buffer),
        device=args.device, sensors=(args.sensor,), resolution=(args.resolution, args.resolution),
        seed=seed, renderer=args.renderer, episodes=episodes, capture_graph=args.capture_graph, task=args.task, **kw)


def visual_of(obs, sensor):
    """Depth arrives normalized 0..1 (habitat's 0-10 m), RGB as uint8; both go in as they are."""
    return obs[sensor]


def goal_of(obs, task: str):
    """The task's goal input of the policy (``Policy``; ``TaskSpec.goal_input``)."""
    from bps_runtime.tasks import task_spec

    return task_spec(task).goal_input(obs)


def goal_spec(args):
    """(shape, dtype) of one env's goal input (``TaskSpec.goal_input_spec``)."""
    from bps_runtime.tasks import task_spec

    return task_spec(args.task).goal_input_spec((args.resolution, args.resolution))


def num_actions(task: str) -> int:
    from bps_runtime.tasks import task_spec

    return task_spec(task).num_actions


def build_policy(args, device):
    """On CUDA the convolutions run channels-last (the frames arrive NHWC, so no transpose), as
    cuDNN's fastest kernels want; on CPU the layout is left to oneDNN."""
    channels = 3 if args.sensor == "rgb" else 1
    policy = Policy(channels, num_actions(args.task), hidden=args.hidden, width=args.width,
                    resolution=(args.resolution, args.resolution), task=args.task).to(device)
    if args.stop_bias:
        with torch.no_grad():
            policy.actor.bias[0] = args.stop_bias
    if torch.device(device).type == "cuda":
        policy = policy.to(memory_format=torch.channels_last)
    return policy


def autocast_of(args, device):
    """A factory of the policy's autocast context (--bf16): bf16 on CUDA, and on a CPU with native
    bf16 (``models.cpu_bf16_supported``); fp32 on other CPUs (emulated bf16 is slower than fp32).
    docs/PERFORMANCE.md, "CPU learner, fourth pass"."""
    from bps_train.models import cpu_bf16_supported

    kind = torch.device(device).type
    if args.bf16 and (kind == "cuda" or (kind == "cpu" and cpu_bf16_supported())):
        return lambda: torch.autocast(kind, dtype=torch.bfloat16)
    return contextlib.nullcontext


def scaled_lr(args, world: int) -> float:
    """bps-nav's rule: the base rate times sqrt(minibatch frames over all ranks / 256), never below 1x."""
    minibatch = args.num_envs * args.rollout_steps / args.minibatches * world
    return args.lr * max(1.0, math.sqrt(minibatch / args.lr_ref_batch))


def lr_factor(schedule: str, progress: float) -> float:
    """Multiplier of the scaled rate at ``progress`` (0..1 of total steps)."""
    if schedule == "constant":
        return 1.0
    if schedule != "cosine":
        from bps_assets.errors import ConfigError

        raise ConfigError(None, f"--lr-schedule {schedule!r}: expected cosine or constant")
    if progress < 0.01:
        return 0.5 + 0.5 * progress / 0.01
    x = min(1.0, (progress - 0.01) / 0.99)
    return 0.01 + 0.99 * (math.cos(x * math.pi) + 1) / 2


# ----------------------------------------------------------------------------------- simulation only
def measure_sim_fps(env, steps: int, seed: int, actions=(0, 1, 2, 3)) -> float:
    """Frames/s of the environments alone: random ``actions`` through the same send/recv
    double buffer the trainer uses, no policy, no learning."""
    frames, seconds, _ = sim_window(env, steps, seed, actions)
    return frames / seconds


def sim_window(env, steps: int, seed: int, actions=(0, 1, 2, 3), start=None) -> tuple[int, float, float]:
    """``measure_sim_fps``'s timed window: (frames, wall seconds, process CPU seconds) of the
    ``steps`` batched steps alone; the reset and the first send happen before it starts, then
    ``start()`` if given (ranks line up there)."""
    g = torch.Generator().manual_seed(seed)
    choice = torch.tensor(actions)
    rand = lambda: choice[torch.randint(0, len(actions), (env.batch_size,), generator=g)].to(env.device)  # noqa: E731
    env.async_reset()
    groups = env.num_envs // env.batch_size
    for _ in range(groups):  # the reset observations
        env.recv()
    for _ in range(groups):
        env.send(rand())
    if start is not None:
        start()
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(steps * groups):
        env.recv()
        env.send(rand())
    for _ in range(groups):
        env.recv()
    if env.device.type == "cuda":  # recv returns once a step is queued: count its device work too
        torch.cuda.synchronize(env.device)
    return (steps + 1) * env.num_envs, time.perf_counter() - t0, time.process_time() - c0


def measure_sim_only(env, steps: int, seed: int) -> dict:
    """Simulation-only fps two ways: uniform random actions (a STOP every 4 steps: reset-heavy)
    and random moves without STOP (episodes end at the step limit, like a trained policy's
    long episodes). The trainer divides by the faster, so its ratio is not flattered."""
    uniform = measure_sim_fps(env, steps, seed)
    moves = measure_sim_fps(env, steps, seed + 1, actions=(1, 2, 3))
    return {"uniform": uniform, "no_stop": moves, "sim_fps": max(uniform, moves)}


def report_sim_only(env, args, rank: int, world: int, out: Path, update: int, seed: int,
                    end_to_end_fps: float | None = None) -> float:
    """Measure simulation-only fps on every rank at once, print it and append it to
    OUT_DIR/sim_only.jsonl (rank 0); returns the faster of the two figures, all ranks summed."""
    m = measure_sim_only(env, args.sim_only_steps, seed)
    sim = torch.tensor([m["uniform"], m["no_stop"]], dtype=torch.float64)
    if world > 1:  # every rank simulates its own environments at the same time
        dist.all_reduce(sim)
    best = sim.max().item()
    if rank == 0:
        record = {"update": update, "uniform": sim[0].item(), "no_stop": sim[1].item(), "world": world,
                  "num_envs": args.num_envs}
        if end_to_end_fps is None:
            print(f"simulation only ({world} rank(s), {args.num_envs} envs each): {sim[0]:.0f} frames/s with "
                  f"uniform random actions, {sim[1]:.0f} with random moves (no STOP); ratios below use "
                  f"{best:.0f}", flush=True)
        else:
            record["end_to_end_fps"] = end_to_end_fps
            print(f"simulation only at the end: {sim[0]:.0f} frames/s uniform, {sim[1]:.0f} no STOP; this run's "
                  f"end-to-end {end_to_end_fps:.0f} frames/s = x{end_to_end_fps / best:.2f} of the end "
                  "measurement", flush=True)
        with open(out / SIM_ONLY_FILE, "a") as f:
            f.write(json.dumps(record) + "\n")
    return best


# ----------------------------------------------------------------------------------- rollouts
@dataclass
class Carry:
    """What one rollout hands to the next: recurrent state, previous actions, episode starts,
    and each group's latest observation (received, not yet acted on) as (group, env ids, obs)."""

    state: tuple
    prev_action: torch.Tensor
    not_done: torch.Tensor
    pending: list
    scenes: list  # the scenes the environments started in


def start_rollouts(env, policy, device) -> Carry:
    env.async_reset()
    n, b = env.num_envs, env.batch_size
    pending, scenes = [], set()
    for _ in range(n // b):
        obs, _, _, info = env.recv()
        ids = info["env_id"]
        pending.append((int(ids[0]) // b, ids, obs))   # read once per run; the rollouts never read ids
        scenes.update(info.get("scene_id", []))
    return Carry(policy.initial_state(n, device), torch.full((n,), -1, dtype=torch.long, device=device),
                 torch.zeros(n, dtype=torch.bool, device=device), pending, sorted(scenes))


EPISODE_SUMS = ("episodes", "return", "success", "spl", "length")   # what collect_rollout's first result sums


def collect_rollout(env, policy, ro: Rollout, carry: Carry, sensor: str,
                    amp=contextlib.nullcontext, task: str = "pointnav") -> tuple[torch.Tensor, float]:
    """Fill ``ro`` with T steps of every environment, group by group: while the simulator thread
    steps one group, the policy acts on the other. Returns the finished episodes' sums
    (``EPISODE_SUMS``: count, return, success, SPL, length; a float64 tensor on the rollout's device,
    read by the caller when it logs) and the seconds spent waiting in ``recv``. ``amp()`` is
    entered around the policy's forward passes only (never around the environment's work).

    Nothing here waits for the device (on CUDA each wait would drain the queue that overlaps
    simulation and inference): ``recv`` hands groups back in the order they were sent, so the
    group is known on the host; a group's envs are one contiguous range, stored through slices;
    episode stats are summed on the device; the env ids handed to ``send`` are the env's own
    tensors, which it recognises without reading them."""
    T = ro.steps
    b = env.batch_size
    groups = env.num_envs // b
    step_of = [0] * groups
    sent: deque = deque()        # (group, env ids) in the order sent: the order recv returns them
    state, prev_action, not_done = carry.state, carry.prev_action, carry.not_done
    sums = torch.zeros(len(EPISODE_SUMS), dtype=torch.float64, device=ro.rewards.device)
    waited = 0.0

    def observe(sl, t, obs):
        ro.visual[t, sl] = visual_of(obs, sensor)
        ro.goal[t, sl] = goal_of(obs, task)
        ro.prev_action[t, sl] = prev_action[sl]
        ro.not_done[t, sl] = not_done[sl]

    def act(g, ids, t, obs):
        sl = slice(g * b, (g + 1) * b)
        observe(sl, t, obs)
        with torch.no_grad():
            with amp():
                logits, value, (h, c) = policy(ro.visual[t, sl], ro.goal[t, sl], prev_action[sl],
                                               (state[0][:, sl], state[1][:, sl]), not_done[sl])
            a, logp = sample_actions(logits.float())   # Categorical's draw, with no device wait
        state[0][:, sl], state[1][:, sl] = h, c
        ro.actions[t, sl], ro.logp[t, sl], ro.values[t, sl] = a, logp, value.float()
        env.send(a.to(env.device), ids)
        sent.append((g, ids))
        step_of[g] = t + 1

    ro.state0 = (state[0].clone(), state[1].clone())
    for g, ids, obs in carry.pending:  # step 0 of every group
        act(g, ids, 0, obs)
    carry.pending = []
    while len(carry.pending) < groups:
        t0 = time.perf_counter()
        obs, reward, done, info = env.recv()
        waited += time.perf_counter() - t0
        g, ids = sent.popleft()
        sl = slice(g * b, (g + 1) * b)
        t = step_of[g]  # >= 1: the group acted this rollout
        done = done.to(ro.rewards.device)
        ro.rewards[t - 1, sl] = reward
        ep = info["episode"]
        got = torch.stack([ep["return"], ep["success"], ep["spl"], ep["length"]]).to(ro.rewards.device, torch.float64)
        sums[0] += done.sum()
        sums[1:] += torch.where(done, got, 0.0).sum(1)
        prev_action[sl] = torch.where(done, -1, ro.actions[t - 1, sl])
        not_done[sl] = ~done
        if t < T:
            act(g, ids, t, obs)
            continue
        observe(sl, T, obs)  # the group's rollout is complete: value of its last observation
        with torch.no_grad(), amp():
            _, v, _ = policy(ro.visual[T, sl], ro.goal[T, sl], prev_action[sl],
                             (state[0][:, sl], state[1][:, sl]), not_done[sl])
        ro.values[T, sl] = v.float()
        carry.pending.append((g, ids, obs))  # acted on as step 0 of the next rollout
    return sums, waited


def learn(policy, opt, ro: Rollout, args, amp, world: int = 1) -> dict:
    """One PPO update on rollout ``ro``: ``args.epochs`` passes over ``args.minibatches``
    minibatches of whole env sequences. -> the last minibatch's metrics as floats, ``loss``
    the first non-finite minibatch loss if any, else the last one. The metrics are read once, at
    the end (a device wait; reading them per minibatch stalled the GPU between minibatches)."""
    params = list(policy.parameters())
    adv, returns = gae(ro, args.gamma, args.gae_lambda)
    losses, m = [], {}
    for _ in range(args.epochs):
        for mb in torch.randperm(ro.actions.shape[1], device=ro.actions.device).chunk(args.minibatches):
            loss, m = ppo_loss(policy, ro, mb, adv, returns, args.clip, args.value_coef, args.entropy_coef, amp, world)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if world > 1:
                all_reduce_grads(params, world)
            torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
            opt.step()
            losses.append(loss.detach())
    vals = torch.stack([*losses, *m.values()]).tolist()
    loss_vals, rest = vals[:len(losses)], vals[len(losses):]
    bad = [v for v in loss_vals if not math.isfinite(v)]
    return {"loss": bad[0] if bad else loss_vals[-1], **dict(zip(m, rest))}


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
def load_policy(path, args, device):
    """The policy of checkpoint ``path``; its sensor, resolution, sizes and task replace ``args``'s,
    and its noise too unless ``args.noise`` names one (an eval under other noise); its goal
    categories too where ``args.categories`` is unset and the eval samples its episodes (an
    episode file's goals are its own; ``check_goal_categories`` compares the maps)."""
    ckpt = checkpoint.load(path, map_location=device)
    for k in ("sensor", "resolution", "hidden", "width"):
        setattr(args, k, ckpt["args"][k])
    args.task = ckpt["args"].get("task", "pointnav")
    if not args.noise:
        args.noise = ckpt["args"].get("noise", "")
    if not args.categories and eval_source(args) == "sample":   # an episode file's goals are its own
        args.categories = ckpt["args"].get("categories", "")
    policy = build_policy(args, device)
    checkpoint.restore(path, ckpt, policy)
    return ckpt, policy


def _checked(env, check, *args) -> None:
    """``check(*args)``; the env closed when it raises."""
    try:
        check(*args)
    except BaseException:
        env.close()
        raise


def eval_source(args) -> str:
    """``--eval``'s episodes: ``--eval-episodes-file``, else the task's ``TaskSpec.eval_episodes``
    ("dataset": the split's files; "sample": generated from ``--seed``)."""
    from bps_runtime.tasks import task_spec

    return args.eval_episodes_file or task_spec(args.task).eval_episodes


def evaluate(args) -> dict:
    """habitat-lab's metrics (success, spl, soft_spl, distance_to_goal; soft_spl: every task's
    info["episode"]) over distinct episodes of ``eval_split`` (the first started, each counted once, on
    the run that started it first), of a
    checkpoint, a uniform random policy (``--eval random``) or STOP at once (``--eval stop``).
    Episodes: ``--eval-episodes-file``, else the split's PointNav files, else (ObjectNav)
    episodes sampled from ``--seed``."""
    from bps_runtime.episodes.dataset_info import (episodes_read_once, file_episode_count,
                                                   scene_and_episode_counts)
    from bps_runtime.tasks import task_spec

    if args.threads:
        torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    device = torch.device(args.device)
    policy, trained, ckpt = None, {}, None
    if args.eval not in ("random", "stop"):
        ckpt, policy = load_policy(args.eval, args, device)
        for note in (checkpoint.noise_note(args.eval, ckpt), checkpoint.episode_note(args.eval, ckpt)):
            if note:
                print(note, file=sys.stderr, flush=True)
        policy.eval()
        trained = {"update": ckpt["update"], "global_step": ckpt["global_step"]}   # where the report puts it
    source = eval_source(args)
    with episodes_read_once():   # the split's episode files: read once for the count and the envs
        if source == "sample":
            total = args.eval_episodes or SAMPLED_EVAL
        elif args.eval_episodes_file:   # its distinct episodes on the split's scenes, read as the task reads it
            total = file_episode_count(args.dataset, args.eval_split, args.eval_episodes_file,
                                       task_spec(args.task).episode_file)
        else:
            _, total = scene_and_episode_counts(args.dataset, args.eval_split)
        want = min(args.eval_episodes or total, total)
        n, swaps = eval_envs_and_swaps(args, source, want)
        recorder = None
        if args.video:   # the agent's own sensors, beside the map
            from bps_train.video import eval_recorder

            recorder = eval_recorder(args)
        env = bps_runtime.make(config=env_config(args, args.eval_split, n, args.seed + 10_000, source,
                                                  double_buffer=False, swaps=swaps))
    if ckpt is not None:   # the policy's category ids must mean the episodes' categories
        saved = checkpoint.saved_identity(ckpt)
        if note := checkpoint.categories_note(args.eval, saved):
            print(note, file=sys.stderr, flush=True)
        _checked(env, checkpoint.check_goal_categories, args.eval, saved.get("goal_categories"),
                 env.goal_categories, source)
    if recorder is not None:
        recorder.goals_for = env.episode_goals   # each video's goal (ObjectNav's objects, ImageNav's image)
        recorder.action_names = env.ACTIONS
    k_actions = env.num_actions
    if recorder is not None and args.video > want:   # more would wait for repeats of episodes written
        print(f"bps-train: --video {args.video} capped at the {want} episode(s) evaluated", file=sys.stderr, flush=True)
        recorder.cap(want)
    t0 = time.perf_counter()
    results: dict = {}
    frames, max_frames = 0, eval_frame_cap(want, env.task.max_episode_steps)
    names = ("success", "spl", "soft_spl", "distance_to_goal")
    # the episodes counted: the first `want` distinct (scene, episode id) started, each on the run
    # that started it first (episode_claims: a repeat is not counted, as habitat runs each once)
    from bps_train.episode_claims import EpisodeClaims

    claims = EpisodeClaims(want)
    counted: dict = {}   # env -> the key of its running episode, when that run is the counted one

    def claim(envs, info):
        ids = env.episode_ids
        for i in envs:
            key = (str(info["scene_id"][i]), str(ids[i]))
            if claims.claim(key):
                counted[i] = key
            elif claims.taken(key):   # a repeat: every episode of its scene has started
                env.world.scenes.request_swap_from(i, key[0])
    try:
        obs = env.reset()
        claim(range(n), env.last_info)
        if recorder is not None:
            recorder.reset(obs, env.last_info)
        state = policy.initial_state(n, device) if policy else None
        prev = torch.full((n,), -1, dtype=torch.long, device=device)
        not_done = torch.zeros(n, dtype=torch.bool, device=device)
        with torch.no_grad():
            while (len(results) < want or (recorder is not None and not recorder.finished)) and frames < max_frames:
                if policy is None:
                    action = (torch.zeros(n, dtype=torch.long) if args.eval == "stop"
                              else torch.randint(0, k_actions, (n,)))
                else:
                    logits, _, state = policy(visual_of(obs, args.sensor), goal_of(obs, args.task), prev, state,
                                              not_done)
                    action = logits.argmax(-1) if args.eval_greedy else torch.distributions.Categorical(
                        logits=logits).sample()
                obs, reward, done, info = env.step(action.to(env.device))
                frames += n
                if recorder is not None:
                    recorder.step(obs, done, info, actions=action)
                done = done.to(device)
                prev = torch.where(done, torch.full_like(action, -1), action.to(device))
                not_done = ~done
                ep = info["episode"]
                ended = torch.nonzero(done).flatten().tolist()
                for i in ended:
                    key = counted.pop(i, None)
                    if key is not None:
                        results[key] = {**{m: float(ep[m][i]) for m in names if m in ep}, "length": int(ep["length"][i])}
                if ended:
                    claim(ended, info)
    finally:
        env.close()
        if recorder is not None:
            recorder.close()   # the videos still being written
    vals = list(results.values())

    def mean(m):
        got = [v[m] for v in vals if m in v]
        return float(np.mean(got)) if got else float("nan")

    res = {"checkpoint": args.eval, **trained, "task": args.task, "split": args.eval_split, "episodes": len(vals),
           **{m: mean(m) for m in names if not vals or m in vals[0]},
           "mean_length": mean("length"), "seed": args.seed,
           "frames": frames, "seconds": round(time.perf_counter() - t0, 1)}
    if len(vals) < want:   # the frame cap ended it: the means are of fewer episodes than asked
        res["episodes_wanted"] = want
        print(f"bps-train: --eval stopped at its cap of {max_frames} frames with {len(vals)} of {want} "
              "episode(s) ended (a policy that rarely ends an episode before its step limit)",
              file=sys.stderr, flush=True)
    if recorder is not None:
        res["videos"] = [str(p) for p in recorder.written]
    print(json.dumps(res), flush=True)
    return res


def eval_envs_and_swaps(args, source, want: int) -> tuple[int, dict]:
    """(envs, the cache's swap fields) of an eval of ``want`` episodes: min(``want``, 64) envs (each
    draws from its scene's episode cycle: a short split repeats). With more of the split's scenes
    than the K cache slots, sampled episodes (which never repeat) move each slot on after
    s = ceil(``want`` / scenes) episodes and run at most K x s envs, so the episodes started
    together at reset are s per slot too and the eval spreads over the scenes; file episodes
    need no swap fields (``SceneCache.request_swap_from``)."""
    n = max(1, min(want, 64))
    if source != "sample":
        return n, {}
    scenes, slots = scenes_and_slots(args, args.eval_split, n)
    if scenes <= slots:
        return n, {}
    per_scene = -(-want // scenes)
    return min(n, slots * per_scene), {"swap_after_episodes": per_scene}


def eval_frame_cap(want: int, max_episode_steps: int) -> int:
    """The most frames ``evaluate`` steps for ``want`` episodes (a stuck policy still ends: every
    episode ends at the task's step limit); reaching it is said, with ``episodes_wanted``."""
    return 2 * want * (max_episode_steps + 100) + 10_000


# ----------------------------------------------------------------------------------- stopping, logs
class StopOnSignal:
    """The first SIGINT / SIGTERM asks the loop to stop after the update in progress, save a
    checkpoint and leave cleanly; a second one stops at once with exit status 130
    (``stop.stop_now``: the last checkpoint, written whole, is kept). Handlers are only
    installed from the main thread (Python's rule). Only rank 0 (which saves) says so; under
    torchrun the launcher, not the ranks, gets a second Ctrl-C."""

    def __init__(self, rank: int = 0, world: int = 1):
        self.rank, self.world = rank, world
        self.signum, self._old = None, {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.signum is not None:
            from bps_train.stop import stop_now

            stop_now("stopped at once by a second signal; the last checkpoint (if any) is kept")
        self.signum = signum
        if self.rank == 0:
            print("bps-train: stopping after this update and saving a checkpoint"
                  + (" (again to stop now)" if self.world == 1 else ""), file=sys.stderr, flush=True)

    def requested(self, world: int) -> bool:
        """Did any rank get a signal? (Every rank stops at the same update, or collectives hang.)"""
        flag = torch.tensor([0.0 if self.signum is None else 1.0])
        if world > 1:
            dist.all_reduce(flag)
        return flag.item() > 0

    def restore(self):
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


def tensorboard_writer_class():
    """SummaryWriter, or MissingDependencyError with the pip command (checked before any work)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        from bps_assets.errors import MissingDependencyError

        raise MissingDependencyError(None, "--tensorboard", "tensorboard") from None
    return SummaryWriter


LOG_FIELDS = ["update", "global_step", "fps", "sim_fps", "fps_ratio", "reward", "success", "spl", "episodes",
              "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "lr", "collect_s",
              "learn_s", "recv_wait", "seconds", "length"]   # new fields go last: old logs keep their columns


def trim_log(path: Path, last_update: int) -> None:
    """Drop the rows of ``path`` after ``last_update`` (the checkpoint resumed from): a run killed
    after logging updates it never saved would otherwise log them twice. A log begun by an older
    bps-train (fewer fields) is rewritten with today's header, its rows' values kept."""
    import io

    from bps_assets.container import atomic_write
    from bps_train.report import read_log_rows

    try:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        rows = read_log_rows(path)
    except FileNotFoundError:
        return
    keep = [r for r in rows if (r.get("update") or "").isdigit() and int(r["update"]) <= last_update]
    if len(keep) != len(rows) or (rows and header != LOG_FIELDS):
        def write(f):
            text = io.StringIO()
            w = csv.DictWriter(text, LOG_FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(keep)
            f.write(text.getvalue().encode())
        atomic_write(path, write, overwrite=True)


ETA_AFTER = 3   # updates of this run timed before the expected duration is printed


def duration_text(seconds: float) -> str:
    """``3 h 25 min``, ``12 min``, ``40 s``."""
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min" if s >= 60 else f"{s} s"


def eta_line(update: int, num_updates: int, frames_run: int, elapsed: float, batch: int) -> str:
    """The expected duration of the rest of a run, from this run's frames per second so far."""
    fps = frames_run / max(elapsed, 1e-9)
    left = (num_updates - update) * batch
    return (f"expected duration: {num_updates - update} more update(s), {left:,} frames at {fps:.0f} frames/s: "
            f"about {duration_text(left / max(fps, 1e-9))} more (--total-steps sets the length)")


def move_previous_run(out: Path) -> Path | None:
    """A fresh run (``--no-resume``, or no checkpoint) into an OUT_DIR holding another run's files
    (checkpoint, snapshots, log, sim-only records, TensorBoard events) moves them, and only them,
    into ``OUT_DIR/previous-<UTC time>/`` first: nothing of the old run is overwritten, mixed in
    or dropped. -> the folder, or None when there was nothing to move."""
    names = [p for p in sorted(out.iterdir()) if p.name in RUN_FILES
             or (p.name.startswith(SNAPSHOT_PREFIX) and p.name.endswith(".pt") and p.is_file())]
    if not names:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest, k = out / f"previous-{stamp}", 1
    while dest.exists():
        k += 1
        dest = out / f"previous-{stamp}-{k}"
    dest.mkdir()
    for p in names:
        os.replace(p, dest / p.name)
    return dest


class Log:
    """OUT_DIR/log.csv (appended across resumes) and optional TensorBoard events, rank 0 only."""

    def __init__(self, out: Path, writer_cls=None, resumed_update: int = 0):
        path = out / LOG_FILE
        trim_log(path, resumed_update)
        new = not path.exists() or path.stat().st_size == 0
        self.file = open(path, "a", newline="")
        self.csv = csv.DictWriter(self.file, LOG_FIELDS)
        if new:
            self.csv.writeheader()
        self.writer = writer_cls(str(out / TB_DIR)) if writer_cls else None

    def row(self, row: dict, num_updates: int, seconds: float):
        self.csv.writerow(row)
        self.file.flush()
        if self.writer is not None:
            for key in ("fps", "fps_ratio", "reward", "success", "spl", "loss", "entropy"):
                self.writer.add_scalar(key, row[key], row["global_step"])
        ratio = f" (x{row['fps_ratio']} of sim)" if math.isfinite(row["fps_ratio"]) else ""
        print(f"update {row['update']}/{num_updates} step {row['global_step']} fps {row['fps']}{ratio} "
              f"success {row['success']:.3f} spl {row['spl']:.3f} reward {row['reward']:.3f} "
              f"({row['episodes']} eps) loss {row['loss']:.4f} ({seconds:.1f}s)", flush=True)

    def close(self):
        self.file.close()
        if self.writer is not None:
            self.writer.close()


def save_run(path: Path, args, run_id: dict, policy, opt, update: int, global_step: int, seconds: float,
             rank: int, world: int, snapshot: Path | None = None):
    """Every rank's RNG streams to rank 0, which writes the checkpoint (and a snapshot copy)."""
    rngs = [None] * world
    if world > 1:
        dist.all_gather_object(rngs, checkpoint.rng_state())
    else:
        rngs = [checkpoint.rng_state()]
    if rank == 0:
        state = {"policy": policy.state_dict(), "optimizer": opt.state_dict(), "update": update,
                 "global_step": global_step, "seconds": seconds, "world": world,
                 "args": dataclasses.asdict(args), "identity": run_id, "rng": rngs}
        checkpoint.save(path, state)
        if snapshot is not None:
            checkpoint.save(snapshot, state)


# ----------------------------------------------------------------------------------- train
def train(args) -> dict:
    rank, world = setup_distributed(args)
    device = torch.device(args.device)
    threads = rank_threads(args, device)
    if threads:
        torch.set_num_threads(threads)
    seed_everything(args.seed + 1000 * rank)
    out = Path(args.out_dir)
    writable_dir(out)
    writer_cls = tensorboard_writer_class() if args.tensorboard and rank == 0 else None

    # ---- policy, optimizer, and the checkpoint to resume from (only one of this very run)
    policy = build_policy(args, device)
    amp = autocast_of(args, device)
    learn_threads = act_threads = torch.get_num_threads()
    if device.type == "cpu":  # the update's ~2 GB of activations reused, not page-faulted in anew
        learner_cpu.keep_freed_memory()
        learn_threads = learner_cpu.update_threads(args.learn_threads or threads)
        act_threads = 1   # the render threads share the cores (docs/PERFORMANCE.md, learner third pass)
    act_threads = args.act_threads or act_threads
    batch = args.num_envs * args.rollout_steps * world
    lr = scaled_lr(args, world)
    opt = Lamb(policy.parameters(), lr=lr, weight_decay=args.weight_decay, min_trust=args.min_trust)
    update, global_step, seconds_before = 0, 0, 0.0
    ckpt_path = out / CHECKPOINT_FILE
    ckpt = checkpoint.load(ckpt_path, map_location=device) if args.resume and ckpt_path.exists() else None
    # after the checkpoint: one that is refused is refused before the dataset is read
    run_id = checkpoint.identity(args, checkpoint.dataset_sha256(args.dataset), world)
    # the env config's identity leaves seeds and threads out (the seed counts the resumed updates)
    config = env_config(args, args.split, args.num_envs, args.seed + 7919 * rank + (ckpt["update"] if ckpt else 0),
                        args.episodes, double_buffered(args, device), scene_shard=(rank, world),
                        swaps=scene_rotation(args, args.split, args.num_envs, (rank, world)), threads=threads)
    run_id["env"] = checkpoint.env_identity(config)   # saved with the checkpoint, compared on resume
    run_id["layout"] = checkpoint.layout(num_groups(args.num_envs, double_buffered(args, device)), threads)
    saved = checkpoint.saved_identity(ckpt) if ckpt is not None else {}
    if ckpt is not None:   # the batch's shape and the rank count are part of it: one RNG stream per rank
        old_id = checkpoint.legacy_manifest_sha256(args.dataset)   # the identity checkpoints saved before 2026-11-27
        checkpoint.check_same_run(ckpt_path, saved, run_id, old_id)
        for note in (checkpoint.noise_note(ckpt_path, ckpt), checkpoint.episode_note(ckpt_path, ckpt),
                     checkpoint.layout_note(ckpt_path, ckpt, run_id["layout"],
                                            one_core_rule_layout(ckpt["args"], device))):
            if rank == 0 and note:
                print(note, file=sys.stderr, flush=True)
        if rank == 0 and (note := checkpoint.categories_note(ckpt_path, saved)):
            print(note, file=sys.stderr, flush=True)
        checkpoint.restore(ckpt_path, ckpt, policy, opt)
        update, global_step, seconds_before = ckpt["update"], ckpt["global_step"], ckpt["seconds"]
        if len(ckpt["rng"]) != world:   # the identity's rank count matched: a file made by hand
            from bps_assets.errors import CorruptFileError

            raise CorruptFileError(ckpt_path, f"checkpoint holds {len(ckpt['rng'])} RNG state(s) for {world} rank(s)")
        checkpoint.set_rng_state(ckpt["rng"][rank])
        if rank == 0:
            print(f"resumed {ckpt_path} at update {update}, step {global_step}", flush=True)
    if world > 1:  # every rank starts from rank 0's weights
        for p in policy.parameters():
            dist.broadcast(p.data, 0)

    num_updates = max(1, math.ceil(args.total_steps / batch))
    if update >= num_updates:   # before the environments: nothing is built, measured or logged
        if rank == 0:
            print(f"bps-train: {ckpt_path} is already at update {update} (--total-steps {args.total_steps} is "
                  f"{num_updates} updates): nothing to train; raise --total-steps to go on", file=sys.stderr,
                  flush=True)
        if world > 1:
            dist.barrier()
            dist.destroy_process_group()
        return {"updates": update, "global_step": global_step, "sim_fps": float("nan"), "interrupted": False,
                "checkpoint": str(ckpt_path), "fps": 0.0}

    # ---- environments (this rank's share of the scenes), logs, and the stop signal
    n = args.num_envs
    env = bps_runtime.make(config=config)   # make() only fills in threads, which the env identity leaves out
    # the task's category map (ObjectNav): saved, and a resumed run's must be the checkpoint's
    _checked(env, checkpoint.check_goal_categories, ckpt_path,
             saved.get("goal_categories"), env.goal_categories, args.episodes)
    if env.goal_categories is not None:
        run_id["goal_categories"] = env.goal_categories
    if not update and rank == 0 and (moved := move_previous_run(out)) is not None:
        print(f"bps-train: starting fresh: the previous run's files in {out} were moved to {moved}", flush=True)
    if rank == 0 and args.double_buffer is None and not double_buffered(args, device):
        from bps_assets.host import available_cores

        print(f"bps-train: one env group per rank: {available_cores()} CPU core(s) for {host_share(device)[1]} rank(s) "
              "on this host leave a rank one core or less, none free for the policy to overlap the simulator on "
              "(--double-buffer auto; --double-buffer true runs two groups anyway)", flush=True)
    elif rank == 0 and double_buffered(args, device) and num_groups(n, True) == 1:
        print(f"bps-train: --num-envs {n} is odd: one group of {n} envs, without double buffering", flush=True)
    log = Log(out, writer_cls, update) if rank == 0 else None
    stop = StopOnSignal(rank, world)
    saved_update, interrupted = update, False
    t_start, frames_run, metrics = time.perf_counter(), 0, {}
    try:
        sim_fps = float("nan")
        if args.sim_only_steps > 0:  # simulation alone first: the denominator of fps_ratio
            sim_fps = report_sim_only(env, args, rank, world, out, update, args.seed + rank)

        # ---- the loop: rollout (simulation overlapped with inference), then one PPO update
        visual_shape = (args.resolution, args.resolution, 3 if args.sensor == "rgb" else 1)
        ro = Rollout.empty(args.rollout_steps, n, visual_shape,
                           torch.uint8 if args.sensor == "rgb" else torch.float32, args.hidden, device,
                           *goal_spec(args))
        carry = start_rollouts(env, policy, device)
        # the frozen copy is an fp32 trace (autocast is not traced): with bf16 the rollout acts eagerly
        act = FrozenAct(policy) if device.type == "cpu" and args.frozen_act and amp is contextlib.nullcontext else policy
        if rank == 0:   # precision can differ between machines (and across a resume on another CPU)
            note = " (--frozen-act needs fp32: the rollout acts eagerly)" if args.frozen_act and act is policy else ""
            print(f"policy: {'bf16 autocast' if amp is not contextlib.nullcontext else 'fp32'} on {device.type}{note}",
                  flush=True)
        # this rank's share (checked by the tests); one write with its newline, because print()
        # writes the text and the end apart and ranks sharing a pipe interleaved between them
        sys.stdout.write(f"rank {rank} of {world}: {len(carry.scenes)} scene(s): {' '.join(carry.scenes)}\n")
        sys.stdout.flush()
        if rank == 0 and config.cache.swap_every:   # more scenes than slots (scene_rotation)
            print(f"scene rotation: one cache slot swaps to its next scene every {config.cache.swap_every} rounds "
                  f"(--scene-repeat-steps {args.scene_repeat_steps})", flush=True)
        episodes = torch.zeros(len(EPISODE_SUMS), dtype=torch.float64, device=device)
        recv_wait, collect_s, learn_s = 0.0, 0.0, 0.0
        t_start = time.perf_counter()
        while update < num_updates and not (interrupted := stop.requested(world)):
            t_update = time.perf_counter()
            for group in opt.param_groups:  # from the frame counter, so a resumed run continues the schedule
                group["lr"] = lr * lr_factor(args.lr_schedule, global_step / (num_updates * batch))
            with learner_cpu.threads(act_threads):
                eps, waited = collect_rollout(env, act, ro, carry, args.sensor, amp, args.task)
            episodes += eps
            recv_wait += waited
            t_learn = time.perf_counter()
            collect_s += t_learn - t_update

            with learner_cpu.threads(learn_threads):
                metrics = learn(policy, opt, ro, args, amp, world)
            if not math.isfinite(metrics["loss"]):
                raise FloatingPointError(f"non-finite loss at update {update}")
            learn_s += time.perf_counter() - t_learn
            update += 1
            global_step += batch
            frames_run += batch
            if rank == 0 and args.capture_graph and frames_run == batch:
                print(f"step graph: {env.capture_status}", flush=True)
            if rank == 0 and frames_run == ETA_AFTER * batch and update < num_updates:
                print(eta_line(update, num_updates, frames_run, time.perf_counter() - t_start, batch), flush=True)

            # ---- log (episode stats summed over ranks) and checkpoint
            if update % args.log_every == 0 or update == num_updates:
                s = episodes.cpu()   # the one read of the episode sums: when logging
                if world > 1:
                    dist.all_reduce(s)
                elapsed = time.perf_counter() - t_start
                fps, k = frames_run / elapsed, s[0].item()
                row = {"update": update, "global_step": global_step, "fps": round(fps, 1),
                       "sim_fps": round(sim_fps, 1), "fps_ratio": round(fps / sim_fps, 3),
                       "reward": s[1].item() / k if k else float("nan"),
                       "success": s[2].item() / k if k else float("nan"),
                       "spl": s[3].item() / k if k else float("nan"), "episodes": int(k),
                       **{f: metrics[f] for f in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                                                   "clip_frac")},
                       "lr": opt.param_groups[0]["lr"], "collect_s": round(collect_s, 2),
                       "learn_s": round(learn_s, 2), "recv_wait": round(recv_wait, 2),
                       "seconds": round(seconds_before + elapsed, 1),
                       "length": s[4].item() / k if k else float("nan")}
                if log is not None:
                    log.row(row, num_updates, time.perf_counter() - t_update)
                episodes.zero_()
                recv_wait, collect_s, learn_s = 0.0, 0.0, 0.0
            snapshot = args.snapshot_every and update % args.snapshot_every == 0
            if update % args.save_every == 0 or update == num_updates or snapshot:
                save_run(ckpt_path, args, run_id, policy, opt, update, global_step,
                         seconds_before + time.perf_counter() - t_start, rank, world,
                         out / f"{SNAPSHOT_PREFIX}{update:06d}.pt" if snapshot else None)
                saved_update = update

        if interrupted:  # the last finished update is kept; the rollout in progress is not
            if update != saved_update:
                save_run(ckpt_path, args, run_id, policy, opt, update, global_step,
                         seconds_before + time.perf_counter() - t_start, rank, world)
        elif args.sim_only_steps > 0:  # again at the end: the machine's load may have changed meanwhile
            report_sim_only(env, args, rank, world, out, update, args.seed + rank + 1,
                            end_to_end_fps=frames_run / max(time.perf_counter() - t_start, 1e-9))
    finally:
        stop.restore()
        env.close()
        if log is not None:
            log.close()
    if world > 1:  # leave together: a rank tearing gloo down while a peer still talks to it aborts
        dist.barrier()
        dist.destroy_process_group()
    return {"updates": update, "global_step": global_step, "sim_fps": sim_fps, "interrupted": interrupted,
            "checkpoint": str(ckpt_path), "fps": frames_run / max(time.perf_counter() - t_start, 1e-9),
            **metrics}


def run(argv=None) -> dict:
    """Parse ``argv`` and train (or evaluate, with --eval); returns the final metrics."""
    args = parse(Args, argv, description=" ".join(__doc__.split("\n\n")[0].split()))   # the first paragraph
    check_args(args)
    with hold_out_dir(args):
        return evaluate(args) if args.eval else train(args)


def hold_out_dir(args):
    """The output folder's lock (``run_lock``): training holds OUT_DIR (rank 0 for all ranks),
    --eval with --video its own lock, for its own files (OUT_DIR/videos); --eval without videos
    writes nothing there and takes none."""
    from bps_train import run_lock

    if int(os.environ.get("RANK", "0")) != 0 or (args.eval and not args.video):
        return contextlib.nullcontext()
    writable_dir(args.out_dir)
    return run_lock.hold(args.out_dir, run_lock.EVAL if args.eval else run_lock.TRAIN,
                         "bps-train --eval" if args.eval else "bps-train")


def main(argv=None) -> int:
    """The ``bps-train`` entry point."""
    from bps_assets.errors import BpsError

    try:
        res = run(argv)
    except BpsError as e:  # bad dataset / settings: one clear line, non-zero exit
        print(f"bps-train: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training began
        print("bps-train: interrupted; the environments were closed and the last checkpoint (if any) is "
              "kept", file=sys.stderr)
        return 130
    code = 130 if res.get("interrupted") else 0
    if code and int(os.environ.get("RANK", "0")) == 0:   # rank 0 alone writes the checkpoint
        print(f"bps-train: stopped at update {res['updates']} by a signal; checkpoint {res['checkpoint']} "
              "saved; run the same command again to resume", file=sys.stderr, flush=True)
    if learner_cpu.launcher_count("WORLD_SIZE") > 1:
        # Under torchrun, about 1 run in 4 aborted *after* finishing (everything written, the
        # process group destroyed) with "terminate called without an active exception" in the
        # interpreter's teardown: a native thread of some extension still joinable at exit (not
        # gloo's: it happened without destroy_process_group too; never seen in one process).
        # Skip the teardown once all output is flushed and closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
