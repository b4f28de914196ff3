"""Test-only Kubernetes API server (see docs/testing-without-a-cluster.md).

`ApiServer(Config(...)).start()` runs one in-process; `python3 -m e2e.apiserver` runs one as a process.
"""

from .server import ApiServer, Config

__all__ = ["ApiServer", "Config"]
