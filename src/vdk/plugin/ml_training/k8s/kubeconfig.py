"""Where a cluster's credentials are: kubeconfig files, or a pod's service account. Standard library
only, so that commands which may not need a cluster can look without importing the kubernetes client."""

from __future__ import annotations

import os
from pathlib import Path

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"  # set in every pod


def kubeconfig_files(config_file: str | None = None) -> str:
    """The kubeconfig file(s) to read, as kubectl picks them: given, else $KUBECONFIG, else ~/.kube/config."""
    return str(config_file or os.environ.get("KUBECONFIG") or "~/.kube/config")


def kubeconfig_paths(config_file: str | None = None) -> list[str]:
    """Each kubeconfig file to read ($KUBECONFIG may list several), `~` expanded."""
    return [os.path.expanduser(p) for p in kubeconfig_files(config_file).split(os.pathsep) if p]


def in_a_pod() -> bool:
    return bool(os.environ.get(IN_CLUSTER_ENV))
