"""The agreement table's cases: the examples, every planted-bug fixture of the tests (with its fixed twin where
the tests have one) and tutorial-style scripts, each a job directory written for the check.

The fixtures are read from the test modules that hold them (`fixture(path, NAME)`: the module's constant,
read from its source without importing it, so the check needs none of the tests' own dependencies and a
renamed fixture fails `tests/unit/gpu_check/test_cases.py`, not the GPU run). A case the GPU machine cannot run
as the cluster would (it needs two GPUs, it plants a SIGKILL) stays in the table with the reason, and is not run.

What the GPU run of a case does differently from the cluster, and why, is the case's `known_cause`: the
agreement table shows it beside any difference it explains (agreement.py).
"""

from __future__ import annotations

import ast
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CHECKS = "tests/integration/local/test_smoke_checks.py"
VIRTUAL_GPUS = "tests/integration/local/test_virtual_gpu_runs.py"
PATTERNS = "tests/integration/local/test_gpu_patterns.py"
GAPS = "tests/integration/local/test_emulation_gaps.py"

EXAMPLE, FIXTURE, TUTORIAL = "example", "planted bug", "tutorial"
LIMIT = "a construct the smoke check names as beyond its CPU emulation; on the GPU it runs"
# Scripts the tests write inside a test function (not as a constant): as they write them.
HELPERS = """
import torch
def train():
    m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.ones(2)).sum().backward(); o.step()
"""
PORTABLE = """
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
print(f"running on {device}", flush=True)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(2, 4, device=device)).sum().backward()
optimizer.step()
"""
ONE_GPU = "needs 2 GPUs (or 2 ranks): this machine has one, and NCCL refuses two ranks on one GPU"


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # EXAMPLE, FIXTURE or TUTORIAL
    source: str  # where it comes from: an example's directory, or `test_module.py::CONSTANT`
    script: str = ""  # train.py
    ml: str = ""  # the [ml-training] lines of config.ini
    env: tuple[tuple[str, str], ...] = ()  # [ml-training.env]
    files: tuple[tuple[str, str], ...] = ()  # the job's other files
    example: str = ""  # an example's directory under examples/, copied whole
    expect: str = ""  # what the tests assert of the smoke check: "pass" or "fail"
    hide: tuple[str, ...] = ()  # modules the job's image lacks but the GPU machine has: hidden from the GPU run
    known_cause: str = ""  # why the GPU run may differ from the smoke check
    skip: str = ""  # not run on the GPU machine: why

    def write(self, parent: Path, port: int | None = None) -> Path:
        """The job directory of this case under `parent`; `port`: the rendezvous port of a script that sets its
        own (`{port}` in it), a free one for each run of it."""
        job = parent / self.name
        if self.example:
            shutil.copytree(ROOT / "examples" / self.example, job)
            return job
        job.mkdir(parents=True)
        script = textwrap.dedent(self.script)
        (job / "train.py").write_text(script.replace("{port}", str(port)) if port is not None else script)
        for name, content in self.files:
            (job / name).parent.mkdir(parents=True, exist_ok=True)
            (job / name).write_text(textwrap.dedent(content))
        config = f"[job]\ntype = ml-training\n\n[ml-training]\n{textwrap.dedent(self.ml).strip()}\n"
        if self.env:
            config += "\n[ml-training.env]\n" + "".join(f"{k} = {v}\n" for k, v in self.env)
        (job / "config.ini").write_text(config)
        return job


def fixture(module: str, name: str) -> object:
    """The constant `name` of the test module `module` (a path from the repository's root), from its source."""
    return _Constants(ROOT / module).value(name)


