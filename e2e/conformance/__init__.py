"""Conformance of the test API server with answers recorded from a real Kubernetes API server."""
