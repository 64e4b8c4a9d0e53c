"""config.ini [ml-training] -> MLJobSpec: defaults, every key, and the errors users see."""

from pathlib import Path

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.errors import SettingError
from vdk.plugin.ml_training.job import DEFAULT_BASE_IMAGE
from vdk.plugin.ml_training.job import is_ml_job
from vdk.plugin.ml_training.job import load_job_identity
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job import ml_config_problem
from vdk.plugin.ml_training.job import read_job_config

TRAIN = 'import torch\n\nif __name__ == "__main__":\n    print("hi")\n'


def make_job(tmp_path: Path, ml: str = "", extra: str = "", name="my-job", files=None) -> Path:
    return write_job(
        tmp_path, name, ml=ml, extra=extra, team="vision", files={"train.py": TRAIN} if files is None else files
    )


def error_of(job: Path, settings=None) -> JobConfigError:
    with pytest.raises(JobConfigError) as info:
        load_job_spec(job, settings)
    return info.value


def test_defaults(tmp_path):
    spec = load_job_spec(make_job(tmp_path))
    assert spec.name == "my-job"
    assert spec.team == "vision"
    assert str(spec.entrypoint) == "train.py"
    assert spec.args == ()
    assert (spec.nodes.min, spec.nodes.max, spec.nodes.elastic) == (1, 1, False)
    assert spec.gpus_per_node.count == 1 and spec.gpus_per_node.resource_name == "nvidia.com/gpu"
    assert spec.procs_per_node == 1
    assert (spec.cpu, spec.memory, spec.shm_size) == ("4", "16Gi", "8Gi")
    assert spec.base_image == DEFAULT_BASE_IMAGE
    assert spec.backend == "auto"
    assert spec.queue is None and spec.priority_class is None
    assert spec.max_restarts == 3
    assert spec.max_runtime_seconds is None
    assert spec.ttl_after_finished_seconds == 7 * 86400
    assert spec.smoke_steps == 1
    assert spec.smoke_processes == 1
    assert spec.smoke_timeout_seconds == 600
    assert (spec.stall_timeout_seconds, spec.startup_timeout_seconds) == (1800, 3600)
    assert spec.env == ()


def test_every_key(tmp_path):
    job = make_job(
        tmp_path,
        """entrypoint = src/run.py
args = --epochs 3 --name 'a b'
nodes = 2:8
gpus_per_node = 8
procs_per_node = 4
cpu = 32
memory = 500Gi
shm_size = 64Gi
base_image = nvcr.io/nvidia/pytorch:25.01-py3
backend = PyTorchJob
queue = team-a
priority_class = high
max_restarts = 0
max_runtime = 1h30m
ttl_after_finished = 0
smoke_steps = 3
smoke_processes = 4
smoke_timeout = 2m
registry = localhost:5000/ml
namespace = ml-team
kube_context = kind-kind
""",
        extra="[ml-training.env]\nNCCL_DEBUG = INFO\nmixedCase = 1\n",
        files={"src/run.py": TRAIN},
    )
    spec = load_job_spec(job)
    assert spec.entrypoint.argv() == ["src/run.py"]
    assert spec.args == ("--epochs", "3", "--name", "a b")
    assert spec.command_args() == ["src/run.py", "--epochs", "3", "--name", "a b"]
    assert (spec.nodes.min, spec.nodes.max, spec.nodes.elastic, str(spec.nodes)) == (2, 8, True, "2:8")
    assert spec.gpus_per_node.count == 8 and spec.procs_per_node == 4
    assert (spec.cpu, spec.memory, spec.shm_size) == ("32", "500Gi", "64Gi")
    assert spec.backend == "pytorchjob"
    assert (spec.queue, spec.priority_class) == ("team-a", "high")
    assert spec.max_restarts == 0
    assert spec.max_runtime_seconds == 5400
    assert spec.ttl_after_finished_seconds == 0
    assert (spec.smoke_steps, spec.smoke_processes, spec.smoke_timeout_seconds) == (3, 4, 120)
    assert (spec.registry, spec.namespace, spec.kube_context) == ("localhost:5000/ml", "ml-team", "kind-kind")
    assert spec.env_dict == {"NCCL_DEBUG": "INFO", "mixedCase": "1"}


