"""The processes that move work: the scheduler, workers with their leases and attempt
children, the runner, run drivers and backfill, callbacks and notifiers, and what a task
uses while it runs (context, partitions, variables, connections, masking, sensors).

Every state change they make goes through the store's catalogue (``dagrun.store``).
"""
