"""Overlap metrics per rank, stream and iteration."""
