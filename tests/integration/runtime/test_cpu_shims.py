"""The smoke run's CPU stand-ins (gloo for NCCL, full precision, no compile, Hugging Face, the step limit),
each checked with real torch/transformers in a fresh interpreter (they patch torch globally, which must
not leak into other tests). The virtual GPUs and device tracking: tests/integration/runtime/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow


def run_python(code: str, timeout: int = 180) -> dict:
    """Run `code` in a new interpreter without GPUs; it prints one JSON object, returned here."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_nccl_becomes_gloo_and_gpu_arguments_are_dropped():
    out = run_python(
        """
        import json, torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from vdk.plugin.ml_training.runtime import cpu_shims
        a = cpu_shims.install()
        backends = {}
        for backend in ("nccl", "cuda:nccl,cpu:gloo", dist.Backend.NCCL):
            dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1,
                                    device_id=torch.device("cuda", 0))
            backends[str(backend)] = dist.get_backend()
            dist.destroy_process_group()
        dist.init_process_group("nccl", None, store=dist.HashStore(), rank=0, world_size=1)
        group = dist.new_group([0], backend="nccl")
        dist.barrier(device_ids=[0])
        model = DDP(torch.nn.Linear(2, 1).to(0), device_ids=[0], output_device=0)
        model(torch.ones(3, 2, device="cuda")).sum().backward()
        moved = model(torch.ones(3, 2))  # DDP with device_ids moves CPU inputs to its GPU
        positional = DDP(torch.nn.Linear(2, 1), [0])
        print(json.dumps({
            "backends": backends,
            "group": dist.get_backend(group),
            "ddp": [model.device_ids, model.output_device, positional.device_ids, str(moved.device)],
            "counts": dict(a.counts),
        }))
        dist.destroy_process_group()
        """
    )
    assert set(out["backends"].values()) == {"gloo"} and len(out["backends"]) == 2  # Backend.NCCL == "nccl"
    assert out["group"] == "gloo"
    assert out["ddp"] == [None, None, None, "cuda:0"]
    assert out["counts"]["nccl->gloo"] == 5
    assert out["counts"]["DDP device_ids dropped"] == 2


def test_mixed_precision_and_compile_are_off():
    out = run_python(
        """
        import json, warnings, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        a = cpu_shims.install()
        warnings.simplefilter("ignore", FutureWarning)
        layer = torch.nn.Linear(4, 4)
        dtypes = []
        for context in (torch.autocast("cuda", dtype=torch.float16), torch.autocast("cpu", dtype=torch.bfloat16),
                        torch.amp.autocast(device_type="cuda"), torch.cuda.amp.autocast()):
            with context:
                dtypes.append(str(layer(torch.ones(1, 4)).dtype))
        scalers = [torch.amp.GradScaler("cuda"), torch.amp.GradScaler("cuda", 2.0**16, 2.0, 0.5, 2000, True),
                   torch.cuda.amp.GradScaler(enabled=True)]
        loss = layer(torch.ones(1, 4)).sum()
        scaled = scalers[0].scale(loss)
        compiled = torch.compile(layer, mode="max-autotune")
        decorated = torch.compile(fullgraph=True)(len)
        print(json.dumps({
            "dtypes": dtypes,
            "scalers": [s.is_enabled() for s in scalers],
            "scaled_is_loss": scaled is loss,
            "compiled": compiled is layer,
            "decorated": decorated is len,
            "counts": dict(a.counts),
        }))
        """
    )
    assert out["dtypes"] == ["torch.float32"] * 4
    assert out["scalers"] == [False, False, False]
    assert out["scaled_is_loss"] and out["compiled"] and out["decorated"]
    assert out["counts"]["autocast off"] == 4 and out["counts"]["GradScaler off"] == 3


