"""Who follows which scenes are resident: one list of listeners, told of each arrival and
departure the same way (the renderer, the navigation buffers, the episode supply, the semantic
category table: ``env.world`` registers them).

A ``ResidencyListener`` has ``on_arrival(scene_index, scene)`` (``scene``: the LoadedScene, its
``prepared`` state included) and ``on_departure(scene_index)``. The cache calls them on the
simulator thread, at the points fixed by the step count where a load is taken in or a scene
leaves, listeners in the order they were added; every arrival is matched by one departure
before its scene index is reused. ``close()`` tells nobody: the listeners' owners close too.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol


class ResidencyListener(Protocol):
    """Told when a scene index gets a scene and when it loses it."""

    def on_arrival(self, scene_index: int, scene: Any) -> None:
        """``scene`` (a LoadedScene) is now resident under ``scene_index``."""

    def on_departure(self, scene_index: int) -> None:
        """The scene under ``scene_index`` has left (the index may be reused after this)."""


class Listener:
    """A ResidencyListener made of two functions."""

    def __init__(self, arrival: Callable[[int, Any], None], departure: Callable[[int], None]):
        self.on_arrival, self.on_departure = arrival, departure


def renderer_listener(renderer) -> Listener:
    """The renderer follows residency: an arrival attaches the scene's shading and accel."""
    return Listener(lambda i, scene: renderer.attach(i, scene.shading, scene.accel), renderer.detach)


class Residency:
    """The listener list."""

    def __init__(self, listeners=()):
        self.listeners: list[ResidencyListener] = list(listeners)

    def add(self, listener: ResidencyListener) -> None:
        """Tell ``listener`` of every later arrival and departure."""
        self.listeners.append(listener)

    def arrived(self, scene_index: int, scene) -> None:
        """Tell every listener, in order, that ``scene`` arrived under ``scene_index``."""
        for x in self.listeners:
            x.on_arrival(scene_index, scene)

    def left(self, scene_index: int) -> None:
        """Tell every listener, in order, that ``scene_index``'s scene left."""
        for x in self.listeners:
            x.on_departure(scene_index)
