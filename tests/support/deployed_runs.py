"""Runs applied through the real client into the fake API server, and what their controllers then write:
statuses, pods, logs (the tests of the cluster verbs share them)."""

from __future__ import annotations

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import PROVENANCE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.k8s.manifests import render_run

PLURAL = {"pytorchjob": "pytorchjobs", "trainjob": "trainjobs", "job": "jobs"}


class Cluster:
    def __init__(self, fake, client, root):
        self.fake, self.client, self.root = fake, client, root

    def deploy(
        self,
        job="mnist-ddp",
        backend="pytorchjob",
        name=None,
        created=None,
        reason="nightly retrain",
        provenance=PROVENANCE,
        **keys,
    ) -> dict:
        spec = make_spec(self.root, name=job, **{"nodes": "2", "gpus_per_node": "8", **keys})
        run = make_run(spec, name=name, reason=reason, provenance=provenance)
        main = self.client.apply(render_run(spec, IMAGE, run, "ml", backend))[0]
        if created:
            key = (main["apiVersion"], PLURAL[backend], "ml", run.name)
            self.fake.objects[key]["metadata"]["creationTimestamp"] = created
            main["metadata"]["creationTimestamp"] = created
        return main

    def status(self, run: dict, **status):
        self.fake.set_status(PLURAL[run["metadata"]["labels"]["vdk.io/backend"]], run["metadata"]["name"], status)

    def pod(
        self, run: dict, rank: int, status: dict, log: str | None = None, previous_log: str | None = None, **kw
    ) -> dict:
        backend = run["metadata"]["labels"]["vdk.io/backend"]
        pod = self.fake.add("pods", cs.rank_pod(run, backend, rank, status, **kw))
        name, container = pod["metadata"]["name"], cs.CONTAINER[backend]
        if log is not None:
            self.fake.set_log(name, container, log)
        if previous_log is not None:
            self.fake.set_log(name, container, previous_log, previous=True)
        return pod

    def set_pod(self, pod: dict, status: dict) -> None:
        """What the scheduler and kubelet change on a pod: its node and its status."""
        backend = pod["metadata"]["labels"]["vdk.io/backend"]
        with self.fake._lock:
            stored = self.fake.objects[("v1", "pods", "ml", pod["metadata"]["name"])]
            if status.get("_node"):
                stored["spec"]["nodeName"] = status["_node"]
            stored["status"] = {k: v for k, v in status.items() if not k.startswith("_")}
            for container in stored["status"].get("containerStatuses", []):
                container.setdefault("name", cs.CONTAINER[backend])

    def run_names(self) -> list[str]:
        return sorted(r.name for r in self.client.list_runs())
