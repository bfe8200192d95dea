"""Decoding: block diffusion over the model's two passes, emitting events that front ends draw."""
