"""Result models in, Rich renderables and chart files out; nothing here prints."""
