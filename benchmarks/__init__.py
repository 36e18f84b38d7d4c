"""Benchmarks: ratio tables against the well-known locks, run side by side on
servers this run starts itself. Not timed tests: nothing here asserts a
speed; ``./run bench`` prints the tables and writes JSON to
``benchmarks/results/`` so two runs (or two machines) can be compared."""
