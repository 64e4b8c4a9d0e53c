"""The study of a sweep, in its own small pod: `python -m vdk.plugin.ml_training.runtime.sweep_server --storage
URL --port PORT`. It serves the study's storage (an SQLite file on the sweep's directory of the output claim, so
that it outlives this pod) through Optuna's gRPC storage proxy to the trial pods, and prints the study as one
line whenever it changes (runtime/sweep_protocol.py: `vdk show` reads the last). It ends by itself once every
trial has ended or the sweep was stopped, after the trials had time to hear it. With a tracking server
(MLFLOW_TRACKING_URI), the sweep is an MLflow run, its trials' parent: made here, its id kept in the study.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from vdk.plugin.ml_training.runtime import mlflow_runs
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.runtime import sweep_study
from vdk.plugin.ml_training.vocabulary import wire as words

SNAPSHOT_SECONDS = 2.0
# At most this many bytes a second of study lines: a big sweep's line (every trial: 3 MB for 10,000) is printed less
# often, so that its log stays what kubelet keeps and `vdk show` reads.
LOG_BYTES_PER_SECOND = 100_000
LINGER_SECONDS = 30.0  # after the last trial ended: the trial pods' last calls


def serve(storage_url: str, port: int, sweep: wire.Sweep, linger: float = LINGER_SECONDS) -> int:
    engine = sweep_study.optuna()
    storage = engine.storages.get_storage(storage_url)
    study = sweep_study.open_study(sweep, storage)
    server = threading.Thread(
        target=engine.storages.run_grpc_proxy_server,
        args=(storage,),
        kwargs={"host": "0.0.0.0", "port": port},  # every interface: the trial pods reach it through its Service
        daemon=True,
    )
    # the trials' parent, with a tracking server: made before the trials can ask for their trial, which tells them
    parent = mlflow_runs.SweepParent.of(study, sweep, err=sys.stdout)
    server.start()
    print(words.line(words.STUDY, f"{sweep.study}: serving {storage_url} on port {port}"), flush=True)
    last = None
    while True:
        snap = sweep_study.snapshot(study, sweep)
        line = wire.study_line(snap)
        pause = SNAPSHOT_SECONDS
        if line != last:
            print(line, flush=True)
            last = line
            pause = max(SNAPSHOT_SECONDS, len(line) / LOG_BYTES_PER_SECOND)
        if snap["finished"]:
            print(
                words.line(words.STUDY, f"{sweep.study}: every trial ended")
                if not snap["stopped"]
                else wire.stop_line(snap["stopped"]),
                flush=True,
            )
            time.sleep(linger)
            snap = sweep_study.snapshot(study, sweep)
            print(wire.study_line(snap), flush=True)
            if parent is not None:
                parent.end(snap, sweep.metric, bool(snap["stopped"]), err=sys.stdout)
            return 0
        if not server.is_alive():
            print(words.error("the study's storage proxy stopped"), flush=True)
            return 1
        time.sleep(pause)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sweep_server")
    parser.add_argument("--storage", required=True, help="the study's storage URL, e.g. sqlite:////outputs/study.db")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--linger", type=float, default=LINGER_SECONDS)
    args = parser.parse_args(argv)
    sweep = wire.Sweep.from_json(os.environ[wire.SPEC])
    return serve(args.storage, args.port, sweep, args.linger)


if __name__ == "__main__":
    sys.exit(main())