def test_module_entrypoint(tmp_path):
    job = make_job(tmp_path, "entrypoint = -m pkg.train", files={"pkg/__init__.py": "", "pkg/train.py": TRAIN})
    spec = load_job_spec(job)
    assert spec.entrypoint.is_module and spec.entrypoint.argv() == ["-m", "pkg.train"]


def test_mig_profile(tmp_path):
    spec = load_job_spec(make_job(tmp_path, "gpus_per_node = 1g.10gb"))
    assert spec.gpus_per_node.resource_name == "nvidia.com/mig-1g.10gb"
    assert spec.procs_per_node == 1


def test_cpu_only_and_derived_defaults(tmp_path):
    spec = load_job_spec(make_job(tmp_path, "gpus_per_node = 0\nnodes = 2\nmemory = 3Gi"))
    assert spec.gpus_per_node.resource_name is None
    assert spec.procs_per_node == 1
    assert spec.smoke_processes == 2  # 2 nodes x 1 process is distributed
    assert spec.shm_size == "1536Mi"


def test_smoke_processes_default_follows_world_size(tmp_path):
    assert load_job_spec(make_job(tmp_path, "gpus_per_node = 4")).smoke_processes == 2
    assert load_job_spec(make_job(tmp_path, "gpus_per_node = 1", name="b")).smoke_processes == 1


def test_entrypoint_detection_prefers_the_single_guarded_script(tmp_path):
    job = make_job(tmp_path, files={"finetune.py": TRAIN, "utils.py": "def f():\n    pass\n"})
    assert str(load_job_spec(job).entrypoint) == "finetune.py"


def test_entrypoint_detection_falls_back_to_train_py(tmp_path):
    job = make_job(tmp_path, files={"a.py": TRAIN, "b.py": TRAIN, "train.py": "print(1)\n"})
    assert str(load_job_spec(job).entrypoint) == "train.py"


def test_entrypoint_detection_failure_lists_candidates(tmp_path):
    err = error_of(make_job(tmp_path, files={"a.py": TRAIN, "b.py": TRAIN}))
    assert err.key == "entrypoint"
    assert "a.py, b.py" in str(err) and "entrypoint = " in str(err)


def test_settings_are_defaults_that_the_job_overrides(tmp_path):
    settings = {"registry": "localhost:5000/team", "namespace": "default", "smoke_timeout": 30}
    spec = load_job_spec(make_job(tmp_path, "namespace = ml"), settings)
    assert (spec.registry, spec.namespace, spec.smoke_timeout_seconds) == ("localhost:5000/team", "ml", 30)


MAPPINGS = {"team_namespaces": "vision:ml-vision, nlp:ml-nlp", "team_queues": "vision:vision-gpus"}


def test_a_team_s_namespace_and_queue_come_from_the_mappings(tmp_path):
    spec = load_job_spec(make_job(tmp_path), {**MAPPINGS, "namespace": "ml-shared"})
    assert (spec.team, spec.namespace, spec.queue) == ("vision", "ml-vision", "vision-gpus")
    assert dict(spec.origins) == {
        "team": f"[owner] team of {spec.config_path}",
        "namespace": "ml_training_team_namespaces for team vision",
        "queue": "ml_training_team_queues for team vision",
    }
    # where the job runs is not what it trains: the image and its labels do not change with it
    assert spec.fingerprint() == load_job_spec(make_job(tmp_path / "b")).fingerprint()
    assert "origins" not in spec.to_dict()


def test_job_keys_win_over_the_mappings(tmp_path):
    spec = load_job_spec(make_job(tmp_path, "namespace = ml-own\nqueue = own-queue"), MAPPINGS)
    assert (spec.namespace, spec.queue) == ("ml-own", "own-queue")
    assert spec.origin("namespace") == f"[ml-training] namespace of {spec.config_path}"
    assert spec.origin("queue") == f"[ml-training] queue of {spec.config_path}"


def test_a_team_without_an_entry_uses_the_cluster_wide_namespace_and_no_queue(tmp_path):
    spec = load_job_spec(make_job(tmp_path), {**MAPPINGS, "namespace": "ml-shared"}, team="robotics")
    assert (spec.team, spec.namespace, spec.queue) == ("robotics", "ml-shared", None)
    assert spec.origins == (
        ("team", "-t"),
        ("namespace", "ml_training_namespace of VDK configuration (VDK_ML_TRAINING_NAMESPACE)"),
    )


