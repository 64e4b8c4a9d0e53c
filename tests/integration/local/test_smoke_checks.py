"""What the smoke check catches before a GPU is asked for, through `vdk run` with real torch/transformers:
each bug class fails at the user's line with the error the cluster run would hit, its fixed job passes;
the end of the first epoch runs (evaluation, checkpoints), imports are checked, arguments and memory are
the smoke run's own, and nothing is ever written into the job directory."""

from __future__ import annotations

import hashlib
import re
import textwrap
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import vdk_run

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RANK = re.compile(r"rank (\d+): (\d+) steps?, (?:last loss (\S+), )?")


def job(root: Path, name: str, script: str, ml: str = "", files: dict[str, str] | None = None, env=None) -> Path:
    extra = {name: textwrap.dedent(text) for name, text in (files or {}).items()}
    return write_job(root, name, ml=textwrap.dedent(ml), env=env, files={"train.py": textwrap.dedent(script), **extra})


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory below root, with the content hash of files."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def line_of(path: Path, text: str) -> str:
    """The number of the first line of `path` that has `text`."""
    return str(next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line))


def traceback_files(output: str) -> list[str]:
    block = output.split("Traceback (most recent call last):", 1)[1]
    return re.findall(r'File "([^"]+)", line (\d+)', block)


# --- bugs at the end of an epoch ------------------------------------------------------------------

SINGLE_GPU = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    def main():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        train = DataLoader(TensorDataset(torch.randn(512, 8), torch.randn(512, 1)), batch_size=16, shuffle=True)
        for epoch in range(20):
            for x, y in train:
                loss = nn.functional.mse_loss(model(x.cuda()), y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            scheduler.step()
            torch.save(SAVED, f"checkpoint-{epoch}.pt")  # copied from a DDP script
            print(f"epoch {epoch} saved")

    if __name__ == "__main__":
        main()
"""


def test_a_save_that_unwraps_a_model_never_wrapped_fails_at_the_end_of_the_first_epoch(tmp_path):
    broken = job(tmp_path, "unwrap", SINGLE_GPU.replace("SAVED", "model.module.state_dict()"), "smoke_steps = 2")
    result = vdk_run(broken)
    assert result.exit_code != 0
    assert "rank 0 failed: AttributeError: 'Sequential' object has no attribute 'module'" in result.output
    first, *_ = traceback_files(result.output)
    assert first[0] == str(broken / "train.py")  # the user's file, not the run's copy or the plugin's
    save = line_of(broken / "train.py", "torch.save(")
    assert (str(broken / "train.py"), save) in traceback_files(result.output)
    assert "end of epoch: reached" in result.output

    fixed = job(tmp_path, "unwrap-fixed", SINGLE_GPU.replace("SAVED", "model.state_dict()"), "smoke_steps = 2")
    before = snapshot(fixed)
    result = vdk_run(fixed)
    assert result.exit_code == 0, result.output
    assert "epoch 0 saved" in result.output and "epoch 1 saved" not in result.output
    assert RANK.findall(result.output) == [("0", "2", RANK.findall(result.output)[0][2])]
    assert "end of epoch: reached, then 1 save" in result.output
    assert snapshot(fixed) == before  # the checkpoint went to the run's working directory

    # smoke_epoch_end = false: the run stops after smoke_steps steps, as a plain step limit would
    off = job(
        tmp_path,
        "unwrap-off",
        SINGLE_GPU.replace("SAVED", "model.module.state_dict()"),
        "smoke_steps = 2\nsmoke_epoch_end = false",
    )
    result = vdk_run(off)
    assert result.exit_code == 0, result.output
    assert "end of epoch: not reached (smoke_epoch_end = false in [ml-training]" in result.output


EVALUATION = """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    class Labelled(Dataset):
        def __init__(self, n):
            self.x, self.y = torch.randn(n, 8), torch.randint(0, 3, (n,))
        def __len__(self):
            return len(self.y)
        def __getitem__(self, i):
            return self.x[i], self.y[i], i  # the index, for error analysis

    def evaluate(model, loader):
        model.eval()
        correct = 0
        with torch.no_grad():
            for UNPACK in loader:
                correct += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()
        model.train()
        return correct / len(loader.dataset)

    model = nn.Linear(8, 3).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    train = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 3, (256,))), batch_size=8)
    val = DataLoader(Labelled(128), batch_size=32)
    for epoch in range(5):
        for x, y in train:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
            optimizer.step()
        print(f"epoch {epoch}: accuracy {evaluate(model, val):.2f}")
