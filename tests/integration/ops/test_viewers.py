"""Runs and sweeps in the viewers ML engineers already open, with no change to the script: a local full run and a
local sweep of the lr-sweep example's own code (its device hard-coded to CUDA: adapted to the CPU) log to a real
`mlflow server` (SQLite backend, loopback), checked through MLflow's client; their TensorBoard event files are read
back with TensorBoard's own reader, series by series; `vdk show --board` and `--dashboard` serve them, and Debian's
headless Chromium loads each viewer's page from its loopback server and takes the screenshot the documentation
shows (docs/images/, when VDK_ML_TRAINING_TEST_SCREENSHOTS names that folder).

One module, one MLflow server and two runs, which every test reads: lean on the suite's time."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from tests.support.processes import MARK
from tests.support.processes import left_after
from tests.support.processes import new_mark
from tests.support.vdk_cli import vdk_process
from tests.support.viewers import Browser
from tests.support.viewers import MlflowServer
from tests.support.viewers import Served
from tests.support.viewers import clean_env
from tests.support.viewers import screenshot_dir
from vdk.plugin.ml_training.runtime.board_events import BOARD_DIR
from vdk.plugin.ml_training.runtime.progress_lines import loss_curve

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "lr-sweep" / "train.py"
# 4096 points, batches of 128: 32 steps an epoch
RUN_CONFIG = """[job]
type = ml-training

[ml-training]
entrypoint = train.py
args = --lr 0.01 --batch-size 128 --epochs 2
gpus_per_node = 0

[ml-training.env]
VDK_ML_TRAINING_ADAPT_TO_CPU = 1
VDK_ML_TRAINING_SERIES_SECONDS = 0.2
VDK_ML_TRAINING_PROGRESS_SECONDS = 0.5
"""
SWEEP_CONFIG = """[job]
type = ml-training

[ml-training]
entrypoint = train.py
args = --lr ${lr} --batch-size ${batch_size} --epochs 1
gpus_per_node = 0

[ml-training.sweep]
lr = 0.003, 0.03
batch_size = 256
algorithm = grid
trials = 2
metric = val_loss
prune = off

[ml-training.env]
VDK_ML_TRAINING_ADAPT_TO_CPU = 1
VDK_ML_TRAINING_SERIES_SECONDS = 0.2
"""


# When a page has drawn: TensorBoard's cards with their SVG curves (forceSVG: headless Chromium has no WebGL), the
# plotly charts of Optuna's dashboard and of MLflow.
TENSORBOARD_DRAWN = (
    "document.body.innerText.includes('vdk/') && "
    "[...document.querySelectorAll('svg path')].filter(p => (p.getAttribute('d') || '').length > 100).length > 1"
)
PLOTTED = "document.querySelectorAll('.js-plotly-plot .scatterlayer .trace').length > 0"
# TensorBoard's time series of the tags matching `tag_filter` (a query parameter: in the fragment it is ignored)
TENSORBOARD_PAGE = "?darkMode=false&forceSVG=true&tagFilter={tag_filter}#timeseries"
# Its settings pane, open by default on a wide window, closed for the screenshot (left open if TensorBoard renames it)
CLOSE_SETTINGS = "document.querySelector('button[aria-label=\\'Close side pane\\']')?.click()"
CLICK = (
    "(() => { const b = [...document.querySelectorAll('button, [role=radio], label, span')]"
    ".find(e => e.textContent.trim() === %r); if (b) { b.click(); return true; } return false; })()"
)


def _job(parent: Path, name: str, config: str) -> Path:
    job = parent / name
    job.mkdir(parents=True)
    shutil.copy(EXAMPLE, job / "train.py")
    (job / "config.ini").write_text(config)
    return job


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The MLflow server, a full run and a sweep logged to it; everything the tests read."""
    tmp = tmp_path_factory.mktemp("viewers")
    server = MlflowServer(tmp / "mlflow").wait()
    env = clean_env(tmp, MLFLOW_TRACKING_URI=server.url)
    run_job, sweep_job = _job(tmp, "spirals", RUN_CONFIG), _job(tmp, "spirals-sweep", SWEEP_CONFIG)
    try:
        ran = vdk_process("run", "--full", str(run_job), env=env, timeout=900)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        swept = vdk_process("run", "--full", str(sweep_job), env=env, timeout=1200)
        assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
        yield {"tmp": tmp, "env": env, "server": server, "run": (run_job, ran), "sweep": (sweep_job, swept)}
    finally:
        server.stop()