class _Constants:
    """A module's top-level constants, evaluated from its syntax tree: strings, f-strings, `+`, tuples, lists,
    dicts, and names bound at the top level or imported from another module of the repository."""

    def __init__(self, path: Path):
        self.path = path
        self.tree = ast.parse(path.read_text(), str(path))
        self.bound: dict[str, ast.expr] = {}
        self.imported: dict[str, str] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.bound[node.targets[0].id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests."):
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = node.module

    def value(self, name: str) -> object:
        if name in self.bound:
            return self._eval(self.bound[name])
        if name in self.imported:
            module = self.imported[name].replace(".", "/") + ".py"
            return _Constants(ROOT / module).value(name)
        raise KeyError(f"{self.path.relative_to(ROOT)} has no constant {name}")

    def _eval(self, node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.value(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._eval(node.left) + self._eval(node.right)  # type: ignore[operator]
        if isinstance(node, ast.JoinedStr):
            return "".join(
                str(self._eval(v.value)) if isinstance(v, ast.FormattedValue) else str(self._eval(v))
                for v in node.values
            )
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self._eval(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return {self._eval(k): self._eval(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
        raise ValueError(f"{self.path.name}: cannot evaluate {ast.dump(node)[:80]}")


def _fixtures() -> list[Case]:
    single = fixture(SMOKE_CHECKS, "SINGLE_GPU")
    evaluation = fixture(SMOKE_CHECKS, "EVALUATION")
    hf = fixture(SMOKE_CHECKS, "HF_TRAINER")
    tied = "self.head.weight = self.embed.weight  # tied input and output embeddings"
    hf_files = (("requirements.txt", "transformers\naccelerate\n"),)
    imports = fixture(SMOKE_CHECKS, "IMPORTS")
    arguments = fixture(SMOKE_CHECKS, "ARGUMENTS")
    ignored = "the GPU run works in a copy of what the image holds, as the cluster's pod does"
    src = SMOKE_CHECKS.rsplit("/", 1)[1]
    cases = [
        Case(
            "save-unwraps-unwrapped-model",
            FIXTURE,
            f"{src}::SINGLE_GPU",
            single.replace("SAVED", "model.module.state_dict()"),
            "smoke_steps = 2",
            expect="fail",
        ),  # type: ignore[union-attr]
        Case(
            "save-fixed",
            FIXTURE,
            f"{src}::SINGLE_GPU",
            single.replace("SAVED", "model.state_dict()"),
            "smoke_steps = 2",
            expect="pass",
        ),  # type: ignore[union-attr]
        Case(
            "evaluation-unpack-bug",
            FIXTURE,
            f"{src}::EVALUATION",
            evaluation.replace("UNPACK", "x, y"),
            "smoke_steps = 3",
            expect="fail",
        ),  # type: ignore[union-attr]
        Case(
            "evaluation-fixed",
            FIXTURE,
            f"{src}::EVALUATION",
            evaluation.replace("UNPACK", "x, y, _"),
            "smoke_steps = 3",
            expect="pass",
        ),  # type: ignore[union-attr]
        Case(
            "hf-trainer-tied-save",
            FIXTURE,
            f"{src}::HF_TRAINER",
            hf.replace("TIE", tied),
            "gpus_per_node = 2\nsmoke_steps = 2",
            (("LOGGED", "logged.jsonl"),),
            hf_files,
            expect="fail",
        ),  # type: ignore[union-attr]
        Case(
            "hf-trainer-untied",
            FIXTURE,
            f"{src}::HF_TRAINER",
            hf.replace("TIE", "pass"),
            "gpus_per_node = 2\nsmoke_steps = 2",
            (("LOGGED", "logged.jsonl"),),
            hf_files,
            expect="pass",
        ),  # type: ignore[union-attr]
        Case(
            "undeclared-import",
            FIXTURE,
            f"{src}::IMPORTS",
            imports,
            "gpus_per_node = 0\nbase_image = python:3.11-slim",
            files=(("requirements.txt", "torch\n"),),
            expect="fail",
            hide=("yaml",),
            known_cause="the GPU machine has PyYAML, the image would not: the GPU run hides it",
        ),  # type: ignore[arg-type]
        Case(
            "declared-import",
            FIXTURE,
            f"{src}::IMPORTS",
            imports,
            "gpus_per_node = 0\nbase_image = python:3.11-slim",
            files=(("requirements.txt", "torch\nPyYAML>=6\n"),),
            expect="pass",
        ),  # type: ignore[arg-type]
        Case(
            "package-installed-nowhere",
            FIXTURE,
            f"{src}::test_a_package_installed_nowhere_is_to_be_listed_and_installed_here_in_one_fix",
            "import torch\nimport sentencepiece_not_here\n",
            "gpus_per_node = 0\nbase_provides = torch",
            expect="fail",
        ),
        Case(
            "report-to-wandb",
            FIXTURE,
            f"{src}::REPORTS_TO_WANDB",
            fixture(SMOKE_CHECKS, "REPORTS_TO_WANDB"),
            "gpus_per_node = 0",
            files=(("requirements.txt", "torch\ntransformers\n"),),
            expect="fail",
            known_cause="the smoke check turns reporting off and fails on the package the image lacks, before a line "
            "of the job fails; the GPU run fails in Trainer(...) for want of wandb",
        ),  # type: ignore[arg-type]
        Case(
            "module-left-out-of-image",
            FIXTURE,
            f"{src}::test_the_jobs_own_module_left_out_of_the_image_is_missing_in_the_smoke_run_too",
            "import torch, helpers\nhelpers.train()\n",
            "gpus_per_node = 0",
            files=(
                (
                    "helpers.py",
                    HELPERS,
                ),
                (".gitignore", "helpers.py\n"),
            ),
            expect="fail",
            known_cause=ignored,
        ),
        Case(
            "data-left-out-of-image",
            FIXTURE,
            f"{src}::test_a_data_file_the_image_leaves_out_is_missing_in_the_smoke_run_too",
            "import torch\nrows = open('data/train.csv').read()\n",
            "gpus_per_node = 0",
            files=(("data/train.csv", "a,b\n"), (".gitignore", "data/\n")),
            expect="fail",
            known_cause=ignored,
        ),
        Case(
            "numpy-data-left-out",
            FIXTURE,
            f"{src}::test_a_data_file_the_image_leaves_out_is_named_whichever_library_opened_it",
            "import numpy, torch\nrows = numpy.loadtxt('data/train.txt')\n",
            "gpus_per_node = 0",
            files=(("data/train.txt", "1 2\n"), (".gitignore", "data/\n")),
            expect="fail",
            known_cause=ignored,
        ),
        Case(
            "arguments-refused",
            FIXTURE,
            f"{src}::ARGUMENTS",
            arguments,
            "gpus_per_node = 0\nargs = --mode cluster --epochs 3",
            expect="fail",
            known_cause="argparse exits: the smoke check summarises its usage and message, not a traceback",
        ),  # type: ignore[arg-type]
        Case(
            "smoke-args",
            FIXTURE,
            f"{src}::ARGUMENTS",
            arguments,
            "gpus_per_node = 0\nargs = --mode cluster\nsmoke_args = --mode smoke",
            expect="pass",
            known_cause="the GPU run takes smoke_args, as the smoke check does",
        ),  # type: ignore[arg-type]
        Case(
            "ddp-evaluation-checkpoints",
            FIXTURE,
            f"{src}::DDP_WITH_EVALUATION",
            fixture(SMOKE_CHECKS, "DDP_WITH_EVALUATION"),
            "nodes = 2\ngpus_per_node = 4\nsmoke_steps = 2",
            expect="pass",
        ),  # type: ignore[arg-type]
        Case(
            "rank-killed-by-sigkill",
            FIXTURE,
            f"{src}::KILLED",
            skip="plants a SIGKILL of rank 1 in a gloo group: no GPU in it, and rank 1 needs a second process",
        ),
        Case(
            "writes-stay-out-of-the-job",
            FIXTURE,
            f"{src}::WRITES",
            skip="no GPU in it: it checks what a run writes, not a device",
        ),
    ]
    placement = fixture(VIRTUAL_GPUS, "PLACEMENT")
    bugs = fixture(VIRTUAL_GPUS, "BUGS")
    src = VIRTUAL_GPUS.rsplit("/", 1)[1]
    for bug, (line, _message) in bugs.items():  # type: ignore[union-attr]
        cause = "one GPU: CUDA says `invalid device ordinal` for cuda:1, at the same line" if "cuda:1" in line else ""
        cases.append(
            Case(
                f"placement-{bug}",
                FIXTURE,
                f"{src}::BUGS[{bug}]",
                placement.format(bug=line),
                "gpus_per_node = 2\nprocs_per_node = 1",
                expect="fail",
                known_cause=cause,
            )
        )  # type: ignore[union-attr]
    fixed = "loss = F.cross_entropy(model(x.to(device)), y.to(device))"
    cases.append(
        Case(
            "placement-fixed",
            FIXTURE,
            f"{src}::PLACEMENT",
            placement.format(bug=fixed),
            "gpus_per_node = 2\nprocs_per_node = 1",
            expect="pass",
        )
    )  # type: ignore[union-attr]
    cases.append(
        Case(
            "collective-gloo-lacks",
            FIXTURE,
            f"{src}::GLOO_LIMIT",
            fixture(VIRTUAL_GPUS, "GLOO_LIMIT"),
            "gpus_per_node = 2\nsmoke_steps = 2",
            expect="fail",
            known_cause=LIMIT,
        )
    )  # type: ignore[arg-type]
    portable = PORTABLE
    where = f"{src}::test_a_job_without_gpus_sees_none_and_cuda_code_fails_as_on_its_nodes"
    cases.append(Case("no-gpu-job-portable", FIXTURE, where, portable, "gpus_per_node = 0", expect="pass"))
    hard = portable.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cuda"')
    cases.append(Case("no-gpu-job-hard-codes-cuda", FIXTURE, where, hard, "gpus_per_node = 0", expect="fail"))
    setup, train = fixture(GAPS, "SETUP"), fixture(GAPS, "TRAIN")
    src = GAPS.rsplit("/", 1)[1]
    for gap, (code, *_rest) in fixture(GAPS, "GAPS").items():  # type: ignore[union-attr]
        script = setup + textwrap.dedent(code) + "\n" + train  # type: ignore[operator]
        skip = ONE_GPU if gap == "dtensor-operator" else ""
        cases.append(
            Case(
                f"gap-{gap}",
                FIXTURE,
                f"{src}::GAPS[{gap}]",
                script,
                "gpus_per_node = 2\nsmoke_steps = 2",
                expect="fail",
                known_cause=LIMIT,
                skip=skip,
            )
        )
    guarded = "if os.environ.get('VDK_ML_TRAINING_MODE') != 'smoke':\n    print(f'NCCL {torch.cuda.nccl.version()}')"
    cases.append(
        Case(
            "gap-switched-off-in-smoke-runs",
            FIXTURE,
            f"{src}::test_the_switch_keeps_the_construct_out_of_smoke_runs_only",
            setup + guarded + "\n" + train,
            "gpus_per_node = 2\nsmoke_steps = 2",
            expect="pass",
        )
    )  # type: ignore[operator]
    fsdp2 = fixture(PATTERNS, "FSDP2_DEFAULT_MESH")
    src = PATTERNS.rsplit("/", 1)[1]
    cases.append(
        Case(
            "fsdp2-batch-left-on-cpu",
            FIXTURE,
            f"{src}::FSDP2_DEFAULT_MESH",
            fsdp2.format(tokens_device=""),
            "gpus_per_node = 2\nsmoke_steps = 2",
            expect="fail",
        )
    )  # type: ignore[union-attr]
    return cases


def _tutorials() -> list[Case]:
    two = "gpus_per_node = 2\nsmoke_steps = 2"
    v, p = VIRTUAL_GPUS.rsplit("/", 1)[1], PATTERNS.rsplit("/", 1)[1]
    lightning = fixture(VIRTUAL_GPUS, "LIGHTNING").format(accelerator="gpu", devices=1)  # type: ignore[union-attr]
    cases = [
        Case("fsdp2-cuda-mesh", TUTORIAL, f"{v}::FSDP2", fixture(VIRTUAL_GPUS, "FSDP2"), two, expect="pass"),  # type: ignore[arg-type]
        Case("cuda-branch", TUTORIAL, f"{v}::CUDA_BRANCH", fixture(VIRTUAL_GPUS, "CUDA_BRANCH"), two, expect="pass"),  # type: ignore[arg-type]
        Case(
            "mp-spawn",
            TUTORIAL,
            f"{v}::MP_SPAWN",
            fixture(VIRTUAL_GPUS, "MP_SPAWN").format(port="{port}"),
            "gpus_per_node = 4\nsmoke_steps = 2",
            expect="pass",
            known_cause="its workers are spawned by the script: the GPU run does not cut them, they train their one "
            "epoch",
        ),  # type: ignore[union-attr]
        Case(
            "lightning-one-device",
            TUTORIAL,
            f"{v}::LIGHTNING (devices=1)",
            lightning,
            "gpus_per_node = 1\nsmoke_steps = 2",
            files=(("requirements.txt", "lightning\n"),),
            expect="pass",
        ),
        Case(
            "tensor-parallel",
            TUTORIAL,
            f"{v}::TENSOR_PARALLEL",
            fixture(VIRTUAL_GPUS, "TENSOR_PARALLEL"),
            two,
            expect="pass",
        ),  # type: ignore[arg-type]
        Case(
            "accelerate-fp16",
            TUTORIAL,
            f"{v}::ACCELERATE",
            fixture(VIRTUAL_GPUS, "ACCELERATE"),
            two,
            files=(("requirements.txt", "accelerate\n"),),
            expect="pass",
        ),  # type: ignore[arg-type]
        Case("accelerator-ddp", TUTORIAL, f"{v}::ACCELERATOR_DDP", skip=ONE_GPU + " (the script exits without 2)"),
        Case(
            "fsdp2-default-mesh",
            TUTORIAL,
            f"{p}::FSDP2_DEFAULT_MESH",
            fixture(PATTERNS, "FSDP2_DEFAULT_MESH").format(tokens_device=', device="cuda"'),
            two,
            expect="pass",
        ),  # type: ignore[union-attr]
        Case(
            "accelerate-gather-for-metrics",
            TUTORIAL,
            f"{p}::GATHER_FOR_METRICS",
            fixture(PATTERNS, "GATHER_FOR_METRICS"),
            two,
            files=(("requirements.txt", "accelerate\n"),),
            expect="pass",
        ),  # type: ignore[arg-type]
        Case("uneven-steps", TUTORIAL, f"{p}::UNEVEN_STEPS", fixture(PATTERNS, "UNEVEN_STEPS"), two, expect="pass"),  # type: ignore[arg-type]
        Case("threads-and-rpc", TUTORIAL, f"{p}::THREADS_AND_RPC", skip=ONE_GPU + " (it selects cuda:1)"),
        Case(
            "dtensor-flash-attention",
            TUTORIAL,
            f"{p}::DTENSOR_ATTENTION",
            fixture(PATTERNS, "DTENSOR_ATTENTION"),
            two,
            expect="pass",
        ),  # type: ignore[arg-type]
        Case("ddp-bf16-hooks", TUTORIAL, f"{p}::BF16_HOOK", skip=ONE_GPU + " (it gathers from 2 ranks)"),
        Case(
            "manual-sgd",
            TUTORIAL,
            f"{p}::MANUAL_SGD",
            fixture(PATTERNS, "MANUAL_SGD"),
            "gpus_per_node = 1\nsmoke_steps = 3",
            expect="pass",
        ),  # type: ignore[arg-type]
    ]
    return cases


def _examples() -> list[Case]:
    return [
        Case("example-ddp-nccl", EXAMPLE, "examples/ddp-nccl", example="ddp-nccl", expect="pass"),
        Case("example-hf-trainer", EXAMPLE, "examples/hf-trainer", example="hf-trainer", expect="pass"),
        Case("example-single-gpu-loop", EXAMPLE, "examples/single-gpu-loop", example="single-gpu-loop", expect="pass"),
        Case(
            "example-lr-sweep",
            EXAMPLE,
            "examples/lr-sweep",
            skip="a sweep: its smoke check runs its trials' argument check and extreme trials; `vdk run --full` of "
            "it is in the full runs",
        ),
    ]


def all_cases() -> list[Case]:
    """Every case of the table, in its order: the examples, the planted bugs, the tutorials."""
    return [*_examples(), *_fixtures(), *_tutorials()]
