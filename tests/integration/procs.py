"""Real service processes for integration tests (the launcher ``boltmq dev`` uses)."""

from boltmq.cli.dev.launcher import REPO_ROOT, LaunchError, ServiceProcess

__all__ = ["REPO_ROOT", "LaunchError", "ServiceProcess"]