"""


def test_a_bug_in_the_evaluation_loop_fails_the_smoke_check(tmp_path):
    broken = job(tmp_path, "eval-bug", EVALUATION.replace("UNPACK", "x, y"), "smoke_steps = 3")
    result = vdk_run(broken)
    assert result.exit_code != 0
    assert "ValueError: too many values to unpack (expected 2)" in result.output
    assert traceback_files(result.output)[-1] == (
        str(broken / "train.py"),
        line_of(broken / "train.py", "for x, y in loader"),
    )

    fixed = job(tmp_path, "eval-fixed", EVALUATION.replace("UNPACK", "x, y, _"), "smoke_steps = 3")
    result = vdk_run(fixed)
    assert result.exit_code == 0, result.output
    assert "epoch 0: accuracy" in result.output and "epoch 1" not in result.output
    assert "end of epoch: reached, then evaluation (3 batches)" in result.output  # cut like the training loader


HF_TRAINER = """
    import torch
    from torch import nn
    from transformers import Trainer, TrainingArguments

    VOCAB = 50

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 16)
            self.head = nn.Linear(16, VOCAB, bias=False)
            TIE

        def forward(self, input_ids, labels=None):
            logits = self.head(self.embed(input_ids))
            return {"loss": nn.functional.cross_entropy(logits.view(-1, VOCAB), labels.view(-1)), "logits": logits}

    class Tokens(torch.utils.data.Dataset):
        def __init__(self, n):
            self.ids = torch.randint(0, VOCAB, (n, 8), generator=torch.Generator().manual_seed(n))
        def __len__(self):
            return len(self.ids)
        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": torch.roll(self.ids[i], 1)}

    class KeepLosses(torch.nn.Module):
        pass

    if __name__ == "__main__":
        import json, os
        from transformers import TrainerCallback

        class Logged(TrainerCallback):  # what the Trainer logs, kept where the test can read it
            def on_log(self, args, state, control, logs=None, **kwargs):
                if "loss" in (logs or {}):
                    with open(os.environ["LOGGED"], "a") as f:
                        f.write(json.dumps(logs["loss"]) + "\\n")

        args = TrainingArguments(output_dir="checkpoints", per_device_train_batch_size=4, num_train_epochs=3,
                                 logging_steps=500, eval_strategy="epoch", save_strategy="epoch", fp16=True)
        trainer = Trainer(model=TinyLM(), args=args, train_dataset=Tokens(256), eval_dataset=Tokens(64),
                          callbacks=[Logged()])
        trainer.train()
        trainer.save_model("final")
