"""What the scene cache tells its user once per step: ``CacheReport`` counters since the last
report, and one line per wait (slot, scene, seconds, when and why its load started, what the
loader was doing: ``SceneLoader.stage``)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CacheReport:
    """What happened since the previous ``take_report()`` (call it once per step)."""

    waited: bool = False          # some call blocked on a scene load
    wait_seconds: float = 0.0
    loads_completed: int = 0
    swaps: int = 0
    evictions: int = 0
    quarantined: list = field(default_factory=list)  # scene ids that failed since last report
    reasons: list = field(default_factory=list)      # one line per wait: slot, scene, why, loader stage
    reused: int = 0               # next scenes taken from draining resident ones (no load)
    resident_scenes: int = 0
    resident_bytes: int = 0
    # the resident scenes' bytes by part, their shared assets once (scenes.footprint.PARTS; loads in
    # flight not included)
    resident_footprint: dict = field(default_factory=dict)

    def note_wait(self, slot: int, what: str, state: tuple[str, str, str], seconds: float) -> None:
        """A wait of ``seconds`` for a load; ``state``: ``load_state`` taken before the wait."""
        name, note, stage = state
        self.waited = True
        self.wait_seconds += seconds
        self.reasons.append(f"slot {slot} {what} waited {seconds:.2f} s for "
                            f"the load of {name!r} ({note}; the loader was {stage})")


def load_state(slot, loader) -> tuple[str, str, str]:
    """(scene loading, when / why it started, what the loader is doing with it) of a slot."""
    src = slot.loading
    if src is None:
        return "?", "no load started", "idle"
    return src.scene_id, slot.load_note, loader.stage.get(src.scene_id, "finishing")
