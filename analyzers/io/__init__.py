"""Reading trace files into the normalized model: load dispatch, Kineto JSON, Nsight Systems."""