"""


def test_a_hugging_face_trainer_whose_save_fails_fails_the_smoke_check(tmp_path):
    config = "gpus_per_node = 2\nsmoke_steps = 2\n"
    files = {"requirements.txt": "transformers\naccelerate\n"}
    env = {"LOGGED": str(tmp_path / "logged.jsonl")}
    tied = "self.head.weight = self.embed.weight  # tied input and output embeddings"
    broken = job(tmp_path, "hf-tied", HF_TRAINER.replace("TIE", tied), config, files, env)
    result = vdk_run(broken)
    assert result.exit_code != 0
    assert "rank 0 failed: RuntimeError: Some tensors share memory" in result.output
    assert "_save_checkpoint" in result.output and str(broken / "train.py") in result.output

    env = {"LOGGED": str(tmp_path / "logged-untied.jsonl")}
    fixed = job(tmp_path, "hf-untied", HF_TRAINER.replace("TIE", "pass"), config, files, env)
    before = snapshot(fixed)
    result = vdk_run(fixed)
    assert result.exit_code == 0, result.output
    # stopped at its planned end as a preemption stops it (the Trainer saves its checkpoint), started again: the
    # second start resumes, trains smoke_steps more steps, then evaluates and saves its checkpoint; train() returns
    # and save_model("final") runs after training (the first start's checkpoint on the stop is the resume line's)
    assert "end of epoch: reached" in result.output
    assert "resume: checkpoint at step 2 written on stop (checkpoint-2)" in result.output
    assert "resume: the second start's epoch: reached its end, then evaluation (2 batches), 1 save" in result.output
    training = "the second start's end of training: the Hugging Face Trainer's train() returned after smoke_steps steps"
    assert f"{training}, then 1 save\n" in result.output
    # the last loss is the one the Trainer logs (the first start's last), not the value it passed to backward()
    logged = [float(x) for x in (tmp_path / "logged-untied.jsonl").read_text().split()]
    shown = {rank: float(loss) for rank, steps, loss in RANK.findall(result.output)}
    assert len(shown) == 2 and all(loss == pytest.approx(logged[0], rel=1e-3) for loss in shown.values())
    assert snapshot(fixed) == before  # checkpoints/ and final/ went to the run's working directory


# --- imports --------------------------------------------------------------------------------------

IMPORTS = """
    import torch
    import yaml

    try:
        import wandb  # optional: the script runs without it
    except ImportError:
        wandb = None

    print(yaml.safe_dump({"ok": True}).strip())
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2)).sum().backward()
    optimizer.step()
"""


def test_an_undeclared_import_fails_before_anything_runs_and_a_guarded_one_passes(tmp_path):
    config = "gpus_per_node = 0\nbase_image = python:3.11-slim\n"
    broken = job(tmp_path, "imports", IMPORTS, config, {"requirements.txt": "torch\n"})
    result = vdk_run(broken)
    assert result.exit_code != 0 and "smoke run of" not in result.output  # nothing started
    assert "imports 1 module its image would not have" in result.output
    assert "train.py:3: `import yaml` needs PyYAML" in result.output
    assert "add `PyYAML==" in result.output and f"to {broken / 'requirements.txt'}" in result.output
    assert "--skip-import-check" in result.output and "wandb" not in result.output

    skipped = vdk_run(broken, "--skip-import-check")  # a false alarm can be overridden
    assert skipped.exit_code == 0, skipped.output

    (broken / "requirements.txt").write_text("torch\nPyYAML>=6\n")
    result = vdk_run(broken)
    assert result.exit_code == 0, result.output
    assert "ok: true" in result.output
    # a loop without a DataLoader stops after smoke_steps steps, and the summary says why
    assert "end of epoch: not reached (the training loop takes no batches from a torch DataLoader" in result.output


def test_a_package_installed_nowhere_is_to_be_listed_and_installed_here_in_one_fix(tmp_path):
    """Not in requirements.txt, not installed where vdk runs: the fix says both at once, not one per round trip.
    With the dependency overlay (the default) listing it is the whole fix: the next run installs it into the
    overlay, never into vdk's environment; with requirements_overlay = false, the fix names the install here."""
    script = "import torch\nimport sentencepiece_not_here\n"
    broken = job(tmp_path, "nowhere", script, "gpus_per_node = 0\nbase_provides = torch", {})
    result = vdk_run(broken)
    assert result.exit_code != 0 and "smoke run of" not in result.output
    assert "`import sentencepiece_not_here` needs sentencepiece_not_here, not installed here" in result.output
    assert f"add `sentencepiece_not_here` to {broken / 'requirements.txt'} (a new file)" in result.output
    assert "`vdk run` installs it from there too, into the run's overlay" in result.output
    assert "pip install" not in result.output

    managed_config = "gpus_per_node = 0\nbase_provides = torch\nrequirements_overlay = false"
    managed = job(tmp_path, "managed", script, managed_config, {})
    result = vdk_run(managed)
    assert result.exit_code != 0 and "smoke run of" not in result.output
    assert f"add `sentencepiece_not_here` to {managed / 'requirements.txt'} (a new file)" in result.output
    assert "install sentencepiece_not_here where vdk runs too: " in result.output
    assert "-m pip install sentencepiece_not_here`" in result.output


