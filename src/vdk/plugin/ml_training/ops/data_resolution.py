"""Every dataset of a job pinned at deploy, a remote check beside the smoke run (ops/deploy_checks.py): each
s3:// and hf:// reference resolved to an immutable version by the data tools (ops/data_tools.py, the code the
pods run), with the job's [ml-training.env] and the values of the Secrets its pods will read; claims are not
versioned (their manifests come from the pods). A bucket or repository that does not exist or cannot be read,
and datasets larger than the data cache claim, stop the deploy here, naming the config.ini line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.source_errors import SourceError
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import DATA_SECTION
from vdk.plugin.ml_training.job import SECRETS_SECTION
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.ops import data_tools
from vdk.plugin.ml_training.vocabulary.human_units import size_text

Note = Callable[[str], None]
RESOLVE_TIMEOUT = 900  # listing a prefix of millions of objects takes minutes


def unresolved_pins(spec: MLJobSpec) -> tuple[DataPin, ...]:
    """Every dataset of the job as config.ini names it ([ml-training.data], then [ml-training.mounts])."""
    pins = [DataPin(target=d.target, source=d.source) for d in spec.data]
    return tuple(pins + [DataPin(target=m.path, source=m.source()) for m in spec.mounts])


def resolve_data(spec: MLJobSpec, note: Note, client=None, shell: dict[str, str] | None = None) -> tuple[DataPin, ...]:
    """The job's datasets pinned (claims as they are). `client` (a KubeClient): where the Secrets and the cache
    claim are read; without one, the Secrets' variables come from `shell` (default: this process's environment),
    as for a local run. Raises JobConfigError naming the dataset's line for a problem of a source."""
    fetched = [d for d in spec.data if d.fetched]
    if not fetched:
        return unresolved_pins(spec)
    shell = dict(os.environ) if shell is None else shell
    env = dict(spec.env_dict)
    from_secrets: set[str] | None = None  # a local resolution: the credentials are the shell's
    if client is not None:
        from vdk.plugin.ml_training.k8s.storage.data_reports import secret_values

        from_secrets = set()
        env.update(secret_values(client, spec, note, shell, from_secrets))
    else:
        env.update({s.name: shell[s.name] for s in spec.secrets if shell.get(s.name)})
    refs = [{"target": d.target, "source": d.source} for d in fetched]
    try:
        arguments = ["resolve", "--refs", json.dumps(refs)]
        schemes = {d.scheme for d in fetched}
        answer = data_tools.run(
            schemes, arguments, env, RESOLVE_TIMEOUT, index_strategy=spec.index_strategy, job_dir=spec.job_dir
        )
    except SourceError as e:
        raise source_error(spec, e, shell, from_secrets) from None
    resolved = {p.target: p for p in (DataPin.from_dict(item) for item in answer)}
    pins = tuple(resolved.get(p.target, p) for p in unresolved_pins(spec))
    if client is not None and spec.data_cache_pvc:
        _check_cache_size(spec, client, [p for p in pins if p.fetched])
    return pins


def source_error(
    spec: MLJobSpec, error: SourceError, shell: Mapping[str, str], from_secrets: Collection[str] | None = None
) -> JobConfigError:
    """A problem of a dataset's source, as an error of the config.ini line that names it. A problem of credentials
    gets the fix of where they came from: `from_secrets` None, a local run's (they are the variables of `shell`,
    the user's); else a deploy's (the variables in `from_secrets` were read from the cluster's Secrets, the others
    from `shell` where a Secret could not be read)."""
    fix = error.fix
    if error.credentials and error.credential_fix and error.credential_fix in fix:
        fix = fix.replace(error.credential_fix, credential_fix(spec, error.credentials, shell, from_secrets))
    source = next((d for d in spec.data if d.target == error.target), None)
    if source is None:
        return JobConfigError(spec.config_path, error.problem, fix, DATA_SECTION)
    return JobConfigError(spec.config_path, error.problem, fix, DATA_SECTION, source.target, source.line)


def credential_fix(
    spec: MLJobSpec, credentials: tuple[str, ...], shell: Mapping[str, str], from_secrets: Collection[str] | None
) -> str:
    """What to do about credentials a source refused or lacked, where they came from. `credentials`: each variable
    as [ml-training.secrets] would map it (`HF_TOKEN = hf-credentials/token`)."""
    examples = dict(line.split(" = ", 1) for line in credentials)  # variable -> an example SECRET/KEY
    names = list(examples)
    mapped = {s.name: s for s in spec.secrets}
    unmapped = [name for name in names if name not in mapped]
    them = "it" if len(unmapped) == 1 else "them"
    mapping = ", ".join(f"`{name} = {examples[name]}`" for name in unmapped)
    if from_secrets is None:  # a local run: the shell's variables
        unset = [name for name in names if not shell.get(name)]
        if unset:
            text = (
                f"export {' '.join(f'{name}=...' for name in unset)} in this shell, then run again: a local run "
                "reads the credentials from your shell (the cluster's pods read them from the Secrets of "
                f"[{SECRETS_SECTION}])"
            )
        else:
            text = (
                f"the credentials exported in your shell ({', '.join(names)}) may not read it: export ones that may, "
                "then run again (a local run reads them from your shell, not from the cluster's Secrets)"
            )
        if unmapped:
            text += f"; for the cluster's pods, map {them} in [{SECRETS_SECTION}] too ({mapping})"
        return text
    if unmapped:
        return (
            f"map {them} in [{SECRETS_SECTION}] ({mapping}) to a Secret that may read it: the pods' data step reads "
            "the credentials from there, and the deploy pins the data with the Secret's values"
        )
    read = [mapped[name] for name in names if name in from_secrets]
    if read:
        secrets = sorted({s.secret for s in read})
        keys = " ".join(f"--from-literal={s.key}=..." for s in read)
        holds = f"the Secret {secrets[0]} holds" if len(secrets) == 1 else f"the Secrets {', '.join(secrets)} hold"
        return (
            f"{holds} credentials ({', '.join(s.reference() for s in read)}) that may not read it: put ones that "
            f"may there (`kubectl create secret generic {secrets[0]} {keys} --dry-run=client -o yaml | kubectl apply "
            "-f -`), then deploy again"
        )
    return (
        f"the Secrets of {', '.join(names)} cannot be read here, so the data was pinned with your shell's values, "
        f"which may not read it: check that {', '.join(mapped[name].reference() for name in names)} hold "
        "credentials that may (the pods use those), and export the same in this shell to pin the data at deploy"
    )


def _check_cache_size(spec: MLJobSpec, client, pins: list[DataPin]) -> None:
    from vdk.plugin.ml_training.k8s.storage.data_reports import claim_capacity

    capacity = claim_capacity(client, spec.data_cache_pvc or "")
    total = sum(p.bytes or 0 for p in pins)
    if capacity is None or total <= capacity:
        return
    largest = max(pins, key=lambda p: p.bytes or 0)
    source = next(d for d in spec.data if d.target == largest.target)
    what = (
        f"{largest.source} is {size_text(largest.bytes or 0)}"
        if len(pins) == 1
        else f"the datasets are {size_text(total)} together (the largest, {largest.source}, "
        f"{size_text(largest.bytes or 0)})"
    )
    raise JobConfigError(
        spec.config_path,
        f"{what}: more than the data cache claim {spec.data_cache_pvc} holds ({size_text(capacity)})",
        f"use a bigger claim for data_cache_pvc (at least {size_text(total)}, more to keep earlier versions), "
        "or a narrower prefix",
        DATA_SECTION,
        source.target,
        source.line,
    )
