"""Navigation of every resident scene in flat device buffers (``buffers``: arenas, meta table,
goal distance fields), read by the fused step."""