REPORTS_TO_WANDB = """
    import torch
    from torch.utils.data import Dataset
    from transformers import Trainer, TrainingArguments


    class Data(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return {"x": torch.ones(4) * i, "labels": torch.tensor(float(i))}


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            out = self.lin(x).squeeze(-1)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


    if __name__ == "__main__":
        args = TrainingArguments("out", report_to="wandb", bf16=True, per_device_train_batch_size=4)
        Trainer(model=Model(), args=args, train_dataset=Data()).train()
"""


def test_what_the_smoke_run_turns_off_is_checked_as_the_cluster_meets_it(tmp_path):
    """`report_to="wandb"` is off in the smoke run and no import names wandb; on the cluster Trainer(...) imports
    it at once. Its package must be in the image; what no check here stands for (bf16) is named as not checked."""
    requirements = {"requirements.txt": "torch\ntransformers\n"}
    broken = job(tmp_path, "reports-to-wandb", REPORTS_TO_WANDB, "gpus_per_node = 0", requirements)
    result = vdk_run(broken)
    assert result.exit_code != 0, result.output
    assert "smoke run FAILED" in result.output
    assert "the job asks for report_to=wandb (for which the Trainer imports wandb), which the smoke run turns off" in (
        result.output
    )
    assert f"add `wandb` to {broken / 'requirements.txt'}" in result.output
    assert "not checked here, the cluster run does it: bf16 mixed precision (on GPUs)" in result.output

    (broken / "requirements.txt").write_text("torch\ntransformers\nwandb\n")  # in the image; not installed here
    result = vdk_run(broken)
    assert result.exit_code == 0, result.output
    assert "report_to=wandb: turned off here; wandb, which the cluster run imports, is in the image" in result.output


def test_the_jobs_own_module_left_out_of_the_image_is_missing_in_the_smoke_run_too(tmp_path):
    script = "import torch, helpers\nhelpers.train()\n"
    helpers = """
        import torch
        def train():
            m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
            m(torch.ones(2)).sum().backward(); o.step()
    """
    broken = job(
        tmp_path, "ignored-module", script, "gpus_per_node = 0", {"helpers.py": helpers, ".gitignore": "helpers.py\n"}
    )
    result = vdk_run(broken)
    assert result.exit_code != 0 and "No module named 'helpers'" in result.output
    assert "`helpers` is the job's own module (helpers.py), which its image leaves out (.gitignore: helpers.py)" in (
        result.output
    )


KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n-----END OPENSSH PRIVATE KEY-----\n"


def test_the_fix_for_the_jobs_own_module_left_out_for_the_key_it_holds_works_as_it_says(tmp_path):
    """A module that holds a key (a test key, a public example) is left out for its content; the fix names the
    line of .vdkignore that ships it, and with that line the same run passes."""
    script = "import torch, keys\nkeys.train()\n"
    module = f"""
        import torch
        TEST_KEY = {KEY!r}
        def train():
            m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
            m(torch.ones(2)).sum().backward(); o.step()
    """
    broken = job(tmp_path, "module-with-key", script, "gpus_per_node = 0", {"keys.py": module})
    result = vdk_run(broken)
    assert result.exit_code != 0 and "No module named 'keys'" in result.output
    assert "which its image leaves out (private key (PEM content))" in result.output
    line = re.search(r"add a line `(![^`]+)` to (\S+?/\.vdkignore)", result.output)
    assert line is not None, result.output
    Path(line.group(2)).write_text(line.group(1) + "\n")
    result = vdk_run(broken)
    assert result.exit_code == 0, result.output


def test_a_data_file_the_image_leaves_out_is_missing_in_the_smoke_run_too(tmp_path):
    script = "import torch\nrows = open('data/train.csv').read()\n"
    broken = job(
        tmp_path, "ignored-data", script, "gpus_per_node = 0", {"data/train.csv": "a,b\n", ".gitignore": "data/\n"}
    )
    result = vdk_run(broken)
    assert result.exit_code != 0 and "No such file or directory: 'data/train.csv'" in result.output
    assert "data/train.csv is in the job directory, but its image leaves it out (data/: .gitignore: data/)" in (
        result.output
    )
    assert "`!data/`" in result.output