def _runs(world) -> Path:
    return Path(world["env"]["VDK_ML_TRAINING_RUNS_DIR"]) / "full"


def _full_run_dir(world) -> Path:
    (found,) = [p for p in _runs(world).iterdir() if re.fullmatch(r"spirals-\d{8}-\d{6}-\w{8}", p.name)]
    return found


def _scalars(directory: Path) -> EventAccumulator:
    events = EventAccumulator(str(directory))
    events.Reload()
    return events


def test_a_full_runs_event_files_hold_its_series(world):
    _, ran = world["run"]
    events = _scalars(_full_run_dir(world) / "work" / BOARD_DIR)
    tags = set(events.Tags()["scalars"])
    assert tags == {
        "vdk/loss",
        "vdk/learning_rate",
        "vdk/steps_per_second",
        "vdk/metrics/val_loss",
        "vdk/metrics/val_acc",
    }
    loss = {e.step: e.value for e in events.Scalars("vdk/loss")}
    # 2 epochs of 32 steps: a point once a period (0.2 s) at most, however fast the steps went, and the last step's
    assert max(loss) == 64 and 2 <= len(loss) <= 64
    printed = dict(loss_curve(ran.stdout.splitlines()))  # the progress lines' losses, at their steps
    shared = sorted(set(printed) & set(loss))
    assert shared, (printed, loss)
    for step in shared:  # the same step counter's loss, read by the series and by the progress lines
        assert loss[step] == pytest.approx(printed[step], rel=1e-4), step
    assert [e.value for e in events.Scalars("vdk/learning_rate")] == [pytest.approx(0.01)] * len(
        events.Scalars("vdk/learning_rate")
    )
    assert all(e.value > 0 for e in events.Scalars("vdk/steps_per_second"))
    shown = [float(v) for v in re.findall(r"val_loss=([0-9.]+)", ran.stdout)]
    assert [round(e.value, 4) for e in events.Scalars("vdk/metrics/val_loss")] == shown  # what the script printed
    walls = [e.wall_time for e in events.Scalars("vdk/loss")]
    assert walls == sorted(walls)


def test_the_board_serves_the_run_and_its_curve(world, tmp_path):
    run_job, _ = world["run"]
    name = _full_run_dir(world).name
    mark = new_mark()
    served = Served(
        ["show", "-p", str(run_job), "--board", "--to", str(tmp_path / "board")], {**world["env"], MARK: mark}
    )
    try:
        assert (tmp_path / "board" / name).is_dir() and list((tmp_path / "board" / name).glob("events.out.*"))
        url = served.url + TENSORBOARD_PAGE.format(tag_filter="vdk%2F(loss%7Cmetrics)")
        with Browser(tmp_path / "chromium") as browser:
            dom = browser.open(url, TENSORBOARD_DRAWN)
            browser.evaluate(CLOSE_SETTINGS)
            time.sleep(1)
            browser.screenshot(screenshot_dir(tmp_path) / "tensorboard.png")
        assert name in dom and "vdk/loss" in dom and "vdk/metrics/val_loss" in dom
        assert re.search(r'<path[^>]+d="M[^"]{200,}', dom)  # a curve of many points
    finally:
        code, out, err = served.stop()
    assert code == 0, err
    assert "TensorBoard stopped." in err
    assert not left_after(mark, 10), "TensorBoard outlived vdk show"


