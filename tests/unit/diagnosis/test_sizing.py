"""Sizing advice from recorded GPU figures: each rule names the change with the figures that show it, and a run
that used what it held gets none."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.diagnosis import sizing
from vdk.plugin.ml_training.diagnosis.finding import ADVICE
from vdk.plugin.ml_training.diagnosis.sizing import SizingEvidence
from vdk.plugin.ml_training.diagnosis.sizing import Startup
from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
A100 = "NVIDIA A100-SXM4-80GB"


def node(sm_mean=85.0, sm_p95=95.0, peak=60.0, total=79.6, model=H100, gpus=1, source="gpm", cpu=None, **more):
    cores, limit = cpu if cpu else (None, None)
    return GpuFigures(
        node="0", gpus=gpus, model=model, source=source, sm_mean=sm_mean, sm_p95=sm_p95, mem_peak=int(peak * GIB),
        mem_total=int(total * GIB), sampled_gpu_s=3600.0 * gpus, cpu_cores=cores, cpu_limit=limit, final=True,
        **more,
    )  # fmt: skip


def evidence(*nodes, gpus=1, profile=None, hours=10.0, seconds=36000.0, startup=None, rate=None):
    return SizingEvidence(tuple(nodes), gpus, profile, hours, seconds, startup, rate)


def test_a_well_sized_run_gets_no_advice():
    assert sizing.advise(evidence(node(), startup=Startup(120, waiting=10, pulling=30, loading=80))) == []
    assert sizing.advise(evidence(node(gpus=8), node(gpus=8), gpus=8, hours=160)) == []


def test_a_smaller_mig_profile_that_fits_with_the_gpu_hours_it_saves():
    (advice,) = sizing.advise(evidence(node(sm_mean=9, sm_p95=11, peak=8.1)))
    assert advice.kind == ADVICE
    assert advice.what == (
        f"a whole {H100} per node, of which SM activity used 9% on average (11% at the 95th percentile) and memory "
        "at most 8.1 GiB of 79.6 GiB: a 1g.10gb slice (1/7 of the GPU, 9.8 GiB) would have done"
    )
    assert advice.fix == (
        "set `gpus_per_node = 1g.10gb` in [ml-training]: it would have saved 8.6 of the run's 10.0 GPU-hours "
        "(profiles: the table of H100-80GB profiles)"
    )


def test_the_profiles_nvml_listed_win_over_the_table_and_other_models_have_theirs():
    listed = (("1g.18gb", 1, 18 << 30), ("2g.35gb", 2, 35 << 30), ("7g.141gb", 7, 141 << 30))
    (advice,) = sizing.advise(evidence(node(sm_mean=15, sm_p95=20, peak=20, total=140, model=H200, profiles=listed)))
    assert "`gpus_per_node = 2g.35gb`" in advice.fix and "(profiles: NVML)" in advice.fix
    (advice,) = sizing.advise(evidence(node(sm_mean=15, sm_p95=20, peak=20, total=140, model=H200)))
    assert "`gpus_per_node = 2g.35gb`" in advice.fix and "the table of H200-141GB profiles" in advice.fix
    (advice,) = sizing.advise(evidence(node(sm_mean=30, sm_p95=34, peak=30, model=A100)))
    assert "`gpus_per_node = 3g.40gb`" in advice.fix and "saved 5.7 of" in advice.fix


def test_a_mig_slice_that_a_smaller_one_would_do():
    (advice,) = sizing.advise(evidence(node(sm_mean=20, sm_p95=25, peak=7, total=39.2), profile="3g.40gb"))
    assert advice.what.startswith("a 3g.40gb slice per node") and "`gpus_per_node = 1g.10gb`" in advice.fix
    assert "saved 6.7 of the run's 10.0" in advice.fix  # 1/7 instead of 3/7
    assert sizing.advise(evidence(node(sm_mean=70, sm_p95=90, peak=30, total=39.2), profile="3g.40gb")) == []


def test_no_mig_advice_without_activity_or_for_a_model_without_mig():
    assert sizing.smaller_mig_profile(evidence(node(source="none", sm_mean=None, sm_p95=None, peak=5))) is None
    assert sizing.smaller_mig_profile(evidence(node(sm_mean=5, sm_p95=8, peak=2, model="NVIDIA L4", total=22))) is None


def test_data_loading_bound():
    (advice,) = sizing.advise(evidence(node(sm_mean=23, sm_p95=90, peak=60, cpu=(3.9, 4.0)), rate=2.5))
    assert advice.what == (
        "data loading bound: SM activity 23% on average while the container used 3.9 of its 4 CPU cores (98%), "
        "2.5 steps/s: the GPUs wait for batches"
    )
    assert advice.fix.startswith("raise the DataLoader's `num_workers` and `cpu` in [ml-training] (now 4)")
    assert sizing.data_loading_bound(evidence(node(sm_mean=23, sm_p95=90, peak=60, cpu=(1.0, 4.0)))) is None


def test_memory_far_below_capacity_on_whole_gpus():
    eight = [node(sm_mean=30, sm_p95=60, peak=9.8, gpus=8) for _ in range(2)]
    (advice,) = sizing.advise(evidence(*eight, gpus=8, hours=160))
    assert advice.what == (
        "memory far below capacity: at most 9.8 GiB of each GPU's 79.6 GiB (12%), SM activity 30% on average"
    )
    assert advice.fix == (
        "raise the batch size (about 6x fits; scale the learning rate with it), or `gpus_per_node = 4` in "
        "[ml-training] (each GPU would then do more of the work)"
    )
    assert sizing.memory_far_below_capacity(evidence(node(sm_mean=95, peak=9.8, gpus=8), gpus=8)) is None


def test_a_long_start_up_names_its_largest_part():
    pulled = Startup(1500, waiting=60, pulling=1200, pulled_nodes=4, loading=240, image_bytes=int(9.5 * GIB))
    (advice,) = sizing.advise(evidence(node(), seconds=5400, startup=pulled))
    assert advice.what == (
        "start-up took 25m of the run's 1h30m (28%) before the first optimizer step: waiting for nodes 1m, "
        "pulling the image 20m, loading before the first step 4m"
    )
    assert advice.fix.startswith("the image (9.5 GiB) was pulled on 4 nodes for this run")
    loading = Startup(2400, waiting=30, pulling=None, loading=2370)
    (advice,) = sizing.advise(evidence(node(), seconds=7200, startup=loading))
    assert "the code loaded its data and model before the first step" in advice.fix
    waiting = Startup(1800, waiting=1700, loading=100)
    (advice,) = sizing.advise(evidence(node(), seconds=3600, startup=waiting))
    assert advice.fix.startswith("the pods waited for nodes with free GPUs")
    assert sizing.long_startup(evidence(node(), seconds=36000, startup=loading)) is None  # 7% of the run


@pytest.mark.parametrize("rule", sizing.RULES)
def test_every_rule_is_quiet_without_figures(rule):
    assert rule(evidence()) is None
