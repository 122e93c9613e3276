"""The trainer's speed in parts, one run (issue 32 item 3): simulation only, rollout inference,
rollout collection (1 group, 2 groups), the PPO update alone, and end to end, with their ratios.

    python -m bps_train.throughput MANIFEST [--num-envs 128] [--steps 32] [--ranks 2] [--learn-threads 0]
    python -m bps_train.throughput --learn-only [--num-envs 128] [--steps 32]

Frames/s of: simulation only (random moves, one group), inference (one group of NUM_ENVS / 2),
collection with 1 group and 2 (the trainer's), ``learn`` (one PPO update on random frames) and
``end_to_end`` (a 2-group rollout then the update; ``*_1_thread``: a 1-thread update, ``*_1_group``),
``sim_replay`` (that timed rollout's own actions simulated alone); ratios to sim (issue 32:
``learn_over_sim`` >= 1, ``end_to_end_over_sim`` >= 0.45). ``--frozen-act 1``: the rollout acts
through the frozen copy, the eager one interleaved. ``*_cores``: CPU time / wall time of a phase;
``*_core_us``: CPU us per frame. Host settings and autocast as the trainer's (``--bf16 0``: fp32).
``--ranks N`` (``ranks_*``): the trainer as N torchrun-style ranks on this host (NUM_ENVS / N envs
each, its share of the cores and scenes, gloo all-reduce), all ranks timed together.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time

import torch

from bps_train.learner_cpu import keep_freed_memory, threads, update_threads
from bps_train.frozen_act import FrozenAct
from bps_train.lamb import Lamb
from bps_train.ppo import Rollout
from bps_train.train import (Args, autocast_of, build_policy, collect_rollout, double_buffered, learn, num_groups,
                             sim_window, start_rollouts)

RECIPE = Args()   # the trainer's PPO settings (epochs, minibatches, clip, coefficients)


def ppo_update(policy, opt, ro, amp=contextlib.nullcontext) -> None:
    """One PPO update exactly as the trainer's (``train.learn`` with its default settings)."""
    learn(policy, opt, ro, RECIPE, amp)


def random_rollout(num_envs: int, steps: int, resolution, hidden: int) -> Rollout:
    """A rollout of uniform random depth frames and goals, random actions and rewards."""
    g = torch.Generator().manual_seed(0)
    ro = Rollout.empty(steps, num_envs, (*resolution, 1), torch.float32, hidden, "cpu")
    ro.visual.uniform_(generator=g)
    ro.goal.uniform_(generator=g)
    ro.not_done.fill_(True)
    ro.actions.random_(0, 4, generator=g)
    ro.rewards.normal_(generator=g)
    return ro


def replay_start(env, policy, seed: int):
    """The carry of a rollout whose actions ``sim_replay`` can replay: ``env``'s episode streams
    restarted as ``make(seed=seed)`` starts them (``env.seed``), then its reset (untimed)."""
    env.seed(seed)
    return start_rollouts(env, policy, torch.device("cpu"))


def replay_window(env, actions: torch.Tensor, start=None) -> tuple[int, float, float, torch.Tensor]:
    """Simulation only of the trainer's own frames: ``actions`` [steps, envs] sent from a fresh
    env's reset (one group), no policy; the first send is outside the timed window (as in
    ``sim_window``), then ``start()`` if given. -> (frames, wall s, CPU s, rewards [steps, envs])."""
    env.async_reset()
    env.recv()
    env.send(actions[0])
    if start is not None:
        start()
    rewards = []
    c0, t0 = time.process_time(), time.perf_counter()
    for t in range(1, len(actions)):
        rewards.append(env.recv()[1].clone())
        env.send(actions[t])
    rewards.append(env.recv()[1].clone())
    return actions.numel(), time.perf_counter() - t0, time.process_time() - c0, torch.stack(rewards)


def sim_replay(make_env, actions: torch.Tensor, rewards: torch.Tensor, start=None) -> tuple[tuple[int, float, float], bool]:
    """``replay_window`` of a timed rollout's own ``actions`` (one started by ``replay_start`` with
    the seed ``make_env()``'s fresh env has; one group) -> (the timed window, whether the replay
    retraced the rollout: its ``rewards`` at every step)."""
    env = make_env()
    try:
        frames, wall, cpu, replayed = replay_window(env, actions, start)
    finally:
        env.close()
    return (frames, wall, cpu), torch.equal(replayed, rewards)


