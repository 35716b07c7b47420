"""The normalized trace model and what is computed on it directly: intervals, iterations, categories, names."""
