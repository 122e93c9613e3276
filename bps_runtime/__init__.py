"""bps_runtime: async scene streaming, scene cache, batch renderer and batched PointNav."""
