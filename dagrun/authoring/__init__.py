"""What a DAG file calls: ``DAG``, tasks and their operators, groups, params, mapping,
assets, sensor options, templates and macros.

Everything here runs while a user's file is imported, in a parse child or an attempt's
child, so it validates eagerly and imports nothing of the store or the runtime.
"""
