"""What a cluster serves of the backends' APIs (`discover`): the API groups, their resources, and
what each served backend needs to know besides (its own `Backend.discover`)."""

from __future__ import annotations

from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s.api_errors import Action
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.backends import Discovery
from vdk.plugin.ml_training.k8s.transport import Transport


def discover(api: Transport) -> Discovery:
    """The backends' resources the cluster serves, each served backend's facts, the server version."""
    groups = api.request("GET", "/apis", action=Action("list", "apigroups"))
    available = {
        version.get("groupVersion")
        for group in (groups or {}).get("groups", [])
        for version in group.get("versions", [])
    }
    served: set[tuple[str, str]] = set()
    for group_version in backends.group_versions():
        if group_version in available:
            resources = api.request(
                "GET", f"/apis/{group_version}", action=Action("get", "apiresources", group_version)
            )
            served |= {
                (group_version, r["name"]) for r in (resources or {}).get("resources", []) if "/" not in r["name"]
            }
    notes: list[str] = []
    cluster = Discovery(resources=frozenset(served))
    facts = {b.name: b.discover(api, notes) for b in backends.REGISTRY if cluster.serves(b.main)}
    return Discovery(
        resources=cluster.resources,
        server_version=_server_version(api),
        notes=tuple(notes),
        facts={name: found for name, found in facts.items() if found is not None},
    )


def _server_version(api: Transport) -> str | None:
    try:
        return (api.request("GET", "/version", action=Action("get", "version")) or {}).get("gitVersion")
    except KubeApiError:  # only ever shown: not worth failing a deploy for
        return None
