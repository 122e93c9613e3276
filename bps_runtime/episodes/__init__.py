"""Episodes: which ones a run serves (``files``: dataset files, habitat conventions) and where
they come from, prepared off the step path (``supply``: dataset and sampled episodes)."""
