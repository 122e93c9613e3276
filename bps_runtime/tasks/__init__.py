"""Tasks, one module each: its options, actions, state fields (declared in the step schema),
observations, reward, success and metrics. ``pointnav``: habitat-lab's PointNav."""
