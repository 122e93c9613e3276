"""A gymnasium ``VectorEnv`` over a bps batch environment (``pip install gymnasium``).

Same-step autoreset (gymnasium's ``AutoresetMode.SAME_STEP``, habitat-baselines' behaviour):
the observation returned with ``terminated | truncated`` is the first one of the next
episode and the finished episode's statistics are in ``infos["episode"]``. A PointNav episode
*terminates* on STOP and is *truncated* at the step limit. Arrays are numpy by default (the
gymnasium convention); ``as_torch=True`` passes the env's torch tensors through.
"""
from __future__ import annotations

import numpy as np

from bps_assets.errors import MissingDependencyError


def _gymnasium():
    try:
        import gymnasium
    except ImportError:
        raise MissingDependencyError(None, "the gymnasium adapter", "gymnasium") from None
    return gymnasium


def GymVectorEnv(env, as_torch: bool = False):
    """Wrap ``env`` (from ``bps_runtime.make`` with ``batch_size == num_envs``)."""
    _gymnasium()
    from gymnasium.vector import AutoresetMode, VectorEnv

    class _Adapter(VectorEnv):
        metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

        def __init__(self, env, as_torch):
            if env.batch_size != env.num_envs:
                from bps_assets.errors import ConfigError
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
            return x.detach().cpu().numpy()

        def _infos(self, info):
            out = {}
            for k, v in info.items():
                if isinstance(v, dict):
                    out[k] = self._infos(v)
                elif hasattr(v, "detach"):
                    out[k] = self._out(v)
                else:
                    out[k] = np.asarray(v) if not self.as_torch else v
            return out

        def reset(self, *, seed=None, options=None):
            if seed is not None:   # reseeds: the episodes restart as with make(seed=...) (BatchNavEnv.seed)
                self.env.seed(int(seed) if np.ndim(seed) == 0 else int(seed[0]))
            obs = self.env.reset()
            return {k: self._out(v) for k, v in obs.items()}, self._infos(self.env.last_info)

        def step(self, actions):
            obs, reward, done, info = self.env.step(actions)
            truncated = info["truncated"]
            terminated = done & ~truncated
            return ({k: self._out(v) for k, v in obs.items()}, self._out(reward),
                    self._out(terminated), self._out(truncated), self._infos(info))

        def close_extras(self, **kwargs):
            self.env.close()

    return _Adapter(env, as_torch)
