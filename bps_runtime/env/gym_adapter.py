"""A gymnasium ``VectorEnv`` over a bps batch environment (``pip install gymnasium``).

Same-step autoreset (gymnasium's ``AutoresetMode.SAME_STEP``, habitat-baselines' behaviour):
the observation returned with ``terminated | truncated`` is the first one of the next
episode and the finished episode's statistics are in ``infos["episode"]`` (rows where
``infos["_episode"]``; no ``final_obs``: an episode's last frame is never rendered). A PointNav
episode *terminates* on STOP and is *truncated* at the step limit. Arrays are numpy by default (the gymnasium convention), new on every call (the env's own
tensors are buffers its next step rewrites: copied here, as gymnasium's SyncVectorEnv copies);
every info value has one row per env. ``as_torch=True`` passes the env's torch tensors through
(buffers: valid until the next step, as ``BatchNavEnv``'s).
"""
from __future__ import annotations

import numpy as np

from bps_assets.errors import MissingDependencyError, is_bool


def _gymnasium():
    try:
        import gymnasium
    except ImportError:
        raise MissingDependencyError(None, "the gymnasium adapter", "gymnasium") from None
    return gymnasium


def GymVectorEnv(env, as_torch: bool = False):
    """Wrap ``env`` (from ``bps_runtime.make`` with ``batch_size == num_envs``)."""
    _gymnasium()
    import torch
    from gymnasium.vector import AutoresetMode, VectorEnv

    class _Adapter(VectorEnv):
        metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

        def __init__(self, env, as_torch):
            from bps_assets.errors import ConfigError

            from .env import BatchNavEnv

            if not isinstance(env, BatchNavEnv):
                raise ConfigError(None, f"GymVectorEnv({env!r}): expected an env from bps_runtime.make(...), "
                                        "e.g. GymVectorEnv(bps_runtime.make('out/manifest.json', num_envs=16))")
            if env.batch_size != env.num_envs:
                raise ConfigError(None, "the gymnasium adapter needs batch_size == num_envs "
                                        "(use send()/recv() directly for double buffering)")
            self.env = env
            self.as_torch = as_torch
            self.num_envs = env.num_envs
            self.single_observation_space = env.single_observation_space
            self.single_action_space = env.single_action_space
            self.observation_space = env.observation_space
            self.action_space = env.action_space
            self.render_mode = None
            self.closed = False

        def _out(self, x):
            if self.as_torch:
                return x
            t = x.detach()
            a = t.cpu().numpy()
            return a.copy() if t.device.type == "cpu" else a   # .cpu() of a device tensor is a copy already

        def _infos(self, info, done=None):
            """Every value as one row per env; ``_episode``: the rows of ``episode`` that hold one."""
            out = {}
            for k, v in info.items():
                if isinstance(v, dict):
                    out[k] = self._infos(v)
                elif hasattr(v, "detach"):
                    out[k] = self._out(v)
                elif is_bool(v):   # one flag of the whole step: a row per env
                    out[k] = (torch.full((self.num_envs,), bool(v), device=self.env.device) if self.as_torch
                              else np.full(self.num_envs, bool(v)))
                else:
                    out[k] = v if self.as_torch else np.asarray(v)
            if done is not None and "episode" in info:
                out["_episode"] = done if self.as_torch else self._out(done)
            return out

        def reset(self, *, seed=None, options=None):
            if seed is not None:   # reseeds: the episodes restart as with make(seed=...) (BatchNavEnv.seed)
                if isinstance(seed, (list, tuple, np.ndarray)):
                    from bps_assets.errors import ConfigError
                    raise ConfigError(None, f"reset(seed={seed!r}): one int seeds the whole batch (its "
                                            "episode streams); per-env seeds cannot be honoured")
                self.env.seed(seed)   # an int in [0, 2^63) (numpy ints too), else a ConfigError
            obs = self.env.reset()
            none_done = torch.zeros(self.num_envs, dtype=torch.bool, device=self.env.device)
            return {k: self._out(v) for k, v in obs.items()}, self._infos(self.env.last_info, none_done)

        def step(self, actions):
            obs, reward, done, info = self.env.step(actions)
            truncated = info["truncated"]
            terminated = done & ~truncated
            return ({k: self._out(v) for k, v in obs.items()}, self._out(reward),
                    self._out(terminated), self._out(truncated), self._infos(info, done))

        def close_extras(self, **kwargs):
            self.env.close()

    return _Adapter(env, as_torch)
