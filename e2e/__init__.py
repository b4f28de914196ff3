"""Sluice end-to-end harness: a test-only Kubernetes API server, a process node and helpers.

Nothing here is used in production; it lets the operator and autoscaler be exercised without a cluster.
"""
