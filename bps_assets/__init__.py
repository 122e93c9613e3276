"""bps_assets: read scans, turn them into packed scenes and navmeshes, preprocess datasets."""
__version__ = "0.1.0"
