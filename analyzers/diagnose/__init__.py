"""Why overlap breaks: blocking host syncs and the findings (one detector per finding)."""