def test_the_team_is_the_option_else_owner_else_the_default_team(tmp_path):
    job = make_job(tmp_path)
    assert load_job_spec(job, MAPPINGS, team="nlp").namespace == "ml-nlp"  # -t's team's namespace
    assert load_job_spec(job, default_team="nlp").team == "vision"  # [owner] team before the default team
    no_owner = write_job(tmp_path, "no-owner", files={"train.py": TRAIN})
    spec = load_job_spec(no_owner, MAPPINGS, default_team="nlp")
    assert (spec.team, spec.namespace, spec.origin("team")) == ("nlp", "ml-nlp", "your default team, `vdk set-default`")
    assert load_job_spec(no_owner).team is None and load_job_spec(no_owner).origins == ()
    assert load_job_spec(job, team="").team is None  # -t '': no team


@pytest.mark.parametrize(
    "ml, settings, team",
    [
        ("", {**MAPPINGS, "namespace": "ml-shared"}, None),
        ("namespace = ml-own\nkube_context = lab", MAPPINGS, None),
        ("", {"namespace": "ml-shared", "kube_context": "prod"}, "robotics"),
        ("", {}, ""),
    ],
)
def test_the_identity_says_what_the_spec_says_of_name_team_context_and_namespace(tmp_path, ml, settings, team):
    job = make_job(tmp_path, ml)
    spec, identity = load_job_spec(job, settings, team=team), load_job_identity(job, settings, team=team)
    assert identity == spec.identity
    assert (identity.name, identity.team, identity.kube_context, identity.namespace) == (
        spec.name,
        spec.team,
        spec.kube_context,
        spec.namespace,
    )
    assert identity.kubernetes_name() == spec.kubernetes_name() and identity.kubernetes_name("x") == "x"


def test_the_identity_reads_only_its_keys(tmp_path):
    job = make_job(tmp_path, "namespace = ml-own\nnodez = 2\nmemory = lots", "\n[ml-training.sweep]\nlr = what(1)\n")
    with pytest.raises(JobConfigError, match="unknown key 'nodez'"):
        load_job_spec(job)
    config = read_job_config(job)
    identity = load_job_identity(config)
    assert (identity.team, identity.namespace) == ("vision", "ml-own")
    bad = make_job(tmp_path / "bad", "namespace = Not A Namespace\nnodez = 2")
    with pytest.raises(JobConfigError, match="namespace"):
        load_job_identity(bad)


def test_a_malformed_mapping_is_reported_before_anything_runs(tmp_path):
    with pytest.raises(SettingError) as info:
        load_job_spec(make_job(tmp_path), {"team_namespaces": "vision ml-vision"})
    assert "VDK_ML_TRAINING_TEAM_NAMESPACES" in str(info.value) and "vision:ml-vision" in str(info.value)


def test_bad_setting_names_the_environment_variable(tmp_path):
    err = error_of(make_job(tmp_path), {"registry": "http://bad registry"})
    assert "VDK_ML_TRAINING_REGISTRY" in str(err)


