"""From DAG files to plain data: discovery, the isolated import of each file (in a parse
child), and the ``DagSpec`` that the store keeps and the scheduler and workers read.
"""
