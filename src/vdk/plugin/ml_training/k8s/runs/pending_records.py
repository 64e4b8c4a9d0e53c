"""Run records whose run's creation never completed, found and settled by the job's next command.

A run's record is created first, and its main object owned by it (k8s/creation.py): "no answer" to a create
means "may exist". What a command that gave up (its retries used up, a signal, SIGKILL) can leave is a record
that owns nothing and that nothing owns:

- its main object exists, owned by it: the run started after all (the server wrote it late, or the command was
  killed between the two creates): the record is completed — owned by its run, as every record is;
- its main object does not exist, PENDING_SECONDS after the record was made: no create is under way any more (an
  API server gives up on a request after its own timeout, 60 s by default): the record is deleted — and should
  the main object still appear, Kubernetes deletes it, its owner being gone.

A record younger than that, with no main object, is left alone: a deploy may be creating its run right now.
Each settled record is said in one line; one that cannot be settled (no permission, a failing server) is a note,
never an error: the command goes on.
"""

from __future__ import annotations

from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.client import RUN_TYPES
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.creation import owner_uids
from vdk.plugin.ml_training.k8s.creation import settle_record
from vdk.plugin.ml_training.k8s.resources import CONFIG_MAP
from vdk.plugin.ml_training.k8s.resources import ResourceType
from vdk.plugin.ml_training.k8s.retries import Say
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_BACKEND
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_RUN

# How long after its record was made a run's main object may still appear: well past the API server's own
# request timeout (60 s by default) and the client's retries of one create (45 s).
PENDING_SECONDS = 300.0


def settle(client: KubeClient, job_name: str, say: Say | None = None) -> list[str]:
    """Complete or delete the records of `job_name` whose run's creation did not complete (see the module's
    docstring); returns what was done, each also said through `say` (default the client's)."""
    say = say or client.transport.say
    done: list[str] = []
    try:
        records = [r for r in client.job_records(job_name) if not r.get("ownerReferences")]
    except MLTrainingError as e:
        say(f"note: the run records of {job_name} could not be checked: {e.problem.splitlines()[0]}")
        return done
    for record in records:
        name, labels = record.get("name", ""), record.get("labels") or {}
        run, rtype = labels.get(LABEL_RUN, ""), RUN_TYPES.get(labels.get(LABEL_BACKEND, ""))
        if not run or rtype is None:
            continue
        try:
            what = _settle_one(client, name, record, run, rtype)
        except MLTrainingError as e:
            say(f"note: the record {name} of run {run} could not be settled: {e.problem.splitlines()[0]}")
            continue
        if what:
            say(f"note: {what}")
            done.append(what)
    if done:
        client.forget_job(job_name)
    return done


def _settle_one(client: KubeClient, name: str, record: dict, run: str, rtype: ResourceType) -> str | None:
    main = client.get(rtype.kind, run, rtype.api_version)
    if main is not None and record.get("uid") in owner_uids(main):
        full = client.get("ConfigMap", name)
        if full is None:
            return None
        settle_record(client, full, main)
        return f"run {run} was created after its command gave up: its record {name} is complete"
    if main is None and _age(record) > PENDING_SECONDS:
        client.delete(CONFIG_MAP, name, client.namespace)
        return f"removed the record {name} of run {run}, whose creation never completed"
    return None


def _age(metadata: dict) -> float:
    """Seconds since the object was made (0 when its time cannot be read: never old enough to delete)."""
    try:
        made = datetime.strptime(metadata.get("creationTimestamp") or "", "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return 0.0
    return (datetime.now(timezone.utc) - made.replace(tzinfo=timezone.utc)).total_seconds()