class Phases:
    """Each phase's frames/s per repetition, with the CPU time it took (``record``)."""

    def __init__(self):
        self.fps: dict[str, list] = {}
        self.cpu: dict[str, list] = {}

    def record(self, key: str, frames: int, fn):
        """Run ``fn()`` and record ``frames`` / its wall time and its process CPU time (the clock of
        ``train.sim_window``)."""
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        self.add(key, frames, time.perf_counter() - t0, time.process_time() - c0)

    def add(self, key: str, frames: int, seconds: float, cpu: float):
        """Record a window timed elsewhere: ``frames`` in ``seconds`` wall time, ``cpu`` CPU seconds."""
        self.fps.setdefault(key, []).append(frames / seconds)
        self.cpu.setdefault(key, []).append((cpu / seconds, 1e6 * cpu / frames))

    def best(self) -> dict:
        """The fastest repetition of each phase, with its cores busy and CPU us per frame."""
        out = {}
        for k, v in self.fps.items():
            i = max(range(len(v)), key=v.__getitem__)
            out[k] = v[i]
            out[k + "_cores"], out[k + "_core_us"] = self.cpu[k][i]
        return out


def measure_learn_fps(policy, num_envs: int, steps: int, resolution, hidden: int, repeats: int,
                      amp=contextlib.nullcontext, n_threads: int | None = None, phases: Phases | None = None,
                      key: str = "learn") -> float:
    """Frames/s of the PPO update alone (the trainer's ``learn``) on random frames, with
    ``n_threads`` torch threads (None: as set); the fastest of ``repeats`` after a warm-up (each
    repetition also recorded in ``phases`` under ``key``, with its CPU time)."""
    ro = random_rollout(num_envs, steps, resolution, hidden)
    opt = Lamb(policy.parameters(), lr=1e-4)
    phases = phases or Phases()
    with threads(n_threads or torch.get_num_threads()):
        ppo_update(policy, opt, ro, amp)   # warm-up (oneDNN primitive creation)
        for _ in range(repeats):
            phases.record(key, num_envs * steps, lambda: ppo_update(policy, opt, ro, amp))
    return max(phases.fps[key])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank(rank: int, a, port: int, out_path: str) -> None:
    """One rank of ``--ranks``: the trainer's set-up for a rank (threads, groups, scene share), each
    phase started by all ranks together (a barrier) and timed as the slowest rank's wall time."""
    import torch.distributed as dist

    import bps_runtime
    from bps_train.train import rank_threads

    world = a.ranks
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world), RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world), LOCAL_RANK=str(rank))   # as torchrun sets them
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        keep_freed_memory()
        args = dataclasses.replace(RECIPE, hidden=a.hidden, width=a.width, resolution=a.resolution,
                                   num_envs=a.num_envs // world, bf16=bool(a.bf16))
        cpu = torch.device("cpu")
        n_threads = rank_threads(args, cpu)
        torch.set_num_threads(n_threads)
        torch.manual_seed(0)   # every rank the same weights, as the trainer's broadcast
        policy = build_policy(args, "cpu")
        amp = autocast_of(args, "cpu")
        opt = Lamb(policy.parameters(), lr=1e-4)
        n, res = args.num_envs, (a.resolution, a.resolution)
        groups = num_groups(n, double_buffered(args, cpu))
        b = n // groups

        def make_env(batch):
            return bps_runtime.make(a.manifest, split="train", num_envs=n, batch_size=batch, seed=rank, resolution=res,
                                    episodes="sample", threads=n_threads, scene_shard=(rank, world))

        env = make_env(b)
        ro = Rollout.empty(a.steps, n, (*res, 1), torch.float32, a.hidden, "cpu")
        rows = []

        def timed(key, frames, fn):
            dist.barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            rows.append((key, frames, time.perf_counter() - t0, time.process_time() - c0))

        def sim_row(key, actions):
            f, w, c = sim_window(env, a.steps, len(rows), actions=actions, start=dist.barrier)
            rows.append((key, f, w, c))

        def collect():   # the trainer's CPU rollout acts on one thread, the update on the rank's share
            with threads(1):
                collect_rollout(env, policy, ro, carry, "depth", amp)

        def loop():
            collect()
            learn(policy, opt, ro, args, amp, world)

        sim_window(env, 2, 0, actions=(1, 2, 3))   # warm-up
        carry, own = None, []
        for _ in range(a.repeats):
            sim_row("ranks_sim", (1, 2, 3))
            sim_row("ranks_sim_uniform", (0, 1, 2, 3))
            carry = start_rollouts(env, policy, torch.device("cpu"))
            collect()                                  # warm-up
            learn(policy, opt, ro, args, amp, world)   # warm-up (oneDNN primitives)
            timed("ranks_collect", n * a.steps, collect)
            timed("ranks_learn", n * a.steps, lambda: learn(policy, opt, ro, args, amp, world))
            carry = replay_start(env, policy, rank)   # the replay's episodes: a fresh env of this rank's seed
            timed("ranks_end_to_end", n * a.steps, loop)
            own.append((ro.actions.clone(), ro.rewards.clone()))   # the timed rollout's, for its replay
        env.close()
        same = True
        for actions, rewards in own:   # each timed rollout's own frames, simulated alone (one group)
            with threads(1):
                window, ok = sim_replay(lambda: make_env(n), actions, rewards, start=dist.barrier)
            rows.append(("ranks_sim_replay", *window))
            same = same and ok
        every = [None] * world
        dist.all_gather_object(every, (rows, same))
        if rank == 0:
            with open(out_path, "w") as f:
                json.dump({"threads_per_rank": n_threads, "groups_per_rank": groups, "rows": [r for r, _ in every],
                           "retraced": all(ok for _, ok in every)}, f)
    finally:
        dist.destroy_process_group()
    # done: skip the interpreter's teardown, which sometimes aborts a rank after its work (the
    # reason and the same exit in train.main)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def ranks_phases(a) -> dict:
    """``--ranks``: run ``_rank`` on ``a.ranks`` processes; -> per phase the best repetition's
    frames/s of all ranks together (their frames over the slowest rank's wall time), cores busy
    and CPU us per frame, as ``Phases.best`` names them, and ``*_spread``: the slowest rank's
    wall time over the fastest's (a phase ending in an all-reduce evens them out: its wait counts)."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "ranks.json")
        mp.spawn(_rank, args=(a, _free_port(), out_path), nprocs=a.ranks, join=True)
        with open(out_path) as f:
            got = json.load(f)
    ph, spread = Phases(), {}
    for i in range(len(got["rows"][0])):   # row i: the same phase and repetition on every rank
        key = got["rows"][0][i][0]
        frames = sum(r[i][1] for r in got["rows"])
        walls = [r[i][2] for r in got["rows"]]
        ph.add(key, frames, max(walls), sum(r[i][3] for r in got["rows"]))
        if ph.fps[key][-1] == max(ph.fps[key]):   # the best repetition's: how far apart the ranks' own times were
            spread[key + "_spread"] = max(walls) / min(walls)
    best = {**ph.best(), **spread}
    best.update(ranks=a.ranks, ranks_threads_per_rank=got["threads_per_rank"],
                ranks_groups_per_rank=got["groups_per_rank"], ranks_sim_replay_retraced=float(got["retraced"]))
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("manifest", nargs="?", help="dataset manifest (not needed with --learn-only)")
    p.add_argument("--learn-only", action="store_true", help="time the PPO update alone")
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--steps", type=int, default=32, help="batched steps per measurement (the rollout's length)")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--act-threads", "--threads", dest="act_threads", type=int, default=1,
                   help="torch threads while the rollout's policy acts (the trainer's --act-threads, 1 on the CPU; "
                        "--threads: the old name)")
    p.add_argument("--learn-threads", type=int, default=0,
                   help="torch threads during the update (the trainer's --learn-threads; 0: every core)")
    p.add_argument("--env-threads", type=int, default=0,
                   help="the runtime's threads (the trainer's --threads; 0: its default, every core)")
    p.add_argument("--repeats", type=int, default=2, help="repetitions of each phase, the fastest kept (>= 1)")
    p.add_argument("--frozen-act", type=int, default=0, choices=(0, 1),
                   help="1: the rollout acts through a frozen TorchScript copy of the policy (the trainer's "
                        "--frozen-act, bps_train.frozen_act), measured beside the eager policy; 0 (the trainer's "
                        "default): the eager policy")
    p.add_argument("--ranks", type=int, default=0,
                   help="also run the trainer as this many ranks on this host (as torchrun --nproc_per_node: "
                        "NUM_ENVS / RANKS envs and the cores shared per rank; 0: one process only)")
    p.add_argument("--bf16", type=int, nargs="?", const=1, default=1, choices=(0, 1),
                   help="1 (the trainer's --bf16 default): bf16 autocast of the policy where the CPU has native bf16 "
                        "(AVX-512 BF16 or AMX), fp32 elsewhere; 0: fp32")
    a = p.parse_args(argv)
    if a.repeats < 1:   # every figure is the best of the repetitions
        p.error(f"--repeats {a.repeats}: must be >= 1")
    if a.ranks < 0 or a.ranks == 1 or (a.ranks and a.num_envs % a.ranks):
        p.error(f"--ranks {a.ranks}: expected 0 or >= 2 dividing --num-envs {a.num_envs}")
    if a.ranks and (a.learn_only or a.frozen_act):
        p.error("--ranks runs the trainer's own settings: not with --learn-only or --frozen-act")
    keep_freed_memory()
    learn_threads = update_threads(a.learn_threads)
    torch.set_num_threads(a.act_threads)
    torch.manual_seed(0)
    n, res = a.num_envs, (a.resolution, a.resolution)
    policy = build_policy(dataclasses.replace(RECIPE, hidden=a.hidden, width=a.width, resolution=a.resolution), "cpu")
    amp = autocast_of(dataclasses.replace(RECIPE, bf16=bool(a.bf16)), "cpu")   # the trainer's choice
    from bps_assets.host import available_cores

    cores = available_cores()
    setting = {"cores": cores, "rollout_torch_threads": a.act_threads, "update_torch_threads": learn_threads,
               "env_threads": a.env_threads or "default", "num_envs": n, "steps": a.steps,
               "autocast": "bf16" if amp is not contextlib.nullcontext else "none (fp32)",
               "rollout_act": "frozen" if a.frozen_act and amp is contextlib.nullcontext else "eager"}
    print("settings: " + ", ".join(f"{k} {v}" for k, v in setting.items()), flush=True)
    if a.learn_only:
        out = {"learn": measure_learn_fps(policy, n, a.steps, res, a.hidden, a.repeats, amp, learn_threads),
               "learn_1_thread": measure_learn_fps(policy, n, a.steps, res, a.hidden, a.repeats, amp, 1)}
        for k, v in out.items():
            print(f"{k:28s} {v:8.2f}")
        print(json.dumps({**setting, **{k: round(v, 2) for k, v in out.items()}}))
        return out
    if a.manifest is None:
        p.error("MANIFEST is needed unless --learn-only")
    import bps_runtime

    ph, send_recv, replay_same = Phases(), {"send_ms": [], "recv_ms": []}, []
    opt = Lamb(policy.parameters(), lr=1e-4)
    frozen = setting["rollout_act"] == "frozen"   # autocast is not traced: eager under --bf16
    act = FrozenAct(policy) if frozen else policy
    kw = {"threads": a.env_threads} if a.env_threads else {}
    frames = n * a.steps
    for _ in range(a.repeats):
        for groups in (1, 2):
            env = bps_runtime.make(a.manifest, split="train", num_envs=n, batch_size=n // groups, seed=0,
                                   resolution=res, episodes="sample", **kw)
            if groups == 1:
                sim_window(env, 2, 0, actions=(1, 2, 3))   # warm-up
                # its own window: the reset and the first send stay outside, as in the trainer's figure
                ph.add("sim", *sim_window(env, a.steps, 0, actions=(1, 2, 3)))
            else:  # send() must return at once: the group is simulated on the runtime's thread
                env.async_reset()
                for _ in range(groups):
                    env.recv()
                ts = tr = 0.0
                for _ in range(a.steps):
                    t0 = time.perf_counter()
                    env.send(torch.ones(n // groups, dtype=torch.long))
                    t1 = time.perf_counter()
                    env.recv()
                    ts, tr = ts + t1 - t0, tr + time.perf_counter() - t1
                send_recv["send_ms"].append(1e3 * ts / a.steps)
                send_recv["recv_ms"].append(1e3 * tr / a.steps)
            ro = Rollout.empty(a.steps, n, (*res, 1), torch.float32, a.hidden, "cpu")
            carry = start_rollouts(env, policy, torch.device("cpu"))
            collect_rollout(env, act, ro, carry, "depth", amp)  # warm-up
            key = f"collect_{groups}_group{'s' if groups > 1 else ''}"
            if groups == 2 and frozen:  # the lever, interleaved with the trainer's path
                ph.record(key + "_eager", frames, lambda: collect_rollout(env, policy, ro, carry, "depth", amp))
            ph.record(key, frames, lambda: collect_rollout(env, act, ro, carry, "depth", amp))
            # the trainer's loop: a rollout, then the PPO update on it (``--double-buffer``: 2 groups)
            loops = (("end_to_end", learn_threads), ("end_to_end_1_thread", 1)) if groups == 2 else \
                (("end_to_end_1_group", learn_threads),)   # --double-buffer false
            for key, k in loops:
                with threads(k):
                    ppo_update(policy, opt, ro, amp)  # warm-up
                if key == "end_to_end":   # from the reset of a fresh env of seed 0: its replay's
                    carry = replay_start(env, policy, 0)

                def loop(k=k):
                    collect_rollout(env, act, ro, carry, "depth", amp)
                    with threads(k):
                        ppo_update(policy, opt, ro, amp)
                ph.record(key, frames, loop)
                if key == "end_to_end":
                    own = ro.actions.clone(), ro.rewards.clone()
            env.close()
        # simulation only of the frames end_to_end timed: its rollout's own actions, replayed (one group)
        window, same = sim_replay(lambda: bps_runtime.make(a.manifest, split="train", num_envs=n, batch_size=n, seed=0,
                                                           resolution=res, episodes="sample", **kw), *own)
        ph.add("sim_replay", *window)
        replay_same.append(same)
        # inference alone, on the batch size of one group of two
        b = n // 2
        x, goal = torch.rand(b, *res, 1), torch.rand(b, 2)
        prev, nd, st = torch.zeros(b, dtype=torch.long), torch.ones(b, dtype=torch.bool), policy.initial_state(b)
        for key, f in (("infer_eager", policy), ("infer", act)) if frozen else (("infer", act),):
            with torch.no_grad(), amp():
                f(x, goal, prev, st, nd)

                def infer(f=f):
                    for _ in range(2 * a.steps):
                        f(x, goal, prev, st, nd)
                ph.record(key, 2 * a.steps * b, infer)
    for key, k in (("learn", learn_threads), ("learn_1_thread", 1)):
        measure_learn_fps(policy, n, a.steps, res, a.hidden, a.repeats, amp, k, ph, key)
    best = ph.best()
    best.update({k: min(v) for k, v in send_recv.items()})
    # a replay that did not retrace its rollout simulated other frames: no ratio to it
    own_replay = best["sim_replay"] if all(replay_same) else float("nan")
    if a.ranks:   # after the one-process phases: the same machine state for both
        r = ranks_phases(a)
        sim = max(best["sim"], r["ranks_sim"])   # the faster simulation-only layout is the denominator
        replay = max(own_replay, r["ranks_sim_replay"]) if r["ranks_sim_replay_retraced"] else float("nan")
        best.update(r)
        best.update(ranks_end_to_end_over_sim=r["ranks_end_to_end"] / sim,
                    ranks_end_to_end_over_sim_replay=r["ranks_end_to_end"] / replay,
                    ranks_learn_over_sim=r["ranks_learn"] / sim,
                    ranks_sim_over_sim=r["ranks_sim"] / best["sim"],
                    ranks_end_to_end_over_end_to_end=r["ranks_end_to_end"] / best["end_to_end"])
    best.update(learn_over_sim=best["learn"] / best["sim"], end_to_end_over_sim=best["end_to_end"] / best["sim"],
                learn_1_thread_over_sim=best["learn_1_thread"] / best["sim"],
                end_to_end_1_thread_over_sim=best["end_to_end_1_thread"] / best["sim"],
                end_to_end_1_group_over_sim=best["end_to_end_1_group"] / best["sim"],
                end_to_end_over_sim_replay=best["end_to_end"] / own_replay,
                end_to_end_1_group_over_sim_replay=best["end_to_end_1_group"] / own_replay,
                sim_replay_retraced=float(all(replay_same)))
    serial = 1 / (1 / best["sim"] + 1 / best["infer"])
    perfect = min(best["sim"], best["infer"])
    best.update(serial_prediction=serial, perfect_overlap_prediction=perfect,
                overlap_gain=best["collect_2_groups"] / best["collect_1_group"])
    if frozen:
        best.update(frozen_act_gain=best["collect_2_groups"] / best["collect_2_groups_eager"],
                    frozen_infer_gain=best["infer"] / best["infer_eager"])
    for k, v in best.items():
        print(f"{k:28s} {v:8.2f}")
    print(json.dumps({**setting, "loadavg": os.getloadavg()[0], **{k: round(v, 2) for k, v in best.items()}}))
    return best


if __name__ == "__main__":
    main()
