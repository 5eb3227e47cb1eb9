"""Questions asked of the cost model: fit, latency goals, generation end to end, variants, deployments."""