def test_a_data_file_the_image_leaves_out_is_named_whichever_library_opened_it(tmp_path):
    """numpy says `data/train.txt not found.`, not open()'s errno text: the ignore rule is named all the same."""
    script = "import numpy, torch\nrows = numpy.loadtxt('data/train.txt')\n"
    broken = job(
        tmp_path, "numpy-data", script, "gpus_per_node = 0", {"data/train.txt": "1 2\n", ".gitignore": "data/\n"}
    )
    result = vdk_run(broken)
    assert result.exit_code != 0 and "data/train.txt not found." in result.output
    assert "data/train.txt is in the job directory, but its image leaves it out (data/: .gitignore: data/)" in (
        result.output
    )


# --- arguments and memory -------------------------------------------------------------------------

ARGUMENTS = """
    import argparse, torch
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--mode", choices=["cluster", "smoke"], required=True)
    args = parser.parse_args()
    assert args.mode == "smoke", "smoke runs use smoke_args"
    model = torch.nn.Linear(2, 1); optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(args.batch_size, 2)).sum().backward(); optimizer.step()
"""


def test_arguments_argparse_refuses_are_summarised_with_its_message_and_the_key_they_came_from(tmp_path):
    broken = job(tmp_path, "bad-args", ARGUMENTS, "gpus_per_node = 0\nargs = --mode cluster --epochs 3\n")
    result = vdk_run(broken)
    assert result.exit_code != 0
    assert "rank 0 failed: train.py: error: unrecognized arguments: --epochs 3" in result.output
    assert "usage: train.py [-h] [--batch-size BATCH_SIZE] --mode {cluster,smoke}" in result.output
    assert "Traceback" not in result.output and "argparse.py" not in result.output
    assert f"`args = --mode cluster --epochs 3` in [ml-training] of {broken / 'config.ini'}" in result.output

    smoke_only = job(
        tmp_path, "smoke-args", ARGUMENTS, "gpus_per_node = 0\nargs = --mode cluster\nsmoke_args = --mode smoke\n"
    )
    result = vdk_run(smoke_only)
    assert result.exit_code == 0, result.output  # the cluster's arguments stay; the smoke run uses its own


KILLED = """
    import os, signal, sys, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        ballast = torch.ones(80 * 1024 * 1024, dtype=torch.float32)  # 320 MB, resident
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer ends a process
    time.sleep(30)
"""


def test_a_rank_killed_by_sigkill_is_summarised_with_its_memory_and_what_to_change(tmp_path):
    killed = job(tmp_path, "oom", KILLED, "gpus_per_node = 0\nprocs_per_node = 2\nargs = --epochs 3 --batch-size 64\n")
    result = vdk_run(killed)
    assert result.exit_code != 0
    peak = re.search(r"rank 1: .*peak memory ([\d.]+) (MB|GB)", result.output)
    assert peak and float(peak.group(1)) * (1000 if peak.group(2) == "GB" else 1) > 320, result.output
    assert re.search(r"the ranks had up to [\d.]+ [MG]B each \([\d.]+ [MG]B together; this machine has", result.output)
    assert "`smoke_processes = 1` in [ml-training] (one rank instead of 2)" in result.output
    assert "`smoke_args = --epochs 3 --batch-size 16`" in result.output


# --- the job directory stays as it is -------------------------------------------------------------