def test_hugging_face_is_adapted_when_imported_and_never_imported_otherwise(tmp_path):
    out = run_python(
        f"""
        import json, sys
        from vdk.plugin.ml_training.runtime import cpu_shims, hf_shims
        a = cpu_shims.install()
        hf_shims.install(a, smoke_steps=3, output_dir={str(tmp_path / "hf")!r})
        imported_early = [m for m in ("transformers", "accelerate") if m in sys.modules]
        from transformers import TrainingArguments, Seq2SeqTrainingArguments
        args = TrainingArguments("user-out", fp16=True, report_to="wandb", max_steps=1000, save_strategy="steps",
                                 eval_strategy="steps", load_best_model_at_end=True, torch_compile=True)
        hf_shims.adapt_training_arguments(no_saves := TrainingArguments("y", save_strategy="steps",
            eval_strategy="steps", load_best_model_at_end=True), 3, None, saves=False)
        seq = Seq2SeqTrainingArguments(output_dir="x", bf16=True)
        from accelerate import Accelerator
        accelerator = Accelerator(mixed_precision="fp16")
        print(json.dumps({{
            "imported_early": imported_early,
            "args": [args.use_cpu, args.fp16, args.report_to, args.max_steps, args.save_strategy.value,
                     args.load_best_model_at_end, args.torch_compile, args.output_dir],
            "seq": [seq.use_cpu, seq.bf16, seq.max_steps],
            "no_saves": [no_saves.save_strategy, no_saves.load_best_model_at_end],
            "accelerator": [accelerator.mixed_precision, str(accelerator.device)],
            "counts": dict(a.counts),
            "turned_off": a.turned_off,
        }}))
        """
    )
    assert out["imported_early"] == []
    # what the cluster run will do, for the smoke run's summary and the check of its integrations' packages
    assert out["turned_off"] == {
        "fp16": None, "torch_compile": None, "report_to=wandb": "wandb", "bf16": None,
    }  # fmt: skip
    # on the virtual GPU, in full precision, for smoke_steps steps, saving as configured but not where the user looks
    assert out["args"] == [False, False, [], 3, "steps", True, False, str(tmp_path / "hf")]
    assert out["no_saves"] == ["no", False]  # smoke_epoch_end = false: the run ends after the steps, nothing saved
    assert out["seq"] == [False, False, 3]
    assert out["accelerator"] == ["no", "cuda"]  # what Accelerate says on a machine with one GPU
    assert out["counts"]["Accelerate mixed precision off"] == 1


def test_step_limit_stops_after_every_optimizer_stepped_and_records_the_loss():
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime.steps import SmokeStepsReached, StepCounter, StepLimit
        counter = StepCounter().install()
        StepLimit(3).attach(counter)
        gen, disc = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        opt_g = torch.optim.Adam(gen.parameters())
        opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
        order = []
        try:
            for i in range(10):
                d_loss = disc(gen(torch.ones(4, 2))).mean()
                d_loss.backward()
                opt_d.step(); order.append("d")
                g_loss = (disc(gen(torch.ones(4, 2))) - 1).pow(2).mean()
                g_loss.backward()
                opt_g.step(); order.append("g")
            stopped = None
        except SmokeStepsReached as e:
            stopped = e.steps
        print(json.dumps({"stopped": stopped, "order": order, "steps": counter.steps,
                          "loss": counter.loss(), "expected": float(g_loss), "is_system_exit": isinstance(
                              SmokeStepsReached(1), SystemExit)}))
        """
    )
    # optimizers trained in turn, each on its own loss: their steps add up
    assert out["stopped"] == 6 and out["steps"] == 6
    assert out["order"] == ["d", "g"] * 2 + ["d"]  # the exception left opt_g.step() of iteration 3 unrecorded
    assert out["loss"] == pytest.approx(out["expected"])
    assert out["is_system_exit"] is True


def test_steps_reach_the_result_file_while_the_rank_trains(tmp_path):
    # a rank stopped by a timeout or a crash never writes its final word: its steps must be there already
    (tmp_path / "every").mkdir()
    (tmp_path / "throttled").mkdir()
    out = run_python(
        f"""
        import json, torch
        from vdk.plugin.ml_training.runtime import protocol
        from vdk.plugin.ml_training.runtime.report import RankReport, StepRecorder
        from vdk.plugin.ml_training.runtime.steps import StepCounter
        counter = StepCounter().install()
        every = RankReport({str(tmp_path / "every")!r}, 0, 0, steps=0)
        throttled = RankReport({str(tmp_path / "throttled")!r}, 1, 0)
        counter.listeners += [StepRecorder(every), StepRecorder(throttled, period=3600)]
        model = torch.nn.Linear(2, 1)
        opt_a = torch.optim.SGD(model.parameters(), lr=0.1)
        opt_b = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = []
        for step in range(3):
            loss = model(torch.ones(1, 2)).sum()
            loss.backward()
            opt_a.step(); opt_b.step()
            seen.append(json.loads(protocol.result_path({str(tmp_path / "every")!r}, 0).read_text()))
        print(json.dumps({{"seen": seen, "loss": float(loss),
                          "throttled": protocol.read_results({str(tmp_path / "throttled")!r})[1]}}))
        """
    )
    assert [(r["steps"], r["status"]) for r in out["seen"]] == [(1, "running"), (2, "running"), (3, "running")]
    assert out["seen"][-1]["last_loss"] == pytest.approx(out["loss"])
    assert out["throttled"]["steps"] == 1  # full runs: the first step, then at most one write a period


def test_mp_spawn_starting_no_process_is_noticed():
    # the virtual GPUs make device_count() > 0; a count computed otherwise may still be 0
    out = run_python(
        """
        import json, torch, torch.multiprocessing as mp
        from vdk.plugin.ml_training.runtime import cpu_shims

        def train(rank):
            raise AssertionError("never runs")

        a = cpu_shims.install()
        mp.spawn(train, nprocs=torch.cuda.device_count() - 1)
        print(json.dumps({"observed": sorted(a.observed), "count": torch.cuda.device_count()}))
        """
    )
    assert out == {"observed": ["torch.multiprocessing.spawn(nprocs=0)"], "count": 1}
