"""``microbatch bench``: the service against its baselines, side by side, on the real broker (``command``)."""