@pytest.mark.parametrize(
    "line, key, expected",
    [
        ("nodse = 2", "nodse", "did you mean `nodes`?"),
        ("gpus = 2", "gpus", "did you mean `gpus_per_node`?"),
        ("nodes = 0", "nodes", "a run needs at least 1 machine"),
        ("nodes = 8:2", "nodes", "'8:2' has MIN (8) above MAX (2)"),
        ("nodes = 8:2", "nodes", "write `nodes = 2:8`"),
        ("nodes = two", "nodes", "nodes = 2:8"),
        (
            "nodes = 2 ; two machines",
            "nodes",
            "config.ini has no inline comments: the value would be '2 ; two machines'",
        ),
        ("memory = 100m", "memory", "'100m' is less than a mebibyte (`m` means a thousandth: 100m is 0.1 bytes)"),
        ("memory = 100m", "memory", "`memory = 100Mi`"),
        ("memory = 512", "memory", "'512' is less than a mebibyte (512 bytes)"),
        ("shm_size = 1k", "shm_size", "less than a mebibyte"),
        ("memory = 1Mi", "memory", "1Mi is less than a training process takes"),  # not shm_size, never written
        ("memory = 128Mi", "memory", "at least 256Mi"),
        ("cpu = 0.0001", "cpu", "0.0001 is less than Kubernetes can ask for"),
        ("idle_timeout = 1s", "idle_timeout", "shorter than two GPU samples (gpu_sample_period = 1s)"),
        ("idle_timeout = 10s\ngpu_sample_period = 10s", "idle_timeout", "`idle_timeout = 30m` or more"),
        ("nodes =", "nodes", "the value is empty"),
        ("namespace =", "namespace", "remove the `namespace =` line to use the default (or the VDK setting)"),
        ("memory = 16GB", "memory", "16Gi"),
        ("memory = -1Gi", "memory", "Kubernetes quantity"),
        ("cpu = 1e999999999999", "cpu", "Kubernetes quantity"),  # an exponent too large for Decimal: no traceback
        ("cpu = four", "cpu", "cpu = 4"),
        ("shm_size = 32Gi", "shm_size", "lower shm_size"),
        ("gpus_per_node = many", "gpus_per_node", "MIG profile"),
        ("procs_per_node = 0", "procs_per_node", "whole number"),
        ("backend = pytorch-job", "backend", "did you mean `pytorchjob`"),
        ("max_runtime = soon", "max_runtime", "12h"),
        ("max_runtime = 0", "max_runtime", "12h"),
        ("entrypoint = missing.py", "entrypoint", "does not exist"),
        ("entrypoint = ../outside.py", "entrypoint", "outside the job directory"),
        ("entrypoint = -m nowhere.mod", "entrypoint", "not in the job directory"),
        ("args = --name 'unclosed", "args", "quote it"),
        ("queue = Team_A", "queue", "queue = "),
        ("base_image = Not An Image", "base_image", "base_image = "),
        ("base_python = bin/python3", "base_python", "base_python = python3"),
        ("smoke_steps = 0", "smoke_steps", "whole number"),
        ("smoke_device_tracking = sometimes", "smoke_device_tracking", "smoke_device_tracking = false"),
        ("smoke_args = --batch 'unclosed", "smoke_args", "quote it"),
        ("smoke_epoch_end = maybe", "smoke_epoch_end", "smoke_epoch_end = false"),
        ("import_check = never", "import_check", "import_check = false"),
    ],
)
def test_bad_values_name_file_key_and_fix(tmp_path, line, key, expected):
    err = error_of(make_job(tmp_path, line))
    message = str(err)
    assert err.key == key
    assert str(tmp_path / "my-job" / "config.ini") in message
    assert f"[ml-training] {key}" in message
    assert "Fix: " in message
    assert expected in message


def test_reserved_environment_names_are_refused(tmp_path):
    err = error_of(make_job(tmp_path, extra="[ml-training.env]\nWORLD_SIZE = 8\n"))
    assert err.section == "ml-training.env" and err.key == "WORLD_SIZE"
    assert "remove WORLD_SIZE" in str(err)


def test_misspelt_section_is_refused(tmp_path):
    job = make_job(tmp_path)
    (job / "config.ini").write_text("[job]\ntype = ml-training\n[ml_training]\nnodes = 2\n")
    err = error_of(job)
    assert "[ml-training]" in err.fix


def test_syntax_error_and_duplicates(tmp_path):
    job = make_job(tmp_path)
    (job / "config.ini").write_text("[job]\ntype = ml-training\n[ml-training]\nnodes = 1\nnodes = 2\n")
    assert "cannot be read" in str(error_of(job))
    (job / "config.ini").write_text("[job]\ntype = ml-training\n[ml-training]\nnodes = 1\nNodes = 2\n")
    assert "set twice" in str(error_of(job))


