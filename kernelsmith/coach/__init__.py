"""The coach: evolution trajectories into training data, an RL reward, and training entry points on TRL."""
