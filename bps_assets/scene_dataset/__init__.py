"""Composed scenes: habitat scene datasets of stages, objects and articulated objects.

``model`` (the in-memory ``ComposedScene``), ``habitat`` (scene dataset configs and scene
instances -> ComposedScene), ``urdf`` (articulated objects' link meshes at a pose), ``section``
(the packed scene's instance table, docs/FORMAT.md 5.7) and ``packing`` (asset library, composed
scene files, their flattened reading).
"""
