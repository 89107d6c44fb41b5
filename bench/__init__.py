"""dagrun's benchmarks: workloads run through the real CLI, each against a floor in the same run.

``python -m bench`` (or ``python bench/run.py``) runs them; ``--tiny`` is the seconds-long CI
version. The floor is what plain Python and sqlite3 need for the same graph, so every number
is read as a ratio on the machine at hand rather than as an absolute that ages with hardware.
"""
