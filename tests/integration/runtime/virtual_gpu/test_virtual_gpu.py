"""The smoke run's virtual GPUs: torch's device APIs answer as on a machine with GPUs, with real torch
in a fresh interpreter; the plugin still gets the real answers."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_cuda_and_accelerator_apis_see_the_node_s_gpus(run_python):
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        from vdk.plugin.ml_training.runtime.virtual_gpu import devices
        cpu_shims.install(gpus=2)
        answers = {
            "cuda": [torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.current_device()],
            "accelerator": [torch.accelerator.is_available(), str(torch.accelerator.current_accelerator()),
                            torch.accelerator.device_count(), torch.accelerator.current_device_index()],
            "real": [devices.real_cuda_available(), devices.real_device_count()],
        }
        torch.cuda.set_device(1)
        answers["after set_device"] = [torch.cuda.current_device(), torch.accelerator.current_device_index(),
                                       str(torch.ones(1, device="cuda").device)]
        torch.accelerator.set_device_index(0)
        with torch.cuda.device(1):
            answers["inside device(1)"] = torch.cuda.current_device()
        with torch.accelerator.device_index(1):
            answers["inside device_index(1)"] = torch.accelerator.current_device_index()
        answers["after blocks"] = torch.cuda.current_device()
        try:
            torch.cuda.set_device(2)
        except torch.AcceleratorError as e:
            answers["set_device(2)"] = str(e).splitlines()[0]
        properties = torch.cuda.get_device_properties(0)
        answers["device"] = [torch.cuda.get_device_name(), list(torch.cuda.get_device_capability()),
                             properties.total_memory > 0, torch.cuda.is_bf16_supported()]
        answers["memory"] = [torch.cuda.memory_allocated() > 0, torch.cuda.max_memory_allocated() > 0,
                             torch.cuda.memory_stats()["allocated_bytes.all.peak"] > 0,
                             torch.accelerator.memory_allocated() > 0, len(torch.cuda.mem_get_info())]
        torch.cuda.reset_peak_memory_stats(); torch.cuda.empty_cache(); torch.cuda.synchronize()
        torch.accelerator.synchronize(); torch.cuda.manual_seed_all(0); torch.cuda.nvtx.range_push("x")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stream = torch.cuda.Stream()
        start.record()
        with torch.cuda.stream(stream):
            torch.ones(3, device="cuda").sum()
        torch.cuda.current_stream().wait_stream(stream)
        end.record(); end.synchronize()
        answers["events"] = start.elapsed_time(end) >= 0
        print(json.dumps(answers))
        """
    )
    assert out["cuda"] == [True, 2, 0]
    assert out["accelerator"] == [True, "cuda", 2, 0]
    assert out["real"] == [False, 0]  # this machine has no GPU, and the plugin can still tell
    assert out["after set_device"] == [1, 1, "cuda:1"]  # "cuda" is the current device, as on CUDA
    assert out["inside device(1)"] == 1 and out["inside device_index(1)"] == 1 and out["after blocks"] == 0
    assert out["set_device(2)"] == "CUDA error: invalid device ordinal"
    assert out["device"][1:] == [[8, 0], True, True] and "virtual GPU" in out["device"][0]
    assert out["memory"] == [True, True, True, True, 2]
    assert out["events"] is True


def test_distributed_helpers_pick_gloo_and_a_cpu_mesh(run_python):
    out = run_python(
        """
        import json, torch, torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from vdk.plugin.ml_training.runtime import cpu_shims
        a = cpu_shims.install(gpus=1)
        backend = dist.get_default_backend_for_device(torch.device("cuda", 0))
        dist.init_process_group(backend=backend, device_id=torch.device("cuda", 0), store=dist.HashStore(),
                                rank=0, world_size=1)
        mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("dp",))
        t = torch.ones(2, device="cuda")
        dist.all_reduce(t)
        print(json.dumps({
            "default backend": [backend, dist.get_default_backend_for_device("cpu")],
            "group": dist.get_backend(),
            "mesh": [mesh.device_type, dist.get_backend(mesh.get_group("dp"))],
            "reduced": t.tolist(),
            "counts": dict(a.counts),
        }))
        dist.destroy_process_group()
        """
    )
    assert out["default backend"] == ["gloo", "gloo"]
    assert out["group"] == "gloo" and out["mesh"] == ["cpu", "gloo"]
    assert out["reduced"] == [1.0, 1.0]
    assert out["counts"]["device mesh cuda->cpu"] == 1 and "nccl->gloo" in out["counts"]


def test_torch_asking_itself_is_not_reported_as_the_code_s_use(run_python):
    # torch.optim checks torch.accelerator on every step: that is not the code needing a virtual GPU
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        a = cpu_shims.install(gpus=1)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        quiet = dict(a.counts)
        torch.accelerator.is_available()
        print(json.dumps({"quiet": quiet, "asked": dict(a.counts)}))
        """
    )
    assert not any("virtual" in name for name in out["quiet"]), out["quiet"]
    assert out["asked"]["torch.accelerator -> virtual cuda"] == 1


def test_data_parallel_runs_the_module_on_one_virtual_gpu(run_python):
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        a = cpu_shims.install(gpus=2)
        model = torch.nn.DataParallel(torch.nn.Linear(4, 2).cuda())
        out = model(torch.randn(8, 4))  # DataParallel scatters CPU inputs onto its GPUs
        out.sum().backward()
        print(json.dumps({"device": str(out.device), "shape": list(out.shape), "counts": dict(a.counts)}))
        """
    )
    assert out["device"] == "cuda:0" and out["shape"] == [8, 2]
    assert out["counts"]["DataParallel -> one virtual GPU"] == 1


def test_a_bare_index_names_a_virtual_gpu_and_a_job_without_gpus_has_none(run_python):
    out = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        cpu_shims.install(gpus=2)
        answers = {"device(1)": str(torch.device(1)), "module.to(1)": str(torch.nn.Linear(1, 1).to(1).weight.device)}
        print(json.dumps(answers))
        """
    )
    assert out == {"device(1)": "cuda:1", "module.to(1)": "cuda:1"}
    none = run_python(
        """
        import json, torch
        from vdk.plugin.ml_training.runtime import cpu_shims
        cpu_shims.install(gpus=0)  # gpus_per_node = 0: the job's nodes have no GPU
        answers = {
            "available": [torch.cuda.is_available(), torch.cuda.device_count(), torch.accelerator.is_available(),
                          str(torch.accelerator.current_accelerator()),
                          torch.accelerator.current_accelerator(check_available=True)],
        }
        try:
            torch.ones(1, device="cuda")
        except RuntimeError as e:
            answers["cuda tensor"] = str(e)
        print(json.dumps(answers))
        """
    )
    assert none == {"available": [False, 0, False, "cuda", None], "cuda tensor": "No CUDA GPUs are available"}
