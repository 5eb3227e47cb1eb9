"""What a model is: ModelSpec and its layer runs, weight formats, the preset store, config.json readers and the hub."""
