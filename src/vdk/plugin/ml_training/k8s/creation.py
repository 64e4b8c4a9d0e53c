"""How the client creates objects: a run's all or nothing, and each one exactly once whatever the network does.

A run's name is chosen before its first request (k8s/runs/identity.py), so every object of it has a known name.
A create whose answer is lost (the connection reset or closed), late (the client's timeout), or refused for now
(429, 5xx) may have been done: the object is then looked up by that name and, when it is there with the run's
labels, adopted — never created a second time; when it is not there, the create is sent again (k8s/retries.py
bounds how often and how long). A failure that remains, or SIGINT/SIGTERM/SIGHUP in the middle, deletes again
what the call created (including an object whose create was under way); what cannot be deleted is named, with
the command that deletes it.

"No answer" means "may exist", also after the client gave up: an overloaded API server commits a create after
the client's read timeout, or after a signal stopped the command. So a run's record is created first, and the
run's main object (its training object: the backend's kind) is created owned by it: whenever the main object appears,
Kubernetes' garbage collector deletes it if its record is gone — which is what a failed or interrupted create
leaves. Once the main object exists, it owns the record as well (`settle_record`) and every other object (its
Service): deleting either, or the run's TTL, removes them all; no run outlives its record, no record its run.
A record the server wrote after its command gave up (it owns nothing, and nothing owns it) is removed by the
job's next command (k8s/runs/pending_records.py).
"""

from __future__ import annotations

import time
from typing import Protocol

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s import retries
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.retries import Say
from vdk.plugin.ml_training.k8s.runs.record import record_name
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
    """Create `manifests` (the run's main object first, then what it owns), all or nothing (see the module's
    docstring): each first checked by the server (dryRun=All: schema, strict fields, admission webhooks), so most
    rejections happen before anything exists. The run's record, when among them, is created first and owns the
    main object until the main object owns it too (`settle_record`). `say` (default the transport's) is told
    what an interruption left. Returns the objects as stored, in the order of `manifests`."""
    say = say or client.transport.say
    prepared = [client.prepare(m) for m in manifests]
    for rtype, body in prepared:
        create(client, rtype, body, dry_run=True)
    record = _record_index(prepared)
    order = ([record] if record is not None else []) + [i for i in range(len(prepared)) if i != record]
    created: dict[int, dict] = {}
    pending: int | None = None
    try:
        for i in order:
            rtype, body = prepared[i]
            if i == 0 and record is not None:
                body = owned_by(body, created[record])  # gone with its record, whenever it appears
            elif i != 0 and i != record:
                body = owned_by(body, created[0])
            pending = i
            created[i] = create(client, rtype, body)
            pending = None
        if record is not None:
            created[record] = settle_record(client, created[record], created[0])
    except BaseException as error:
        _roll_back(client, prepared, created, pending, record, error, say)
        raise
    return [created[i] for i in range(len(prepared))]


def _record_index(prepared: list[tuple[ResourceType, dict]]) -> int | None:
    """Where the run's record is among a run's objects (a ConfigMap named after the main object), if it is."""
    if not prepared:
        return None
    name = record_name(prepared[0][1]["metadata"]["name"])
    found = [
        i
        for i, (_, body) in enumerate(prepared)
        if body.get("kind") == "ConfigMap" and body["metadata"]["name"] == name
    ]
    return found[0] if found and found[0] != 0 else None


def settle_record(client: ClientLike, record: dict, main: dict) -> dict:
    """The record, now owned by the run's main object (which it owns already): the two go together, whoever
    deletes either (`vdk delete`, `kubectl delete`, the run's TTL). An update with the record's resourceVersion:
    sent again after a failure worth it, and a conflict after a lost answer is checked by reading it back."""
    rtype, metadata = client.resource_type(record), record["metadata"]
    namespace, name = metadata.get("namespace"), metadata["name"]
    body = {**record, "metadata": {**metadata, "ownerReferences": [_reference(main)]}}
    try:
        return client.transport.request(
            "PUT", rtype.path(namespace, name), body=body, action=rtype.action("update", namespace, name), retry=True
        )
    except KubeApiError as e:
        if e.status != 409:
            raise
        found = lookup(client, rtype, name, namespace)
        if found is not None and owner_uids(found) == [main["metadata"]["uid"]]:
            return found  # the first attempt's answer was lost: it was done
        raise