def test_a_sweeps_trials_are_sibling_runs_with_their_values_as_hparams(world, tmp_path):
    sweep_job, _ = world["sweep"]
    served = Served(["show", "-p", str(sweep_job), "--board", "--to", str(tmp_path / "board")], world["env"])
    try:
        (sweep,) = [p for p in (tmp_path / "board").iterdir() if p.is_dir()]
        assert sorted(p.name for p in sweep.iterdir()) == ["trial-0", "trial-1"]
        values = {}
        for trial in ("trial-0", "trial-1"):
            events = _scalars(sweep / trial)
            assert "vdk/metrics/val_loss" in events.Tags()["scalars"]
            content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
            start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
            values[trial] = {k: v.number_value for k, v in start.hparams.items()}
        assert sorted(v["lr"] for v in values.values()) == [pytest.approx(0.003), pytest.approx(0.03)]
        assert {v["batch_size"] for v in values.values()} == {256}
        url = served.url + TENSORBOARD_PAGE.format(tag_filter="vdk%2F(loss%7Cmetrics%2Fval_loss)")
        with Browser(tmp_path / "chromium") as browser:
            dom = browser.open(url, TENSORBOARD_DRAWN)
            browser.evaluate(CLOSE_SETTINGS)
            time.sleep(1)
            browser.screenshot(screenshot_dir(tmp_path) / "tensorboard-sweep.png")
        assert f"{sweep.name}/trial-0" in dom and f"{sweep.name}/trial-1" in dom
    finally:
        code, _, err = served.stop()
    assert code == 0, err


def test_the_dashboard_shows_the_sweeps_study_from_a_copy(world, tmp_path):
    sweep_job, _ = world["sweep"]
    (folder,) = [p for p in _runs(world).iterdir() if p.name.startswith("spirals-sweep-sweep-")]
    study = folder / "study.db"
    before = hashlib.sha256(study.read_bytes()).hexdigest()
    served = Served(["show", "-p", str(sweep_job), "--dashboard"], world["env"])
    try:
        assert "Optuna Dashboard of the study of " in served.stdout
        with Browser(tmp_path / "chromium") as browser:
            dom = browser.open(f"{served.url}dashboard/studies/1", PLOTTED)
            browser.screenshot(screenshot_dir(tmp_path) / "optuna-dashboard.png")
        assert "spirals-sweep" in dom and "History" in dom and "Hyperparameter Importance" in dom
    finally:
        code, _, err = served.stop()
    assert code == 0, err
    assert hashlib.sha256(study.read_bytes()).hexdigest() == before  # the dashboard read a copy


def test_mlflow_has_the_run_with_its_params_tags_and_series(world):
    server = world["server"]
    name = _full_run_dir(world).name
    found = server.query(
        "exp = client.get_experiment_by_name('spirals')\n"
        "runs = client.search_runs([exp.experiment_id])\n"
        "out = []\n"
        "for r in runs:\n"
        "    history = client.get_metric_history(r.info.run_id, 'loss')\n"
        "    out.append({'name': r.info.run_name, 'status': r.info.status, 'params': r.data.params,\n"
        "                'tags': r.data.tags, 'metrics': sorted(r.data.metrics),\n"
        "                'loss': [[m.step, m.value] for m in history]})\n"
        "print(json.dumps(out))\n"
    )
    assert len(found) == 1, found
    (run,) = found
    assert (run["name"], run["status"]) == (name, "FINISHED")
    assert (
        run["params"]["args"] == "--lr 0.01 --batch-size 128 --epochs 2" and run["params"]["entrypoint"] == "train.py"
    )
    assert run["tags"]["vdk.job"] == "spirals" and run["tags"]["vdk.run"] == name
    assert run["tags"]["mlflow.source.name"] == "vdk-ml-training"
    assert {"loss", "learning_rate", "steps_per_second", "metrics/val_loss", "metrics/val_acc"} <= set(run["metrics"])
    events = _scalars(_full_run_dir(world) / "work" / BOARD_DIR)
    board = sorted((e.step, e.value) for e in events.Scalars("vdk/loss"))
    assert sorted((s, v) for s, v in run["loss"]) == [(s, pytest.approx(v)) for s, v in board]  # the same series


