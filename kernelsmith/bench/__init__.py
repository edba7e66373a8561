"""Benchmarks over many tasks: the recipe's metrics, comparisons and reports."""