WRITES = """
    import os, time, torch
    from torch.utils.data import DataLoader, TensorDataset

    if os.path.exists("snapshot.pt"):  # resumes from a snapshot, as torchrun's elastic examples do
        raise SystemExit("resumed from a snapshot a smoke run left behind")
    run = time.strftime("outputs/%Y-%m-%d/%H-%M-%S")  # hydra's layout
    os.makedirs(f"{run}/.hydra")
    open(f"{run}/.hydra/config.yaml", "w").write("lr: 0.1\\n")
    log = open(f"{run}/train.log", "a")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4):
            model(x).sub(y).pow(2).mean().backward()
            optimizer.step()
            log.write("step\\n")
        torch.save({"model": model.state_dict(), "epoch": epoch}, "snapshot.pt")
        os.makedirs("checkpoints", exist_ok=True)
        torch.save(model.state_dict(), f"checkpoints/epoch-{epoch}.pt")
        with open("notes.md", "a") as f:  # a file of the job, appended to
            f.write(f"epoch {epoch}\\n")
"""


def test_what_a_smoke_run_writes_never_reaches_the_job_directory(tmp_path):
    # each run in a new directory (the resume check's second start, in the same one, finds the snapshot: off here)
    writes = job(tmp_path, "writes", WRITES, "gpus_per_node = 0\nsmoke_resume = off", {"notes.md": "# notes\n"})
    before = snapshot(writes)
    for _ in range(2):  # the second run finds no snapshot of the first
        result = vdk_run(writes)
        assert result.exit_code == 0, result.output
        assert "end of epoch: reached, then 2 saves" in result.output
        assert snapshot(writes) == before


def test_a_full_run_works_in_a_run_directory_outside_the_job(tmp_path):
    writes = job(tmp_path, "writes", WRITES.replace("range(3)", "range(1)"), "gpus_per_node = 0", {"notes.md": "#\n"})
    before = snapshot(writes)
    result = vdk_run(writes, "--full")
    assert result.exit_code == 0, result.output
    work = Path(re.search(r"working directory: (\S+)", result.output).group(1))
    assert (work / "snapshot.pt").exists() and (work / "checkpoints" / "epoch-0.pt").exists()
    assert (work / "notes.md").read_text() == "#\nepoch 0\n"
    assert snapshot(writes) == before


# --- valid code passes ----------------------------------------------------------------------------

DDP_WITH_EVALUATION = """
    import os
    import torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("nccl")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = DDP(nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2)).cuda(), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    train_set = TensorDataset(torch.randn(1024, 10), torch.randint(0, 2, (1024,)))
    val_set = TensorDataset(torch.randn(256, 10), torch.randint(0, 2, (256,)))
    sampler = DistributedSampler(train_set)
    train = DataLoader(train_set, batch_size=32, sampler=sampler, num_workers=1, pin_memory=True)
    val = DataLoader(val_set, batch_size=64, sampler=DistributedSampler(val_set, shuffle=False))
    for epoch in range(10):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in train:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        scheduler.step()
        model.eval()
        correct = torch.zeros(1, device="cuda")
        with torch.no_grad():
            for x, y in val:
                correct += (model(x.cuda()).argmax(1) == y.cuda()).sum()
        dist.all_reduce(correct)
        if rank == 0:
            print(f"epoch {epoch}: accuracy {correct.item() / len(val_set):.2f} after {len(train)} batches")
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, f"epoch-{epoch}.pt")
        dist.barrier()
    dist.destroy_process_group()
"""


def test_a_ddp_loop_with_evaluation_and_checkpoints_every_epoch_passes(tmp_path):
    valid = job(tmp_path, "ddp-eval", DDP_WITH_EVALUATION, "nodes = 2\ngpus_per_node = 4\nsmoke_steps = 2\n")
    result = vdk_run(valid)
    assert result.exit_code == 0, result.output
    assert "epoch 0: accuracy" in result.output and "after 2 batches" in result.output
    assert dict((r, s) for r, s, _ in RANK.findall(result.output)) == {"0": "2", "1": "2"}
    assert "end of epoch: reached, then evaluation (2 batches), 1 save" in result.output


@pytest.mark.parametrize("example", ["ddp-nccl", "hf-trainer", "single-gpu-loop"])
def test_the_examples_leave_their_directory_as_it_was(example):
    before = snapshot(EXAMPLES / example)
    result = vdk_run(EXAMPLES / example)
    assert result.exit_code == 0, result.output
    assert "end of epoch: reached" in result.output
    assert snapshot(EXAMPLES / example) == before
