"""One trial of a sweep, in its pod: `python -m vdk.plugin.ml_training.runtime.sweep_trial -- COMMAND...`.

Each pod of the sweep's Indexed Job is one slot (its completion index): it asks the study (Optuna, through the
study pod's storage proxy) for its trial, runs the training COMMAND with the trial's values in place of their
`${name}` (in the arguments and in the environment), reports the metric lines of rank 0 as they come
(runtime/metrics.py) and stops the training when the pruner says so. It tells the study how the trial ended —
complete with its metric, pruned, or failed — and ends well either way: a failed trial is one result of the
sweep, not a failure of it. A pod that restarts (its node lost, the container killed) finds its slot's trial
still running and runs it again. When the first trials of the sweep all failed, the slot says why and exits
with sweep_protocol.STOP_EXIT_CODE, which fails the Job at once (its podFailurePolicy).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vdk.plugin.ml_training.runtime import mlflow_runs
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime import series
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.runtime import sweep_study
from vdk.plugin.ml_training.runtime import termination
from vdk.plugin.ml_training.vocabulary import wire as words

STUDY_TIMEOUT_SECONDS = 1800.0  # the study's pod may be pulled, scheduled or restarted meanwhile
POLL_SECONDS = 1.0
STOP_GRACE_SECONDS = 30.0


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def connect(env: dict[str, str]):
    """The study's storage: the proxy at STUDY_ADDRESS (host:port), or a storage URL."""
    engine = sweep_study.optuna()
    url = env.get(wire.STUDY_STORAGE)
    if url:
        return url
    host, _, port = env[wire.STUDY_ADDRESS].rpartition(":")
    proxy = engine.storages.GrpcStorageProxy(host=host, port=int(port))
    sweep_study.wait_for(lambda: proxy.wait_server_ready(timeout=10), "connecting", STUDY_TIMEOUT_SECONDS, say)
    return proxy


def trial_environment(
    env: dict[str, str], params: dict, metric_file: str, sweep: wire.Sweep, number: int, parent: str | None = None
):
    """The training processes' environment: the trial's values in place of `${name}`, its metric variables, its
    own directory of the run's outputs, and the sweep's MLflow run (`parent`, when it has one)."""
    out = {name: wire.substitute(value, params) for name, value in env.items()}
    out.update(wire.metric_environment(out, sweep.metric, metric_file, params))
    if parent:
        out[protocol.MLFLOW_PARENT] = parent
    out.update(series.trial_facts(out, number))
    out.pop(wire.SPEC, None)
    if out.get(protocol.OUTPUT_DIR):
        out[protocol.OUTPUT_DIR] = os.path.join(out[protocol.OUTPUT_DIR], f"trial-{number}")
    return out


