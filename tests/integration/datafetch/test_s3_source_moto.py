"""s3:// datasets against a real S3 API on loopback (moto in server mode): pinned at deploy to their object list
(with VersionIds in a versioned bucket), and fetched by the data step exactly as a pod runs it — the command
and environment the manifests render, run as a process — at the pinned versions, once per version; what
cannot be had any more (an unversioned prefix that changed) is refused, saying so; a bucket that does not
exist or refuses the credentials stops the deploy naming the config.ini line."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tests.support.data_step import run_data_step
from tests.support.jobs import write_job
from tests.support.s3_store import ACCESS_KEY
from tests.support.s3_store import SECRET_KEY
from tests.support.s3_store import start_s3
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.ops.data_resolution import resolve_data
from vdk.plugin.ml_training.ops.data_samples import local_datasets
from vdk.plugin.ml_training.runtime import protocol

SECRETS = {"s3-credentials": {"access-key": ACCESS_KEY, "secret-key": SECRET_KEY}}
SECRETS_SECTION = (
    "[ml-training.secrets]\nAWS_ACCESS_KEY_ID = s3-credentials/access-key\n"
    "AWS_SECRET_ACCESS_KEY = s3-credentials/secret-key\n"
)
SHELL = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

pytestmark = pytest.mark.usefixtures("isolated_environment")


def job_of(tmp_path, s3_store, data: str, name: str = "vision", ml: dict | None = None):
    extra = f"[ml-training.data]\n{data}\n{SECRETS_SECTION}"
    env = {"AWS_ENDPOINT_URL": s3_store.url, "AWS_REGION": "us-east-1"}
    return load_job_spec(write_job(tmp_path, name, ml=ml or {}, env=env, extra=extra))


def fill(s3_store, bucket: str, versioned: bool, files: dict[str, bytes]) -> dict[str, str | None]:
    s3_store.create_bucket(bucket, versioned=versioned)
    return {key: s3_store.put(bucket, f"train/{key}", data) for key, data in files.items()}


def init_container(spec, run) -> dict:
    manifest = render_run(spec, IMAGE, run, "ml", "job")[0]
    (init,) = manifest["spec"]["template"]["spec"]["initContainers"]
    return init


def fetched_files(cache, pin) -> dict[str, bytes]:
    root = cache / "vdk-data" / pin.cache_key
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


FILES = {"a.bin": b"first a", "sub/b.bin": b"first b", "c.bin": b"c"}


def test_a_versioned_prefix_is_fetched_at_the_pinned_versions_after_it_changed(tmp_path, s3_store):
    versions = fill(s3_store, "pinned-versioned", True, FILES)
    spec = job_of(tmp_path, s3_store, "data/train = s3://pinned-versioned/train")
    (pin,) = resolve_data(spec, print, shell=SHELL)
    assert pin.versioned and pin.files == 3 and pin.bytes == sum(len(v) for v in FILES.values())
    assert {key: value.split(" ")[1] for key, value in pin.objects.items()} == versions  # each by its VersionId
    time.sleep(1.1)  # the store's clock moves on: what is written next is after the pin
    s3_store.put("pinned-versioned", "train/a.bin", b"second a")
    s3_store.put("pinned-versioned", "train/new.bin", b"written after the deploy")
    s3_store.delete("pinned-versioned", "train/c.bin")
    assert resolve_data(spec, print, shell=SHELL)[0].fingerprint != pin.fingerprint  # the next deploy sees it

    init = init_container(spec, dataclasses.replace(make_run(spec), data=(pin,)))
    cache = tmp_path / "cache"
    done = run_data_step(init["command"], init["env"], {layout.DATA_CACHE_DIR: cache}, SECRETS)
    assert done.returncode == 0, done.stderr
    assert fetched_files(cache, pin) == FILES  # exactly the pinned versions: not the new a, no new file, c still
    assert "fetching into the cache" in done.stdout and "fetched 3 files" in done.stdout

    again = run_data_step(init["command"], init["env"], {layout.DATA_CACHE_DIR: cache}, SECRETS)
    assert again.returncode == 0 and "in the cache already" in again.stdout  # once per version


def test_an_unversioned_prefix_is_fetched_while_it_is_as_pinned_and_refused_once_it_changed(tmp_path, s3_store):
    fill(s3_store, "pinned-plain", False, FILES)
    spec = job_of(tmp_path, s3_store, "data/train = s3://pinned-plain/train")
    (pin,) = resolve_data(spec, print, shell=SHELL)
    assert not pin.versioned and pin.version is None and pin.files == 3
    assert resolve_data(spec, print, shell=SHELL)[0].fingerprint == pin.fingerprint  # unchanged: the same
    init = init_container(spec, dataclasses.replace(make_run(spec), data=(pin,)))
    cache = tmp_path / "cache"
    done = run_data_step(init["command"], init["env"], {layout.DATA_CACHE_DIR: cache}, SECRETS)
    assert done.returncode == 0, done.stderr
    assert fetched_files(cache, pin) == FILES

    s3_store.put("pinned-plain", "train/a.bin", b"changed a")  # same key, other content
    assert resolve_data(spec, print, shell=SHELL)[0].fingerprint != pin.fingerprint
    other = tmp_path / "other-cache"
    refused = run_data_step(init["command"], init["env"], {layout.DATA_CACHE_DIR: other}, SECRETS)
    assert refused.returncode == 1
    assert "changed since it was pinned at deploy" in refused.stderr and "the bucket is not versioned" in refused.stderr
    assert "deploy again" in refused.stderr and "enable versioning" in refused.stderr
    assert not (other / "vdk-data" / f"{pin.cache_key}.complete").exists()  # nothing half-fetched counts


def test_a_trainjob_s_training_container_fetches_links_and_then_runs_its_command(tmp_path, s3_store):
    fill(s3_store, "trainjob-data", True, FILES)
    spec = job_of(tmp_path, s3_store, "data/train = s3://trainjob-data/train", ml={"data_cache_pvc": "ml-data"})
    pins = resolve_data(spec, print, shell=SHELL)
    trainer = render_run(spec, IMAGE, dataclasses.replace(make_run(spec), data=pins), "ml", "trainjob")[0]
    command = trainer["spec"]["trainer"]["command"]
    at = command.index("--")
    reads = "import os; print(sorted(os.listdir('data/train')), open('data/train/sub/b.bin').read())"
    job_dir = tmp_path / "image-job-dir"
    job_dir.mkdir()
    done = run_data_step(
        command[:at] + ["--", "python", "-c", reads],  # the launcher stands in for torchrun: the same exec
        trainer["spec"]["trainer"]["env"],
        {layout.DATA_CACHE_DIR: tmp_path / "cache", layout.JOB_DIR: job_dir},
        SECRETS,
        cwd=job_dir,
    )
    assert done.returncode == 0, done.stderr
    assert "['a.bin', 'c.bin', 'sub'] first b" in done.stdout  # the code reads ./data/train as on the cluster


@pytest.mark.parametrize(
    "source, problem, fix",
    [
        ("s3://no-such-bucket/train", "bucket no-such-bucket does not exist at http://127.0.0.1", "correct the bucket"),
        ("s3://pinned-empty/nothing-here", "holds no objects", "aws s3 ls"),
    ],
)
def test_a_bucket_or_prefix_that_is_not_there_stops_the_deploy_naming_the_line(
    tmp_path, s3_store, source, problem, fix
):
    s3_store.create_bucket("pinned-empty")
    s3_store.put("pinned-empty", "ok/x", b"x")
    spec = job_of(tmp_path, s3_store, f"data/ok = s3://pinned-empty/ok\ndata/train = {source}")
    with pytest.raises(JobConfigError) as info:
        resolve_data(spec, print, shell=SHELL)
    error = info.value
    assert error.section == "ml-training.data" and error.key == "data/train" and error.line is not None
    assert (spec.config_path.read_text().splitlines()[error.line - 1]) == f"data/train = {source}"
    assert problem in error.problem and fix in error.fix, error.message


def test_credentials_the_store_refuses_stop_the_deploy_naming_the_line(tmp_path):
    store = start_s3(tmp_path / "moto.log", checks_credentials_after=2)  # a store that checks access keys
    try:
        fill(store, "locked", False, {"a": b"a"})
        spec = job_of(tmp_path, store, "data/train = s3://locked/train")
        with pytest.raises(JobConfigError) as info:
            resolve_data(spec, print, shell=SHELL)
    finally:
        store.stop()
    assert "cannot be read with the credentials given" in info.value.problem
    # resolved without a cluster, as a local run does: the credentials were the shell's, and the fix says so
    assert info.value.fix.startswith(
        "the credentials exported in your shell (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
    )
    assert "map the credentials" not in info.value.fix and info.value.key == "data/train"


def test_a_smoke_sample_says_what_the_deploy_says_of_a_mistyped_prefix_and_sizes_in_human_units(tmp_path, s3_store):
    """A prefix with nothing below it is that, for the smoke run's sample as for the deploy (it said "no object of
    at most 67108864 bytes" and to raise smoke_sample_size); only objects too big for the sample are the cap's;
    a local run without credentials in its shell is told which to export."""
    fill(s3_store, "typo", False, {"a.bin": b"a", "b.bin": b"b"})
    mistyped = job_of(tmp_path, s3_store, "data/train = s3://typo/trian", name="mistyped")
    for where in ("sample", "deploy"):
        with pytest.raises(JobConfigError) as info:
            if where == "sample":
                local_datasets(mistyped, protocol.SMOKE, shell=SHELL)
            else:
                resolve_data(mistyped, print, shell=SHELL)
        assert info.value.problem.endswith("s3://typo/trian holds no objects (nothing below `trian/` in bucket typo)")
        assert info.value.fix.startswith("did you mean s3://typo/train? (`aws s3 ls s3://typo/` lists"), where
        assert "smoke_sample_size" not in info.value.fix

    s3_store.create_bucket("large")
    s3_store.put("large", "train/shard-0.bin", b"x" * 1_500_000)
    s3_store.put("large", "train/shard-1.bin", b"x" * 2_500_000)
    large = job_of(tmp_path, s3_store, "data/train = s3://large/train", name="large", ml={"smoke_sample_size": "1Mi"})
    with pytest.raises(JobConfigError) as info:
        local_datasets(large, protocol.SMOKE, shell=SHELL)
    assert info.value.problem.endswith(
        "every object of s3://large/train is larger than a smoke run's sample may be (1.0 MB, smoke_sample_size): "
        "the smallest, shard-0.bin, is 1.5 MB"
    )
    assert info.value.fix.startswith(
        "raise smoke_sample_size in [ml-training] to at least 1.5 MB (`smoke_sample_size = 2Mi`)"
    )

    with pytest.raises(JobConfigError) as info:  # the shell has no credentials; config.ini maps them already
        local_datasets(large, protocol.SMOKE, shell={})
    assert info.value.problem.endswith("no credentials to read s3://large/train")
    assert info.value.fix.startswith("export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... in this shell")


# --- keys that alias: S3 keys are names, a file system's paths are not ------------------------------------------


def put_raw(s3_store, bucket: str, key: str, data: bytes) -> None:
    """An object whose key keeps its `./` (an HTTP client would fold `/./` out of a URL: the dot is escaped)."""
    s3_store.put(bucket, key.replace("/./", "/%2E/"), data)


@pytest.mark.parametrize(
    ("bucket", "keys", "words"),
    [
        (
            "alias-dot",
            ("d/c.txt", "d/./c.txt"),
            ["'train/d/c.txt'", "'train/d/./c.txt'", "land on one file, data/train/d/c.txt"],
        ),
        ("alias-slashes", ("d/c.txt", "d//c.txt"), ["'d//c.txt'", "land on one file"]),
    ],
)
def test_keys_that_land_on_one_path_are_refused_at_deploy_in_the_smoke_sample_and_at_the_fetch(
    tmp_path, s3_store, bucket, keys, words
):
    s3_store.create_bucket(bucket)
    first, second = keys
    put_raw(s3_store, bucket, f"train/{first}", b"1,2,3\n" * 100)
    spec = job_of(tmp_path, s3_store, f"data/train = s3://{bucket}/train")
    (pin,) = resolve_data(spec, print, shell=SHELL)  # a run deployed before the second key came
    put_raw(s3_store, bucket, f"train/{second}", b"")  # the 0-byte one it would have trained on

    with pytest.raises(JobConfigError) as caught:  # the next deploy's pin
        resolve_data(spec, print, shell=SHELL)
    message = caught.value.message.replace("'train/", "'")
    for word in words:
        assert word.replace("'train/", "'") in message, caught.value.message
    assert "delete or rename the other" in caught.value.fix
    if bucket != "alias-dot":
        return  # the smoke sample and the data step read them through the same check: once is enough

    with pytest.raises(JobConfigError) as sampled:  # the smoke run's sample of the same prefix
        local_datasets(spec, protocol.SMOKE, shell=SHELL)
    assert "land on one file" in sampled.value.problem or "needs a directory" in sampled.value.problem

    init = init_container(spec, dataclasses.replace(make_run(spec), data=(pin,)))  # its data step
    cache = tmp_path / "cache"
    done = run_data_step(init["command"], init["env"], {layout.DATA_CACHE_DIR: cache}, SECRETS)
    assert done.returncode != 0
    assert "land on one file" in done.stdout + done.stderr or "needs a directory" in done.stdout + done.stderr
    assert not [p for p in cache.rglob("*") if p.is_file() and p.suffix not in (".json", ".lock")]  # no data