def owner_uids(obj: dict) -> list[str]:
    return [ref.get("uid", "") for ref in (obj.get("metadata") or {}).get("ownerReferences") or []]


def _roll_back(
    client: ClientLike,
    prepared: list[tuple[ResourceType, dict]],
    created: dict[int, dict],
    pending: int | None,
    record: int | None,
    error: BaseException,
    say: Say,
) -> None:
    """Delete what `apply` created, and the object whose create was under way; raise `error` naming what
    remains (an MLTrainingError), or say it (an interruption, re-raised by the caller)."""
    # The object whose create was under way may exist, unless the server said it was not made: an
    # interruption, a lost answer, a failed lookup or retries used up leave it unknown, so it is deleted too.
    unsure = pending is not None and not getattr(error, "not_created", False)
    objects = {**created, **({pending: prepared[pending][1]} if pending is not None and unsure else {})}
    remaining: list[tuple[dict, str]] = []
    deleted: dict[int, str] = {}
    unseen: str | None = None  # the object under way, not there yet: the server may still write it
    for i in sorted(objects, key=lambda i: (i == record, -i)):  # dependents first; the record, their owner, last
        obj = objects[i]
        rtype, metadata = client.resource_type(obj), obj["metadata"]
        try:
            gone = client.delete(rtype, metadata["name"], metadata.get("namespace"))
            if i == pending and not gone:
                gone = _delete_when_it_appears(client, rtype, metadata["name"], metadata.get("namespace"))
                unseen = None if gone else f"{rtype.kind}/{metadata['name']}"
            if gone:
                deleted[i] = f"{rtype.kind}/{metadata['name']}"
        except MLTrainingError as e:
            remaining.append((obj, e.problem))
    done = [deleted[i] for i in sorted(deleted)]
    # a create without an answer (or cut short by a signal) may be done later; one answered 5xx as a rule was not
    no_answer = not isinstance(error, KubeApiError) or error.status == 0
    later = _later(unseen, pending, record, created) if no_answer and not remaining else ""
    if not remaining:
        if isinstance(error, MLTrainingError) and (done or later):
            raise MLTrainingError(
                f"{error.problem}\nNothing was left in the cluster: what was created was deleted again"
                f"{' (' + ', '.join(done) + ')' if done else ''}{later}",
                error.fix,
            ) from error
        if not isinstance(error, MLTrainingError):
            what = f" (deleted {', '.join(done)})" if done else ""
            run = _run_name(prepared)
            say(f"Stopped before run {run} was complete; nothing of it is left in the cluster{what}{later}")
        return
    ordered = sorted(remaining, key=lambda pair: pair[0]["metadata"]["name"])
    names = ", ".join(f"{client.resource_type(o).kind}/{o['metadata']['name']} ({why})" for o, why in ordered)
    command = delete_command(client, [o for o, _ in ordered])
    if isinstance(error, MLTrainingError):
        raise MLTrainingError(
            f"{error.problem}\nCleaning up after that failed too; these objects remain: {names}",
            f"{error.fix}\nDelete what remains: `{command}`",
        ) from error
    say(
        f"Stopped before run {_run_name(prepared)} was complete, and these objects remain: {names}. "
        f"Delete them: `{command}`"
    )


def _later(unseen: str | None, pending: int | None, record: int | None, created: dict[int, dict]) -> str:
    """What happens to an object whose create got no answer and that was not there yet: the server may still
    write it (an overloaded API server commits a create after the client gave up)."""
    if unseen is None:
        return ""
    owner = record if pending == 0 else 0 if pending != record else None
    if owner is not None and owner in created:
        what = "the run's record" if owner == record else "the run's main object"
        return (
            f"; {unseen}, which the API server may still write, is deleted by Kubernetes as soon as it appears "
            f"(its owner, {what}, was deleted): deploying again starts one run"
        )
    return f"; {unseen}, which the API server may still write, is removed by the job's next vdk deploy or vdk show"


def _run_name(prepared: list[tuple[ResourceType, dict]]) -> str:
    return prepared[0][1]["metadata"]["name"] if prepared else "?"


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
    metadata["ownerReferences"] = [_reference(owner)]
    body["metadata"] = metadata
    return body


def _reference(owner: dict) -> dict:
    """An ownerReference to `owner` (not its controller: an operator's own references are left alone)."""
    metadata = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": metadata["name"], "uid": metadata["uid"]}