def test_mlflow_has_the_sweep_as_a_parent_of_its_trials(world, tmp_path):
    server = world["server"]
    found = server.query(
        "exp = client.get_experiment_by_name('spirals-sweep')\n"
        "runs = client.search_runs([exp.experiment_id])\n"
        "print(json.dumps([{'id': r.info.run_id, 'name': r.info.run_name, 'status': r.info.status,\n"
        "  'params': r.data.params, 'parent': r.data.tags.get('mlflow.parentRunId'),\n"
        "  'metrics': r.data.metrics, 'experiment': exp.experiment_id} for r in runs]))\n"
    )
    parents = [r for r in found if r["parent"] is None]
    assert len(parents) == 1, found
    (parent,) = parents
    children = [r for r in found if r["parent"] == parent["id"]]
    assert len(children) == 2 and len(found) == 3
    assert sorted(float(c["params"]["lr"]) for c in children) == [0.003, 0.03]
    assert {c["params"]["batch_size"] for c in children} == {"256"}
    assert parent["params"]["sweep.metric"] == "val_loss" and parent["status"] == "FINISHED"
    best = min(c["metrics"]["metrics/val_loss"] for c in children)
    assert parent["metrics"]["best_val_loss"] == pytest.approx(best)
    experiment = f"{server.url}/#/experiments/{parent['experiment']}"
    child = min(children, key=lambda c: c["metrics"]["metrics/val_loss"])  # the best trial
    with Browser(tmp_path / "chromium", size=(1600, 1000)) as browser:
        browser.open(experiment, "document.body.innerText.includes('Model training')")
        assert browser.evaluate(CLICK % "Model training")  # MLflow 3 opens in its GenAI view
        # the run's page, not the experiment's charts still shown while the hash route changes
        shown = f"{PLOTTED} && document.body.innerText.includes({json.dumps(child['name'])})"
        dom = browser.open(f"{experiment}/runs/{child['id']}/model-metrics", shown)
        browser.evaluate("document.querySelector('[aria-label=Close]')?.click()")  # MLflow's assistant
        time.sleep(1)
        browser.screenshot(screenshot_dir(tmp_path) / "mlflow.png")
    # a trial shorter than one period of the series has its learning rate and steps' rate too (runtime/series.py)
    assert {"loss", "learning_rate", "steps_per_second"} <= set(child["metrics"]), child["metrics"]
    assert child["name"] in dom and "val_loss" in dom and "steps_per_second" in dom


SELF_LOGGING = """
import mlflow
import torch

mlflow.set_experiment("its-own-experiment")
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with mlflow.start_run(run_name="the-scripts-own-run"):
    for step in range(8):
        loss = model(torch.randn(16, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mlflow.log_metric("loss", loss.item(), step=step)
"""


def test_a_script_that_logs_to_mlflow_itself_is_not_doubled(world):
    """The script's own MLflow client (mlflow-skinny, installed for the run by its requirements.txt) makes its run;
    the plugin makes none of its own."""
    job = world["tmp"] / "self-logging"
    job.mkdir()
    (job / "train.py").write_text(SELF_LOGGING)
    (job / "requirements.txt").write_text("mlflow-skinny>=3,<4\n")
    (job / "config.ini").write_text(  # the import check cannot know that mlflow-skinny provides `mlflow`
        "[job]\ntype = ml-training\n\n[ml-training]\nentrypoint = train.py\ngpus_per_node = 0\nimport_check = false\n\n"
        "[ml-training.env]\nVDK_ML_TRAINING_SERIES_SECONDS = 0.2\n"
    )
    ran = vdk_process("run", "--full", str(job), env=world["env"], timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "the script logs to MLflow itself: vdk made no MLflow run of its own" in ran.stderr
    found = world["server"].query(
        "out = {}\n"
        "for name in ('its-own-experiment', 'self-logging'):\n"
        "    exp = client.get_experiment_by_name(name)\n"
        "    out[name] = [r.info.run_name for r in client.search_runs([exp.experiment_id])] if exp else None\n"
        "print(json.dumps(out))\n"
    )
    assert found == {"its-own-experiment": ["the-scripts-own-run"], "self-logging": None}
