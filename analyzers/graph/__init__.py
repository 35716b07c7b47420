"""The dependency graph of a trace set, its replay, critical path and what-if fixes."""