def test_missing_config(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "no config.ini" in str(error_of(tmp_path / "empty"))


def test_kubernetes_name_is_checked_only_on_demand(tmp_path):
    spec = load_job_spec(make_job(tmp_path, name="My_Job"))  # a local run never needs one
    with pytest.raises(JobConfigError) as info:
        spec.kubernetes_name()
    assert "(the job directory's name)" in str(info.value) and "deploy with `-n my-job`" in str(info.value)
    assert spec.kubernetes_name("my-job") == "my-job"
    with pytest.raises(MLTrainingError) as info:
        spec.kubernetes_name("Bad_Name")  # -n Bad_Name: the option is wrong, not the directory
    assert "-n Bad_Name: the job name 'Bad_Name' cannot be a Kubernetes name" in str(info.value)
    assert info.value.fix == "use `-n bad-name`"
    long = load_job_spec(make_job(tmp_path, name="a" * 41))
    with pytest.raises(JobConfigError):
        long.kubernetes_name()


def test_is_ml_job(tmp_path):
    assert is_ml_job(make_job(tmp_path))
    data = tmp_path / "data-job"
    data.mkdir()
    (data / "config.ini").write_text("[owner]\nteam = t\n")
    assert not is_ml_job(data)
    assert not is_ml_job(tmp_path / "nowhere")


def test_fingerprint_is_independent_of_location(tmp_path):
    a = load_job_spec(make_job(tmp_path / "a", "nodes = 2"))
    b = load_job_spec(make_job(tmp_path / "b", "nodes = 2"))
    c = load_job_spec(make_job(tmp_path / "c", "nodes = 3"))
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_fingerprint_ignores_where_and_how_a_job_is_checked_or_started(tmp_path):
    base = load_job_spec(make_job(tmp_path / "a", "nodes = 2"))
    elsewhere = load_job_spec(
        make_job(
            tmp_path / "b",
            "nodes = 2\nnamespace = other\nqueue = q\nbackend = job\nsmoke_steps = 3\nsmoke_timeout = 1m\n"
            "smoke_device_tracking = false\nsmoke_args = --batch-size 2\nsmoke_epoch_end = false\nimport_check = no",
        ),
        {"registry": "localhost:5000/x", "kube_context": "prod"},
    )
    assert base.fingerprint() == elsewhere.fingerprint()  # same training, same image label
    assert base.fingerprint() != load_job_spec(make_job(tmp_path / "c", "nodes = 2\nargs = --lr 1")).fingerprint()


def test_the_stall_watchdog_timeouts_are_durations_and_0_turns_them_off(tmp_path):
    spec = load_job_spec(make_job(tmp_path / "a", "stall_timeout = 2h\nstartup_timeout = 0"))
    assert (spec.stall_timeout_seconds, spec.startup_timeout_seconds) == (7200, 0)
    # VDK configuration sets them for every job; a job's keys win
    spec = load_job_spec(
        make_job(tmp_path / "b", "stall_timeout = 45m"), {"stall_timeout": "1h", "startup_timeout": "3h"}
    )
    assert (spec.stall_timeout_seconds, spec.startup_timeout_seconds) == (2700, 10800)
    err = error_of(make_job(tmp_path / "c", "stall_timeout = soon"))
    assert err.key == "stall_timeout" and err.problem.endswith("stall_timeout: 'soon' is not a duration")
    assert "`stall_timeout = 12h`" in err.fix
    err = error_of(make_job(tmp_path / "d"), {"startup_timeout": "-5m"})
    assert "VDK_ML_TRAINING_STARTUP_TIMEOUT" in err.problem
    # how a run is watched is not what it trains: the image stays the same
    assert spec.fingerprint() == load_job_spec(make_job(tmp_path / "e", "")).fingerprint()


def test_bad_registry_setting_says_how_to_set_the_variable(tmp_path):
    err = error_of(make_job(tmp_path), {"registry": "https://registry.example.com/ml"})
    assert "VDK_ML_TRAINING_REGISTRY=registry.example.com/ml" in err.fix
    assert "without a scheme" in err.fix


@pytest.mark.parametrize(
    "config, expected",
    [
        ("[job]\ntype = ml_training\n", "did you mean `type = ml-training`?"),
        ("[job]\ntype = ML-Trainig\n", "did you mean `type = ml-training`?"),
        ("[owner]\nteam = t\n[ml-training]\nnodes = 2\n", "add `type = ml-training` under [job]"),
        ("[job]\ntype = ml-training\n[ml-training]\nnodes = 1\nnodes = 2\n", "cannot be read"),
    ],
)
def test_jobs_meant_as_ml_training_that_are_not_say_why(tmp_path, config, expected):
    job = make_job(tmp_path)
    (job / "config.ini").write_text(config)
    problem = ml_config_problem(job)
    assert problem is not None and expected in str(problem)


@pytest.mark.parametrize(
    "config",
    [
        "[owner]\nteam = t\n",
        "[job]\ntype = ml-training\n",
        "[job]\ntype = batch\n",
        "[owner]\nteam = t\nx = 1\nx = 2\n",
    ],
)
def test_data_jobs_and_ml_jobs_have_no_ml_config_problem(tmp_path, config):
    job = make_job(tmp_path)
    (job / "config.ini").write_text(config)
    assert ml_config_problem(job) is None


def test_smoke_runs_take_their_own_arguments_when_given(tmp_path):
    spec = load_job_spec(make_job(tmp_path / "a", "args = --batch-size 256 --epochs 90"))
    assert spec.smoke_args is None
    assert spec.command_args() == spec.command_args(smoke=True) == ["train.py", "--batch-size", "256", "--epochs", "90"]
    assert spec.arguments_key(smoke=True) == "args"
    spec = load_job_spec(make_job(tmp_path / "b", "args = --batch-size 256\nsmoke_args = --batch-size 4 --name 'a b'"))
    assert spec.command_args() == ["train.py", "--batch-size", "256"]
    assert spec.command_args(smoke=True) == ["train.py", "--batch-size", "4", "--name", "a b"]
    assert spec.arguments_key(smoke=True) == "smoke_args" and spec.arguments_key() == "args"
    empty = load_job_spec(make_job(tmp_path / "c", "args = --big\nsmoke_args =")).command_args(smoke=True)
    assert empty == ["train.py"]  # set but empty: no arguments at all


def test_epoch_ends_and_import_checks_are_on_unless_turned_off(tmp_path):
    spec = load_job_spec(make_job(tmp_path / "a"))
    assert spec.smoke_epoch_end is True and spec.import_check is True
    spec = load_job_spec(make_job(tmp_path / "b", "smoke_epoch_end = false\nimport_check = off"))
    assert spec.smoke_epoch_end is False and spec.import_check is False


def test_a_run_resumes_and_its_smoke_run_checks_it_unless_turned_off_and_an_output_volume_gives_it_time(tmp_path):
    spec = load_job_spec(make_job(tmp_path / "a"))
    assert (spec.resume, spec.smoke_resume, spec.termination_grace_period_seconds) == ("auto", "check", None)
    # with an output volume to save a checkpoint in, two minutes to do it (Kubernetes' 30 s without one)
    assert load_job_spec(make_job(tmp_path / "b", "output_pvc = ml-outputs")).termination_grace_period_seconds == 120
    keys = "resume = off\nsmoke_resume = require\ntermination_grace_period = 5m"
    spec = load_job_spec(make_job(tmp_path / "c", keys))
    assert (spec.resume, spec.smoke_resume, spec.termination_grace_period_seconds) == ("off", "require", 300)
    error = error_of(make_job(tmp_path / "d", "smoke_resume = strict"))
    assert "smoke_resume" in str(error) and "check, require, off" in str(error)


def test_device_tracking_is_on_unless_turned_off(tmp_path):
    assert load_job_spec(make_job(tmp_path / "a")).smoke_device_tracking is True
    for value in ("false", "no", "off", "0", "False"):
        spec = load_job_spec(make_job(tmp_path / value, f"smoke_device_tracking = {value}"))
        assert spec.smoke_device_tracking is False


# A script in the style of PyTorch's DDP tutorial: it starts one worker per GPU itself.
SPAWNS = """
import torch
import torch.multiprocessing as mp


def main(rank, world_size):
    pass


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(main, args=(world_size,), nprocs=world_size)
"""


def test_a_script_that_spawns_its_workers_runs_one_launcher_process_per_node(tmp_path):
    spec = load_job_spec(make_job(tmp_path, "gpus_per_node = 8", files={"train.py": SPAWNS}))
    assert spec.spawns_workers is True
    assert spec.procs_per_node == 1  # what torchrun starts, and what the cluster manifests say
    assert spec.smoke_processes == 2  # two workers on two virtual GPUs
    one_gpu = load_job_spec(make_job(tmp_path, "gpus_per_node = 1", name="one", files={"train.py": SPAWNS}))
    assert (one_gpu.procs_per_node, one_gpu.smoke_processes) == (1, 1)
    explicit = load_job_spec(make_job(tmp_path, "procs_per_node = 1", name="explicit", files={"train.py": SPAWNS}))
    assert explicit.spawns_workers and explicit.procs_per_node == 1
    module = load_job_spec(
        make_job(
            tmp_path, "entrypoint = -m pkg.train", name="module", files={"pkg/__init__.py": "", "pkg/train.py": SPAWNS}
        )
    )
    assert module.spawns_workers
    plain = load_job_spec(make_job(tmp_path, "gpus_per_node = 8", name="plain"))
    assert (plain.spawns_workers, plain.procs_per_node) == (False, 8)


@pytest.mark.parametrize(
    "line, key, expected",
    [
        ("nodes = 2", "nodes", "every node would train alone"),
        ("procs_per_node = 8", "procs_per_node", "remove procs_per_node"),
        ("gpus_per_node = 0", "gpus_per_node", "gives it none"),
    ],
)
def test_layouts_a_spawning_script_cannot_have_are_refused(tmp_path, line, key, expected):
    err = error_of(make_job(tmp_path, line, files={"train.py": SPAWNS}))
    assert err.key == key
    assert "train.py:12 mp.spawn(nprocs=torch.cuda.device_count())" in str(err)
    assert expected in str(err)


def test_an_entrypoint_that_is_a_directory_says_so_and_what_to_write(tmp_path):
    package = {"train.py": TRAIN, "pkg/__init__.py": "", "pkg/__main__.py": TRAIN}
    err = error_of(make_job(tmp_path / "a", "entrypoint = pkg", files=package))
    assert "'pkg' is a directory, not a script" in err.problem and "does not exist" not in err.problem
    assert err.fix == "run the package as a module: `entrypoint = -m pkg` (it has a __main__.py)"
    scripts = {"train.py": TRAIN, "src/run.py": TRAIN}
    err = error_of(make_job(tmp_path / "b", "entrypoint = src/", files=scripts))
    assert "is a directory, not a script" in err.problem and "`entrypoint = src/run.py`" in err.fix


@pytest.mark.parametrize(
    "line, received, meant",
    [
        ("args = --epochs 1 ; one epoch for now", "['--epochs', '1', ';', 'one', 'epoch', 'for', 'now']", "--epochs 1"),
        ("args = --lr 3e-4   # tuned", "['--lr', '3e-4', '#', 'tuned']", "--lr 3e-4"),
        ("smoke_args = --batch 2 ;small", "['--batch', '2', ';small']", "--batch 2"),
    ],
)
def test_args_with_an_inline_comment_show_what_the_script_would_receive(tmp_path, line, received, meant):
    err = error_of(make_job(tmp_path, line))
    key = line.split(" =")[0]
    assert err.key == key
    assert "config.ini has no inline comments" in err.problem
    assert f"the script would receive the arguments {received}" in err.problem
    assert err.fix.startswith(f"write `{key} = {meant}` and put the comment on a line of its own")


def test_quoted_or_glued_comment_characters_are_arguments(tmp_path):
    spec = load_job_spec(make_job(tmp_path, "args = --tag '#1' --sep ';' --label a#b --x=;y"))
    assert spec.args == ("--tag", "#1", "--sep", ";", "--label", "a#b", "--x=;y")


def test_empty_args_mean_no_arguments(tmp_path):
    spec = load_job_spec(make_job(tmp_path, "args = --epochs 3\nsmoke_args =\n"))
    assert spec.args == ("--epochs", "3") and spec.arguments(smoke=True) == ()
    assert load_job_spec(make_job(tmp_path / "b", "args =\n")).args == ()


def test_a_binary_config_is_not_text_whatever_it_holds(tmp_path):
    job = make_job(tmp_path)
    (job / "config.ini").write_bytes(b"\x00\x01\xff\xfe[job]\x00")
    err = error_of(job)
    assert "is not a text file" in err.problem and "UTF-8 text" in err.fix
    assert ml_config_problem(job) is not None  # not a data job either: said, whatever the command
    (job / "config.ini").write_bytes("[job]\ntype = batch\nname = caf\xe9\n".encode("latin-1"))
    assert "save config.ini as UTF-8" in str(ml_config_problem(job))


@pytest.mark.parametrize(
    "line, key, expected",
    [
        ("nodes = 999999", "nodes", "asks for more than 4096 machines"),
        ("nodes = 2:999999", "nodes", "asks for more than 4096 machines"),
        ("gpus_per_node = 9999", "gpus_per_node", "more GPUs than a machine has"),
        ("gpus_per_node = 99g.999gb", "gpus_per_node", "not a MIG profile a GPU has"),
        ("gpus_per_node = 2c.1g.10gb", "gpus_per_node", "not a MIG profile a GPU has"),
        ("cpu = 1e100", "cpu", "more than 2048, more than any machine has"),
        ("memory = 1Ei", "memory", "more than 64Ti"),
        ("ttl_after_finished = 100000d", "ttl_after_finished", "longer than 365d, the most it may be"),
        ("max_runtime = 9999w", "max_runtime", "write it like `max_runtime = 365d` or less"),
        ("smoke_timeout = 30d", "smoke_timeout", "longer than 1d"),
    ],
)
def test_absurd_values_never_reach_a_manifest(tmp_path, line, key, expected):
    err = error_of(make_job(tmp_path, line))
    assert err.key == key and expected in str(err) and "Fix: " in str(err)


@pytest.mark.parametrize(
    "line",
    [
        "nodes = 4096",
        "gpus_per_node = 16",
        "gpus_per_node = 7g.80gb",
        "gpus_per_node = 1c.2g.20gb",
        "cpu = 2048",
        "memory = 64Ti",
        "ttl_after_finished = 365d",
        "smoke_timeout = 1d",
    ],
)
def test_the_largest_sensible_values_are_accepted(tmp_path, line):
    load_job_spec(make_job(tmp_path, line))


@pytest.mark.parametrize(
    "data, problem, fix",
    [
        (
            b"\xef\xbb\xbf[job]\ntype = ml-training\n",
            "starts with a byte-order mark (BOM)",
            "without a byte-order mark",
        ),
        (
            b"nodes = 2\n[job]\ntype = ml-training\n",
            "line 1: 'nodes = 2' comes before any [section] header",
            "start config.ini with a section header",
        ),
        (b"", "is empty, so VDK would run the directory as a data job", "write `[job]` and `type = ml-training`"),
        (
            b"[job]\ntyp = ml-training\n",
            "`typ = ml-training` does not make it an ml-training job",
            "write `type = ml-training` under [job]",
        ),
        (b"[ml-training]\nkind = ml_training\n", "`kind = ml_training` does not make it", "under [job]"),
    ],
)
def test_config_files_that_vdk_would_misread_or_run_as_nothing_say_so(tmp_path, data, problem, fix):
    job = make_job(tmp_path)
    (job / "config.ini").write_bytes(data)
    found = ml_config_problem(job)
    assert found is not None and problem in found.problem and fix in found.fix


def test_an_empty_config_of_a_data_job_with_steps_is_left_to_vdk(tmp_path):
    job = make_job(tmp_path, files={"10_step.py": "def run(job_input):\n    pass\n"})
    (job / "config.ini").write_bytes(b"")
    assert ml_config_problem(job) is None


def test_a_config_ini_that_is_a_directory_or_a_link_to_another_file_is_named(tmp_path):
    job = make_job(tmp_path)
    (job / "config.ini").unlink()
    (job / "config.ini").mkdir()
    assert "is a directory" in error_of(job).problem and ml_config_problem(job) is not None
    (job / "config.ini").rmdir()
    (job / "config.ini").symlink_to("train.py")
    err = error_of(job)
    assert "a symbolic link to train.py" in err.problem and "comes before any [section] header" in err.problem
    assert ml_config_problem(job) is not None
    (job / "config.ini").unlink()
    (job / "config.ini").symlink_to("nowhere.ini")
    assert "a symbolic link to nowhere.ini, which does not exist" in error_of(job).problem


def test_the_series_settings_are_checked_where_a_mistake_is_cheap(tmp_path):
    with pytest.raises(JobConfigError) as error:
        load_job_spec(write_job(tmp_path / "a", env={"VDK_ML_TRAINING_SERIES_SECONDS": "often"}))
    assert "VDK_ML_TRAINING_SERIES_SECONDS='often' is not a number of seconds" in error.value.problem
    assert "0 for no series" in error.value.fix
    with pytest.raises(JobConfigError) as switch:
        load_job_spec(write_job(tmp_path / "b", env={"VDK_ML_TRAINING_TENSORBOARD": "maybe"}))
    assert "neither on nor off" in switch.value.problem
    spec = load_job_spec(
        write_job(tmp_path / "c", env={"VDK_ML_TRAINING_SERIES_SECONDS": "0", "VDK_ML_TRAINING_TENSORBOARD": "off"})
    )
    assert dict(spec.env)["VDK_ML_TRAINING_SERIES_SECONDS"] == "0"
