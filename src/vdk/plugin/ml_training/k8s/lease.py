"""A short-lived lock on the cluster that every `vdk` shares: a coordination.k8s.io/v1 Lease, the object
Kubernetes' own leader election uses. `vdk deploy --if-changed` holds the job's (`<job>-deploy`) from the moment
it checks the job's runs again until its run exists, so that concurrent invocations start one run.

- Taken: created (a 409 AlreadyExists: another was quicker, read again), or updated with the resourceVersion it
  was read at (a 409 Conflict: another was quicker) when it is free: no holder, or a holder that stopped renewing
  it — its resourceVersion has not changed for its `leaseDurationSeconds` as this machine's own clock measures
  (as client-go does: two machines' clocks need not agree). A create or update whose answer was lost is found
  by reading the lease back: it names this holder.
- Renewed while held, by a thread, every third of its duration (renewTime).
- Given back by deleting it, with preconditions (its uid and resourceVersion): one another took over is left.
  A holder killed with SIGKILL leaves its lease: the next waits its duration (DURATION_SECONDS), then takes it.
- Waiting for it is said (who holds it, since when), then every NOTICE_EVERY seconds, at most WAIT_SECONDS.
"""

from __future__ import annotations

import getpass
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from datetime import timezone
from typing import TYPE_CHECKING

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s import retries
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.resources import LEASE
from vdk.plugin.ml_training.k8s.retries import Say

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.client import KubeClient

DURATION_SECONDS = 30  # a holder that stopped renewing (killed) is waited for this long
WAIT_SECONDS = 900.0  # the most a command waits for another's lease (a deploy's push and create fit in it)
NOTICE_EVERY = 10.0
_POLL = 0.5


