"""A decoder layer's saved tensors, by concern (see trainmem/memory/activations.py)."""
