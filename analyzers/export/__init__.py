"""Exports for other viewers: the data side only (the writers live in overlapscope/)."""
