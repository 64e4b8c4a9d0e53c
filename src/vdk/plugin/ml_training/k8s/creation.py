"""How the client creates objects: a run's all or nothing, and each one exactly once whatever the network does.

A run's name is chosen before its first request (k8s/run_identity.py), so every object of it has a known name.
A create whose answer is lost (the connection reset or closed), late (the client's timeout), or refused for now
(429, 5xx) may have been done: the object is then looked up by that name and, when it is there with the run's
labels, adopted — never created a second time; when it is not there, the create is sent again (k8s/retries.py
bounds how often and how long). A failure that remains, or SIGINT/SIGTERM/SIGHUP in the middle, deletes again
what the call created (including an object whose create was under way); what cannot be deleted is named, with
the command that deletes it.

The run's main object is created first and owns every other object (its record, its Service): deleting the
run, or its TTL, removes them all, and no record or Service outlives it.
"""

from __future__ import annotations

import time
from typing import Protocol

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s import retries
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.retries import Say
from vdk.plugin.ml_training.k8s.transport import Transport
from vdk.plugin.ml_training.k8s.transport import describe
from vdk.plugin.ml_training.vocabulary.wire import PROJECT

FIELD_MANAGER = PROJECT


class ClientLike(Protocol):
    """What of k8s/client.py's KubeClient creating objects uses (it calls this module)."""

    transport: Transport
    context: str | None
    namespace: str

    def prepare(self, manifest: dict) -> tuple[ResourceType, dict]: ...

    def resource_type(self, manifest: dict) -> ResourceType: ...

    def delete(self, rtype: ResourceType, name: str, namespace: str | None) -> bool: ...


# After an interrupted or unanswered create, how long the rollback watches for the object to appear (the
# server may still be writing it) before it takes "not there" for an answer.
SETTLE_SECONDS = 2.0
_SETTLE_POLL = 0.25


def create(client: ClientLike, rtype: ResourceType, body: dict, dry_run: bool = False) -> dict:
    """Create `body` (its name set) once: the object as stored, or as found after a create whose answer
    was lost. A dry run (nothing is created) is simply sent again after a failure worth it."""
    transport = client.transport
    metadata = body["metadata"]
    namespace, name = metadata.get("namespace"), metadata["name"]
    path = rtype.path(namespace)
    action = rtype.action("create", namespace, name)
    query = {"fieldManager": FIELD_MANAGER, "fieldValidation": "Strict"}
    if dry_run:
        return transport.request("POST", path, query={**query, "dryRun": "All"}, body=body, action=action)
    attempts = retries.Attempts(transport.policy, describe(action), transport.say)
    uncertain = False  # an earlier attempt may have created it
    while True:
        try:
            return transport.send("POST", path, query=query, body=body, action=action, timeout=transport.timeout)
        except KubeApiError as error:
            if error.status == 409 and uncertain:
                found = lookup(client, rtype, name, namespace)
                if found is not None and ours(found, body):
                    return _adopted(transport.say, action, found, error)
                if found is not None:
                    _not_created(error)
                raise
            if not retries.retryable(error):
                _not_created(error)  # an answer that says it was not done (400, 403, 409, 422, ...)
                raise
            uncertain = True
            found = lookup(client, rtype, name, namespace)
            if found is not None:
                if not ours(found, body):
                    _not_created(error)  # another's object of that name: never taken, never deleted
                    raise
                return _adopted(transport.say, action, found, error)
            wait = attempts.next_wait(error)
            if wait is None:
                raise attempts.exhausted(error) from None
            attempts.retry_after(error, wait, then=f"{rtype.kind} {name} does not exist: creating it again")


def _not_created(error: KubeApiError) -> None:
    """Mark `error` as the answer of a create that certainly did not create the object (a rollback leaves
    that name alone)."""
    error.not_created = True


def lookup(client: ClientLike, rtype: ResourceType, name: str, namespace: str | None) -> dict | None:
    """The object `name` of `rtype` as stored now; None when there is none (reads are retried)."""
    try:
        return client.transport.request("GET", rtype.path(namespace, name), action=rtype.action("get", namespace, name))
    except KubeApiError as e:
        if e.status == 404 and not e.not_served:
            return None
        raise


def ours(found: dict, body: dict) -> bool:
    """Whether a stored object is the one `body` creates: it carries every label `body` sets (a run's labels
    name the run, whose name is new with every deploy)."""
    labels = (found.get("metadata") or {}).get("labels") or {}
    wanted = (body.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in wanted.items())


