"""The front door: ``make`` (config -> env), the batched env (``env``), its ``world`` (scenes +
renderer + navigation + episodes), ``spaces`` and the gymnasium adapter."""
