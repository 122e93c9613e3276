"""The fused step: the step state declared once (``schema``), its Warp kernels (``kernels``), and
the device state + launches + host bookkeeping of queued episodes (``fused``)."""
