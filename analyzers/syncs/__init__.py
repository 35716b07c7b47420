"""Blocking host syncs: every call where the host waited on the GPU, and what it cost."""