def _adopted(say: Say, action, found: dict, error: KubeApiError) -> dict:
    say(
        f"note: the Kubernetes API server {retries.outcome(error)} to {describe(action)}, but it was done: "
        f"{action.kind} {action.name} exists, going on with it"
    )
    return found


def apply(client: ClientLike, manifests: list[dict], say: Say | None = None) -> list[dict]:
    """Create `manifests` in order, all or nothing (see the module's docstring): each first checked by the
    server (dryRun=All: schema, strict fields, admission webhooks), so most rejections happen before anything
    exists; every object after the first is owned by the first. `say` (default the transport's) is told what
    an interruption left. Returns the objects as stored."""
    say = say or client.transport.say
    prepared = [client.prepare(m) for m in manifests]
    for rtype, body in prepared:
        create(client, rtype, body, dry_run=True)
    created: list[dict] = []
    pending: dict | None = None
    try:
        for rtype, body in prepared:
            if created:
                body = owned_by(body, created[0])
            pending = body
            created.append(create(client, rtype, body))
            pending = None
    except BaseException as error:
        _roll_back(client, created, pending, error, say)
        raise
    return created


def _roll_back(client: ClientLike, created: list[dict], pending: dict | None, error: BaseException, say: Say) -> None:
    """Delete what `apply` created, and the object whose create was under way; raise `error` naming what
    remains (an MLTrainingError), or say it (an interruption, re-raised by the caller)."""
    # The object whose create was under way may exist, unless the server said it was not made: an
    # interruption, a lost answer, a failed lookup or retries used up leave it unknown, so it is deleted too.
    unsure = pending is not None and not getattr(error, "not_created", False)
    objects = created + ([pending] if pending is not None and unsure else [])
    remaining: list[tuple[dict, str]] = []
    deleted: list[str] = []
    for obj in reversed(objects):
        rtype, metadata = client.resource_type(obj), obj["metadata"]
        try:
            gone = client.delete(rtype, metadata["name"], metadata.get("namespace"))
            if obj is pending and not gone:
                gone = _delete_when_it_appears(client, rtype, metadata["name"], metadata.get("namespace"))
            if gone:
                deleted.append(f"{rtype.kind}/{metadata['name']}")
        except MLTrainingError as e:
            remaining.append((obj, e.problem))
    if not remaining:
        if isinstance(error, MLTrainingError) and deleted:
            raise MLTrainingError(
                f"{error.problem}\nNothing was left in the cluster: what was created was deleted again "
                f"({', '.join(reversed(deleted))})",
                error.fix,
            ) from error
        if not isinstance(error, MLTrainingError):
            done = f" (deleted {', '.join(reversed(deleted))})" if deleted else ""
            say(f"Stopped before run {_run_name(objects)} was complete; nothing of it is left in the cluster{done}")
        return
    names = ", ".join(f"{client.resource_type(o).kind}/{o['metadata']['name']} ({why})" for o, why in remaining)
    command = delete_command(client, [o for o, _ in remaining])
    if isinstance(error, MLTrainingError):
        raise MLTrainingError(
            f"{error.problem}\nCleaning up after that failed too; these objects remain: {names}",
            f"{error.fix}\nDelete what remains: `{command}`",
        ) from error
    say(
        f"Stopped before run {_run_name(objects)} was complete, and these objects remain: {names}. "
        f"Delete them: `{command}`"
    )


def _run_name(objects: list[dict]) -> str:
    return objects[0]["metadata"]["name"] if objects else "?"


def _delete_when_it_appears(client: ClientLike, rtype: ResourceType, name: str, namespace: str | None) -> bool:
    """After a create that was cut short: whether the object appeared (the server finished writing it) within
    SETTLE_SECONDS, and was then deleted."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        time.sleep(_SETTLE_POLL)
        if lookup(client, rtype, name, namespace) is not None:
            return client.delete(rtype, name, namespace)
    return False


def delete_command(client: ClientLike, objects: list[dict]) -> str:
    """The kubectl command that deletes `objects` (of one namespace)."""
    context = f" --context {client.context}" if client.context else ""
    namespace = objects[0]["metadata"].get("namespace") or client.namespace
    targets = " ".join(f"{client.resource_type(o).action('delete').resource}/{o['metadata']['name']}" for o in objects)
    return f"kubectl delete{context} -n {namespace} {targets}"


def owned_by(body: dict, owner: dict) -> dict:
    """`body` with an ownerReference to `owner` (garbage-collected with it; never blocks deletion)."""
    body = dict(body)
    metadata = dict(body.get("metadata", {}))
    metadata["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
        }
    ]
    body["metadata"] = metadata
    return body
