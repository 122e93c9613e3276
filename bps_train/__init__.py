"""bps_train: the reference large-batch PPO trainer (`bps-train`) on bps_runtime.make()."""
