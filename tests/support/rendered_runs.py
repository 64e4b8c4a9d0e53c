"""A run object as `vdk deploy` renders it, and its ranks' pods as the operators and the kubelet write them
(cluster_state): the input of the tests that read a cluster run's state (k8s/runs/pod_states.py) and diagnose it
(diagnosis/)."""

from __future__ import annotations

from collections.abc import Iterator

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.k8s.manifests import render_run


def run_object(tmp_path, backend, **keys):
    spec = make_spec(tmp_path, **{"nodes": "4", "gpus_per_node": "8", **keys})
    obj = render_run(spec, IMAGE, make_run(spec), "ml", backend)[0]
    obj["metadata"]["uid"] = "uid-1"
    return obj


def pods(obj, backend, *statuses):
    return [cs.rank_pod(obj, backend, rank, status) for rank, status in enumerate(statuses)]


def mappings(tree: object) -> Iterator[dict]:
    """Every mapping in rendered manifests (a manifest, a list of them, any part), each before the ones it holds."""
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from mappings(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from mappings(item)