def holder_identity() -> str:
    """Who holds a lease: user, machine, process, and a random part (two commands of one process differ)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return f"{user}@{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


def micro_time(when: datetime | None = None) -> str:
    """A metav1.MicroTime as the API server reads it (RFC 3339, six digits of the second's fraction)."""
    return (when or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Held:
    """A lease this command holds: `lost` says why it was lost meanwhile (another took it over), else None."""

    def __init__(self, client: KubeClient, obj: dict, say: Say):
        self.client, self.obj, self.say = client, obj, say
        self.name: str = obj["metadata"]["name"]
        self.holder: str = obj["spec"]["holderIdentity"]
        self.lost: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        duration = obj["spec"].get("leaseDurationSeconds") or DURATION_SECONDS
        self._renewer = threading.Thread(
            target=self._renew_every, args=(duration / 3,), name="vdk-ml-lease", daemon=True
        )
        self._renewer.start()

    def _renew_every(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            try:
                self._renew()
            except MLTrainingError:
                continue  # the server failing for a while: the next renewal tries again
            if self.lost:
                return

    def _renew(self) -> None:
        with self._lock:
            body = {**self.obj, "spec": {**self.obj["spec"], "renewTime": micro_time()}}
            try:
                self.obj = _update(self.client, body)
            except KubeApiError as e:
                if e.status != 409:
                    raise
                current = _read(self.client, self.name)
                holder = ((current or {}).get("spec") or {}).get("holderIdentity")
                if current is not None and holder == self.holder:
                    self.obj = current  # our own renewal, whose answer was lost
                else:
                    self.lost = f"{holder or 'nobody'} holds it now"
                    self.say(f"note: the lease {self.name} was lost ({self.lost})")

    def release(self) -> None:
        """Give the lease back (delete it, if it is still as this command left it); never raises."""
        self._stop.set()
        self._renewer.join(timeout=5)
        with self._lock:
            metadata = self.obj["metadata"]
            body = {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "preconditions": {"uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"]},
            }
            try:
                self.client.transport.request(
                    "DELETE",
                    LEASE.path(self.client.namespace, self.name),
                    body=body,
                    action=LEASE.action("delete", self.client.namespace, self.name),
                )
            except KubeApiError as e:
                if e.status not in (404, 409):  # gone, or taken over: not ours to delete
                    self.say(
                        f"note: the lease {self.name} could not be given back ({e.problem.splitlines()[0]}); "
                        f"it expires {DURATION_SECONDS} s after its last renewal"
                    )


@contextmanager
def hold(
    client: KubeClient,
    name: str,
    say: Say,
    what: str,
    labels: dict[str, str] | None = None,
    duration: int = DURATION_SECONDS,
    wait: float = WAIT_SECONDS,
) -> Iterator[Held]:
    """Within: the lease `name` in the client's namespace is this command's (waiting, said through `say`, while
    another holds it; `what`: what the holder does, for those lines). Given back at the end, whatever happens."""
    held = Held(client, acquire(client, name, say, what, labels or {}, duration, wait), say)
    try:
        yield held
    finally:
        held.release()


def acquire(
    client: KubeClient, name: str, say: Say, what: str, labels: dict[str, str], duration: int, wait: float
) -> dict:
    """The lease `name`, taken by this command (see the module's docstring): the object as stored."""
    holder = holder_identity()
    started = time.monotonic()
    seen: tuple[str, float] | None = None  # (resourceVersion, when this command first saw it)
    said: float | None = None
    while True:
        current = None
        try:
            current = _read(client, name)
            now = time.monotonic()
            if current is None:
                return _create(client, _lease(name, client.namespace, holder, duration, 0, labels))
            spec = current.get("spec") or {}
            if spec.get("holderIdentity") == holder:
                return current  # taken by this command's own request, whose answer was lost
            version = current["metadata"]["resourceVersion"]
            if seen is None or seen[0] != version:
                seen = (version, now)
            if not spec.get("holderIdentity") or now - seen[1] >= (spec.get("leaseDurationSeconds") or duration):
                transitions = int(spec.get("leaseTransitions") or 0) + 1
                taken = _lease(name, client.namespace, holder, duration, transitions, labels)
                return _update(client, {**taken, "metadata": {**current["metadata"], **taken["metadata"]}})
        except KubeApiError as e:
            if (e.status != 409 and not retries.retryable(e)) or time.monotonic() - started >= wait:
                raise _refused(e, name) from None
            # another was quicker, or the server failed (its answer lost): read it again
        waited = time.monotonic() - started
        if current is not None:
            holder_now = (current.get("spec") or {}).get("holderIdentity") or "?"
            since = (current.get("spec") or {}).get("acquireTime") or "?"
            if waited >= wait:
                raise MLTrainingError(
                    f"another vdk ({holder_now}) has held the lease {name} in namespace {client.namespace} since "
                    f"{since} ({what}); waited {waited:.0f} s for it",
                    "wait for that command to end and run this one again; if it was stopped for good, the lease "
                    f"expires {duration} s after its last renewal",
                )
            if said is None or waited - said >= NOTICE_EVERY:
                said = waited
                say(
                    f"Waiting for another vdk ({holder_now}, since {since}) to finish: it holds the lease {name} "
                    f"({what}; {waited:.0f} s)"
                )
        time.sleep(_POLL)


def _lease(name: str, namespace: str, holder: str, duration: int, transitions: int, labels: dict[str, str]) -> dict:
    now = micro_time()
    return {
        "apiVersion": LEASE.api_version,
        "kind": LEASE.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": transitions,
        },
    }


def _read(client: KubeClient, name: str) -> dict | None:
    answer, error = client.transport.get_tolerant(
        LEASE.path(client.namespace, name), LEASE.action("get", client.namespace, name), tolerate=(404,)
    )
    return None if error is not None else answer


def _create(client: KubeClient, body: dict) -> dict:
    namespace = body["metadata"]["namespace"]
    return client.transport.request(
        "POST",
        LEASE.path(namespace),
        body=body,
        query={"fieldValidation": "Strict"},
        action=LEASE.action("create", namespace, body["metadata"]["name"]),
    )


def _update(client: KubeClient, body: dict) -> dict:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    return client.transport.request(
        "PUT",
        LEASE.path(namespace, name),
        body=body,
        query={"fieldValidation": "Strict"},
        action=LEASE.action("update", namespace, name),
        retry=False,  # a conflict after a lost answer is read back by the caller
    )


def _refused(error: KubeApiError, name: str) -> MLTrainingError:
    if error.status == 403:
        return MLTrainingError(
            f"{error.problem} (the lease {name} makes concurrent `vdk deploy --if-changed` start one run)",
            f"{error.fix}; the Role needs create, get, update and delete on leases (coordination.k8s.io)",
        )
    return error
