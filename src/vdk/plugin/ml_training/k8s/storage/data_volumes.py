"""A run's datasets in its pods, for every backend: the data step, the data cache, and each dataset at its target.

- The data step (`python -m vdk.plugin.ml_training.datafetch fetch`, from the job's image: datafetch/) fetches
  every pinned s3:// and hf:// version into the data cache, once per version (a pod that finds it there goes
  on), and reports the manifest of every claim the job mounts. It is an init container of the job's image
  where the backend's pods can have one (`init_container`). Where they cannot (a backend whose pod changes
  override the containers its runtime has, and mount a volume once per container: see its module), it is the
  step before torch's launcher in the training container (`fetch_then`), which links each fetched dataset at
  its target to the cache's directory of its version.
- The data cache is the claim `data_cache_pvc` (read-write in the data step), else an emptyDir of the pod.
- Each fetched dataset is the cache's directory of its version, mounted read-only at its target; a claim of
  [ml-training.data] is mounted read-only there. A relative target is below the run's working directory
  (layout.working_dir), as what the code writes is.

The pins come with the run (RunInfo.data, resolved by the deploy); without them (a dry run, the permission
check's placeholder run) the datasets are rendered unresolved, and a data step given such pins refuses them.
"""

from __future__ import annotations

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.datafetch import MODULE
from vdk.plugin.ml_training.datafetch.data_cache import sub_path
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.data_pins import encode_pins
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.vocabulary.human_units import counted

FETCH_CONTAINER = "vdk-data"
CACHE_VOLUME = "vdk-data-cache"
DATASET_VOLUME_PREFIX = "dataset-"  # claims of [ml-training.data]; those of [ml-training.mounts] are `data-<i>`
MOUNT_VOLUME_PREFIX = "data-"


def pins(spec: MLJobSpec, run: RunInfo) -> list[DataPin]:
    """Every dataset of the job as the run pinned it ([ml-training.data], then [ml-training.mounts]); unresolved
    where the run has no pins."""
    pinned = {p.target: p for p in run.data}
    wanted = [(d.target, d.source) for d in spec.data] + [(m.path, m.source()) for m in spec.mounts]
    return [pinned.get(target) or DataPin(target=target, source=source) for target, source in wanted]


def has_data_step(spec: MLJobSpec) -> bool:
    return bool(spec.data or spec.mounts)


def fetches(spec: MLJobSpec) -> bool:
    return any(d.fetched for d in spec.data)


def target_path(spec: MLJobSpec, target: str) -> str:
    """Where a target is in the training container: an absolute path as it is, a relative one below the run's
    working directory."""
    return target if target.startswith("/") else f"{layout.working_dir(spec)}/{target}"


def volumes(spec: MLJobSpec) -> list[dict]:
    """The data cache (when something is fetched) and the claims of [ml-training.data]."""
    out = []
    if fetches(spec):
        if spec.data_cache_pvc:
            out.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": spec.data_cache_pvc}})
        else:
            out.append({"name": CACHE_VOLUME, "emptyDir": {}})
    for i, source in enumerate(spec.data):
        if not source.fetched:
            claim = {"claimName": source.claim()[0], "readOnly": True}
            out.append({"name": f"{DATASET_VOLUME_PREFIX}{i}", "persistentVolumeClaim": claim})
    return out


def training_mounts(spec: MLJobSpec, run: RunInfo, linked: bool = False) -> list[dict]:
    """Each dataset of [ml-training.data] at its target, read-only (fetched ones: their version's directory of
    the cache; with `linked`, the data step links them instead)."""
    out = []
    pinned = pins(spec, run)
    for i, source in enumerate(spec.data):
        entry: dict = {"mountPath": target_path(spec, source.target), "readOnly": True}
        if source.fetched and linked:
            continue
        if source.fetched:
            entry.update({"name": CACHE_VOLUME, "subPath": sub_path(pinned[i])})
        else:
            entry["name"] = f"{DATASET_VOLUME_PREFIX}{i}"
            if source.claim()[1]:
                entry["subPath"] = source.claim()[1]
        out.append(entry)
    return out


def _claims(spec: MLJobSpec) -> list[tuple[str, str, str]]:
    """(target, volume, subPath) of every claim the job mounts, for the data step's manifests."""
    out = [(s.target, f"{DATASET_VOLUME_PREFIX}{i}", s.claim()[1]) for i, s in enumerate(spec.data) if not s.fetched]
    out += [(m.path, f"{MOUNT_VOLUME_PREFIX}{i}", m.sub_path) for i, m in enumerate(spec.mounts)]
    return out


def step_mounts(spec: MLJobSpec, with_claims: bool = True) -> list[dict]:
    """The data step's mounts: the cache read-write, and (`with_claims`) every claim read-only at its target, as
    the training container has it."""
    out: list[dict] = [{"name": CACHE_VOLUME, "mountPath": layout.DATA_CACHE_DIR}] if fetches(spec) else []
    for target, volume, claim_dir in _claims(spec) if with_claims else []:
        entry = {"name": volume, "mountPath": target_path(spec, target), "readOnly": True}
        if claim_dir:
            entry["subPath"] = claim_dir
        out.append(entry)
    return out


def step_command(spec: MLJobSpec, run: RunInfo, python: str, link: bool = False) -> list[str]:
    """The data step: fetch the pinned versions (`link`: and link each at its target), report the claims'
    manifests."""
    fetched = [p for p in pins(spec, run) if p.fetched]
    argv = [python, "-m", MODULE, "fetch", "--cache", layout.DATA_CACHE_DIR, "--pins", encode_pins(fetched)]
    if spec.data_cache_pvc:
        argv += ["--claim", spec.data_cache_pvc]
    for target, _, _ in _claims(spec):
        argv += ["--manifest", f"{target}={target_path(spec, target)}"]
    for pin in fetched if link else []:
        argv += ["--link", f"{target_path(spec, pin.target)}={layout.DATA_CACHE_DIR}/{sub_path(pin)}"]
    return argv


def fetch_then(spec: MLJobSpec, run: RunInfo, python: str, command: list[str]) -> list[str]:
    """`command` after the data step, in one container that has the cache at DATA_CACHE_DIR (`step_mounts(spec,
    with_claims=False)`) and each fetched dataset linked at its target."""
    if not has_data_step(spec):
        return command
    return step_command(spec, run, python, link=True) + ["--", *command]


def notes(spec: MLJobSpec) -> list[str]:
    """What to know of the job's datasets on the cluster, for the deploy to say."""
    if fetches(spec) and not spec.data_cache_pvc:
        return [
            f"no data_cache_pvc: each of the run's {counted(spec.nodes.max, 'pod')} fetches its datasets itself, in "
            "every run; "
            "set data_cache_pvc (a ReadWriteMany claim) to fetch each version once"
        ]
    return []


def init_container(spec: MLJobSpec, image: layout.JobImage, run: RunInfo, env: list[dict], resources: dict) -> dict:
    """The data step as an init container of the job's image, with the training container's environment
    (the stores' endpoints and credentials) and its CPU and memory (the pod's request stays the same)."""
    limits = {k: v for k, v in (resources.get("limits") or {}).items() if k in ("memory",)}
    requests = {k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")}
    return {
        "name": FETCH_CONTAINER,
        "image": image.reference,
        "imagePullPolicy": "IfNotPresent",
        "command": step_command(spec, run, image.python),
        "workingDir": layout.JOB_DIR,
        "env": env,
        "resources": {"requests": requests, "limits": limits},
        "volumeMounts": step_mounts(spec),
    }
