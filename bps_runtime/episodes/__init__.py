"""Episodes: which ones a run serves (``files``: dataset files, habitat conventions) and where
they come from, prepared off the step path: the ``supply`` protocol, ``sampled`` and ``dataset``
episodes behind it (``make_supply`` picks one)."""
from bps_assets.nav.geodesic import NEAR_EXACT

from .supply import DEFAULTS, EpisodeSupply, FieldWorker, SupplyOptions


def make_supply(seed: int, worker: FieldWorker, episodes_by_scene: dict | None = None,
                options: SupplyOptions = DEFAULTS, goals: dict | None = None,
                near_gate: float = NEAR_EXACT) -> EpisodeSupply:
    """``DatasetEpisodes`` over ``episodes_by_scene`` ({scene id: [habitat episode dicts]}; ``goals``:
    {scene id: {episode id: EpisodeGoal}}), or ``SampledEpisodes`` when it is None; ``near_gate``:
    the task's (``SupplyRequest.near_gate``)."""
    if episodes_by_scene is None:
        from .sampled import SampledEpisodes
        return SampledEpisodes(seed, worker, options, near_gate)
    from .dataset import DatasetEpisodes
    return DatasetEpisodes(episodes_by_scene, seed, worker, options, goals, near_gate)