def stop(process: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> None:
    """Stop the training (its whole process group): SIGTERM, then SIGKILL after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_trial(study, sweep: wire.Sweep, trial, command: list[str], env: dict[str, str]) -> str:
    """Run the training command for `trial`, report its metric, tell the study how it ended; the state."""
    params = dict(trial.params)
    shown = ", ".join(f"{k}={wire.format_value(v)}" for k, v in params.items())
    say(words.line(words.TRIAL, f"{trial.number}: {shown}"))
    with tempfile.TemporaryDirectory(prefix=f"vdk-trial-{trial.number}-") as work:  # the trial's metric file
        return _run(study, sweep, trial, command, env, os.path.join(work, "metrics.log"))


def _run(study, sweep: wire.Sweep, trial, command: list[str], env: dict[str, str], metric_file: str) -> str:
    engine = sweep_study.optuna()
    params = dict(trial.params)
    argv = [wire.substitute(a, params) for a in command]
    parent = study.user_attrs.get(mlflow_runs.PARENT_ATTR)  # the sweep's MLflow run (runtime/sweep_server.py)
    child_env = trial_environment(env, params, metric_file, sweep, trial.number, parent)
    process = subprocess.Popen(argv, env=child_env, start_new_session=True)
    reports = sweep_study.TrialReports(trial, Path(metric_file), sweep.prune)
    pruned = timed_out = False
    why: str | None  # why it was pruned or failed (None: it completed)
    limit = float(env.get(wire.TRIAL_SECONDS) or 0) or None
    started = time.monotonic()
    try:
        while process.poll() is None:
            time.sleep(POLL_SECONDS)
            if limit is not None and time.monotonic() - started > limit:
                say(words.line(words.TRIAL, f"{trial.number} ran longer than max_runtime ({limit:.0f} s): stopped"))
                timed_out = True
                stop(process)
                break
            if sweep_study.wait_for(reports.poll, "reporting", STUDY_TIMEOUT_SECONDS, say):
                last = reports.last
                why = f"{sweep.metric} {last[1] if last else '?'} is worse than the median of the earlier trials"
                say(words.line(words.TRIAL, f"{trial.number} pruned at step {last[0] if last else '?'}: {why}"))
                pruned = True
                stop(process)
                break
    except BaseException:
        stop(process)
        raise
    code = process.wait()
    if not pruned:
        sweep_study.wait_for(reports.poll, "reporting", STUDY_TIMEOUT_SECONDS, say)
    last = reports.last
    if pruned:
        state, value, why = engine.trial.TrialState.PRUNED, None, None
    elif timed_out:
        state, value, why = engine.trial.TrialState.FAIL, None, f"it ran longer than max_runtime ({limit:.0f} s)"
    elif code != 0:
        state, value, why = engine.trial.TrialState.FAIL, None, f"the training exited with code {code}"
    elif last is None:
        seen = ", ".join(reports.names or []) or "nothing"
        state, value = engine.trial.TrialState.FAIL, None
        why = f"the script never reported {sweep.metric} (it showed: {seen})"
    else:
        state, value, why = engine.trial.TrialState.COMPLETE, last[1], None
    if why:
        sweep_study.wait_for(lambda: trial.set_user_attr(sweep_study.WHY, why), "telling", STUDY_TIMEOUT_SECONDS, say)
    sweep_study.wait_for(
        lambda: study.tell(trial.number, value, state=state, skip_if_finished=True),
        "telling",
        STUDY_TIMEOUT_SECONDS,
        say,
    )
    name = {"COMPLETE": sweep_study.COMPLETE, "PRUNED": sweep_study.PRUNED}.get(state.name, sweep_study.FAILED)
    ending = f"{sweep.metric} {value}" if value is not None else (why or "")
    say(words.line(words.TRIAL, f"{trial.number} {name}" + (f": {ending}" if ending else "")))
    return name


def slot_trial(study, sweep: wire.Sweep, slot: int):
    """The trial this slot runs: the one it started before a restart (still running: again from the start; ended:
    none to run), else a new one."""
    engine = sweep_study.optuna()
    mine = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(sweep_study.SLOT) == slot]
    for t in mine:
        if t.state == engine.trial.TrialState.RUNNING:
            say(words.line(words.SLOT, f"{slot} restarted: trial {t.number} runs again from the start"))
            return engine.trial.Trial(study, t._trial_id)
    if mine:
        return None
    return sweep_study.ask(study, sweep, slot)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        raise SystemExit("sweep_trial: no training command given (`-- python -m <torch's launcher> ...`)")
    env = dict(os.environ)
    sweep = wire.Sweep.from_json(env[wire.SPEC])
    slot = int(env.get("JOB_COMPLETION_INDEX") or 0)
    storage = connect(env)
    study = sweep_study.wait_for(lambda: sweep_study.open_study(sweep, storage), "opening", STUDY_TIMEOUT_SECONDS, say)
    reason = sweep_study.wait_for(lambda: sweep_study.stop_reason(study, sweep), "reading", STUDY_TIMEOUT_SECONDS, say)
    if reason:
        sweep_study.wait_for(lambda: study.set_user_attr(sweep_study.STOPPED, reason), "stopping", 60, say)
        line = wire.stop_line(reason)
        say(line)
        termination.leave(line)
        return wire.STOP_EXIT_CODE
    trial = sweep_study.wait_for(lambda: slot_trial(study, sweep, slot), "asking", STUDY_TIMEOUT_SECONDS, say)
    if trial is None:
        say(words.line(words.SLOT, f"{slot} ran its trial before it restarted: nothing left to do"))
        return 0
    run_trial(study, sweep, trial, command, env)
    reason = sweep_study.wait_for(lambda: sweep_study.stop_reason(study, sweep), "reading", STUDY_TIMEOUT_SECONDS, say)
    if reason:
        sweep_study.wait_for(lambda: study.set_user_attr(sweep_study.STOPPED, reason), "stopping", 60, say)
        say(wire.stop_line(reason))
        termination.leave(wire.stop_line(reason))
        return wire.STOP_EXIT_CODE
    return 0


if __name__ == "__main__":
    sys.exit(main())
