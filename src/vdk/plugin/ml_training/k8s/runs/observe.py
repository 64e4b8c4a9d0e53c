"""What a run is doing, read through the client: its ranks, events and Kueue state, why it waits or
failed (with the failing rank's last log lines), its progress; and the logs of every rank, once or
followed. The interpretation lives in `diagnosis/` (through `cluster_evidence`); this module only gathers.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from datetime import timezone
from typing import Any

from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.diagnosis import engine
from vdk.plugin.ml_training.diagnosis import sizing
from vdk.plugin.ml_training.diagnosis.evidence import Event
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.sizing import SizingEvidence
from vdk.plugin.ml_training.diagnosis.sizing import Startup
from vdk.plugin.ml_training.k8s import backends
from vdk.plugin.ml_training.k8s import gpu_hours
from vdk.plugin.ml_training.k8s import gpu_measure
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.api_errors import brief
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.gpu_measure import RunGpus
from vdk.plugin.ml_training.k8s.manifests import pod_selector
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs import restarts as run_restarts
from vdk.plugin.ml_training.k8s.runs import summary as run_summary
from vdk.plugin.ml_training.k8s.runs.cluster_evidence import rank_explanation
from vdk.plugin.ml_training.k8s.runs.cluster_evidence import run_evidence
from vdk.plugin.ml_training.k8s.runs.cluster_evidence import stalled_in_log
from vdk.plugin.ml_training.k8s.runs.pod_states import RankState
from vdk.plugin.ml_training.k8s.runs.restarts import Restart
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.k8s.runs.summary import summarize
from vdk.plugin.ml_training.runtime import output_workdir
from vdk.plugin.ml_training.runtime.progress_lines import Progress
from vdk.plugin.ml_training.runtime.progress_lines import loss_curve
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.runtime.watchdog import parse_stall
from vdk.plugin.ml_training.vocabulary.nvidia import mig_profile_of

FAILURE_LOG_LINES = 40  # shown of the failing rank
# Read of a log's end: the failing rank's is searched for a stall and well-known errors (torch's launcher
# prints a long summary last), rank 0's for its progress lines: the last one and the loss curve (the same
# read when rank 0 failed). A line every 30 s: 2000 lines hold hours of progress among the script's output.
LOG_SCAN_LINES = 2000
LogTail = Callable[[str, str, bool], "tuple[str | None, str | None]"]  # (pod, container, previous)
FOLLOW_POLL_SECONDS = 2.0
FOLLOW_ATTEMPTS = 3  # log requests refused for one container before giving up on it
NO_PODS_RECHECK_SECONDS = 10.0  # while a followed run has no pods: how often to ask again why
FOLLOW_GIVE_UP_SECONDS = 300.0  # a followed run's state unreadable this long ends the following


@dataclass
class RunDetail:
    run: RunSummary
    phase: str  # the run's phase, Pending while ranks still cannot start
    ranks: list[RankState]
    findings: list[Finding]
    events: list[Event]
    progress: Progress | None
    notes: list[str] = field(default_factory=list)  # what could not be read, and why
    loss_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, loss) of rank 0's progress lines
    # Where its outputs persist ({"claim", "directory"}) and, from rank 0's last summary line, "files" and "bytes".
    outputs: dict | None = None
    gpus: RunGpus | None = None  # its nodes' GPU figures (k8s/gpu_measure.py)
    startup: Startup | None = None  # from its start to its first optimizer step
    restarts: list[Restart] = field(default_factory=list)  # every restart the cluster still shows, with its cause
    data: tuple[DataPin, ...] | None = None  # the datasets it trained on, as its record pinned them (None: not read)

    @property
    def stall(self) -> Stall | None:
        """The rank the stall watchdog stopped, if that is why the run failed (or restarted)."""
        return next((f.stall for f in self.findings if f.stall is not None), None)

    def to_dict(self) -> dict:
        return {
            "run": self.run.to_dict(),
            "phase": self.phase,
            "ranks": [r.to_dict() for r in self.ranks],
            "findings": [f.to_dict() for f in self.findings],
            "events": [e.to_dict() for e in self.events],
            "progress": self.progress.to_dict() if self.progress else None,
            "loss_curve": [{"step": step, "loss": loss} for step, loss in self.loss_curve],
            "stall": self.stall.to_dict() if self.stall is not None else None,
            "notes": list(self.notes),
            "outputs": self.outputs,
            "gpus": self.gpus.to_dict() if self.gpus is not None else None,
            "startup": dataclasses.asdict(self.startup) if self.startup is not None else None,
            "restarts": [r.to_dict() for r in self.restarts],
            # each dataset at the version the run trained on (its list of files is `vdk diff`'s)
            "data": [dict(pin.to_dict(), objects=None) for pin in self.data] if self.data is not None else None,
        }


def run_pods(client: KubeClient, run: RunSummary) -> list[dict]:
    if run.backend is None or backends.find(run.backend) is None:
        return []
    return client.list_pods(pod_selector(run.backend, run.name))


def inspect_run(client: KubeClient, run: RunSummary, pods: list[dict] | None = None) -> RunDetail:
    """Everything `vdk show` says about a run (its `pods`, when the caller has just read them). Every part
    degrades alone: what cannot be read — not allowed (403), gone (404: a pod deleted between the list and
    the read), the server failing or not answering — becomes a one-line note, and the rest is shown."""
    notes: list[str] = []
    if pods is None:
        pods = _partial(notes, "pods", lambda: run_pods(client, run), None)
    pods_read = pods is not None
    pods = pods or []
    ranks = pod_states.rank_states(pods, run.backend)
    # (pod, container, previous) -> the end of that log, read once (a failure too): rank 0's failure log is
    # its progress too
    tail: LogTail = _read_once(
        lambda pod, container, previous: client.pod_log(pod, container, previous=previous, tail_lines=LOG_SCAN_LINES)
    )
    events = _partial(notes, "events", lambda: pod_states.run_events(client.list_events(), run.name), [])
    workloads = []
    if run.queue and run.uid and not run.finished:
        uid = run.uid
        workloads = _partial(notes, "Kueue workloads", lambda: client.kueue_workloads(uid), [])
    evidence = run_evidence(run, ranks, events, workloads, pods_read)
    findings = engine.why_waiting(evidence)
    if run.phase != run_summary.SUCCEEDED:
        failure = engine.why_failed(evidence)
        if failure is not None:
            failure = _partial(
                notes, "logs", lambda: _attach_failure_log(tail, failure, evidence, ranks, notes), failure
            )
            findings.append(failure)
    logged, curve = _partial(notes, "logs", lambda: _progress(tail, ranks), (None, []))
    progress = latest_progress(run.progress, logged)
    phase = pod_states.effective_phase(run.phase, ranks)
    outputs = _partial(notes, "logs", lambda: _outputs(run, tail, ranks), run.outputs)
    gpus = gpu_measure.run_gpus(ranks) or _partial(
        notes, "logs", lambda: gpu_measure.run_gpus(ranks, _rank0_lines(tail, ranks)), None
    )
    startup = gpu_measure.startup(run.started, gpus.first_step, ranks, pods, events) if gpus is not None else None
    if gpus is not None and not gpus.live and run.finished:
        findings += sizing.advise(_sizing_evidence(run, gpus, startup, progress, pods))
    restarts = run_restarts.run_restarts(pods, run.backend, events)
    if restarts:
        restarts = run_restarts.with_steps(restarts, pods, run.backend, tail)
    detail = RunDetail(run, phase, ranks, findings, events, progress, notes, curve, outputs, gpus, startup, restarts)
    if run.phase == run_summary.FAILED and detail.stall is not None:
        detail.phase = run_summary.STALLED
    return detail


def why_no_pods(client: KubeClient, run: RunSummary) -> str:
    """Why a run that the caller found without pods has none (queued, not created yet, cleaned up
    after it ended), in one line."""
    detail = inspect_run(client, run, pods=[])
    # The callers say "no pods" themselves; the findings about a pod-less run start with it too.
    reasons = [f.what.removeprefix("no pods yet: ") for f in detail.findings]
    return "; ".join(reasons) or f"the run is {detail.phase}"


def _partial(notes: list[str], what: str, read: Callable[[], Any], otherwise: Any) -> Any:
    """`read()`, or `otherwise` with a note (once per part) when the cluster would not give it."""
    try:
        return read()
    except KubeApiError as e:
        note = f"{what} could not be read{brief(e)}"
        if note not in notes:
            notes.append(note)
        return otherwise


def _read_once(read: LogTail) -> LogTail:
    """`read` whose answers — and failures — are kept: a log that could not be read is asked for once."""
    answers: dict[tuple, Any] = {}

    def once(pod: str, container: str, previous: bool) -> tuple[str | None, str | None]:
        key = (pod, container, previous)
        if key not in answers:
            try:
                answers[key] = read(pod, container, previous)
            except KubeApiError as e:
                answers[key] = e
        if isinstance(answers[key], KubeApiError):
            raise answers[key]
        return answers[key]

    return once


def _attach_failure_log(
    tail: LogTail, failure: Finding, evidence: Evidence, ranks: list[RankState], notes: list[str]
) -> Finding:
    """The failure with the end of the blamed rank's log, what well-known errors in it mean, and the stall
    its log reports: every thread's stack, where a termination message holds the top frames only."""
    blamed = pod_states.blamed_rank(ranks)
    if blamed is None or failure.ranks != [blamed[0].rank]:
        return failure
    rank, previous = blamed
    text, why = tail(rank.pod, rank.container, previous)
    if text is None:
        notes.append(f"no log of rank {rank.rank}: {why}")
        return failure
    lines = text.splitlines()
    stall = parse_stall(lines)
    if stall is not None and (failure.stall is None or failure.stall.rank == stall.rank):
        failure = engine.why_failed(stalled_in_log(evidence, stall)) or failure
    return dataclasses.replace(failure, log_tail=lines[-FAILURE_LOG_LINES:], hints=engine.log_hints(lines))


def _progress(tail: LogTail, ranks: list[RankState]) -> tuple[Progress | None, list[tuple[int, float]]]:
    """Rank 0's last progress line and the loss of every progress line in the end of its log."""
    lines = _rank0_lines(tail, ranks)
    return parse_progress(lines), loss_curve(lines)


def latest_progress(status: Progress | None, logged: Progress | None) -> Progress | None:
    """The progress the run's own status says (its backend's `progress`), unless rank 0's log is further on
    (the status stopped being updated: its posts failed) or the status says none; else the log's."""
    if status is None or (logged is not None and (logged.step or 0) > (status.step or 0)):
        return logged
    return status


def _rank0_lines(tail: LogTail, ranks: list[RankState]) -> list[str]:
    """The end of rank 0's log (read once: the progress, the loss curve and node 0's GPU lines are there)."""
    rank0 = next((r for r in ranks if r.index == 0), None)
    if rank0 is None or not rank0.started:
        return []
    text, _ = tail(rank0.pod, rank0.container, False)
    return (text or "").splitlines()


def _sizing_evidence(
    run: RunSummary, gpus: RunGpus, startup: Startup | None, progress: Progress | None, pods: list[dict]
) -> SizingEvidence:
    """What the sizing advice reads of an ended run: its nodes' GPU totals, its shape, its GPU-hours."""
    usage = gpu_hours.run_usage(run, pods, datetime.now(timezone.utc))
    hours = usage.hours(usage.start, usage.end or datetime.now(timezone.utc)) if usage is not None else 0.0
    seconds = ((usage.end or datetime.now(timezone.utc)) - usage.start).total_seconds() if usage else None
    rate = None
    if progress is not None and progress.fields.get("steps_per_s"):
        try:
            rate = float(progress.fields["steps_per_s"])
        except ValueError:
            rate = None
    profile = mig_profile_of(run.gpu_resource)
    return SizingEvidence(gpus.figures, run.gpus_per_node, profile, hours, seconds, startup, rate)


def _outputs(run: RunSummary, tail: LogTail, ranks: list[RankState]) -> dict | None:
    """The run's output location and what rank 0 last said it holds (the end of its log, already read)."""
    if run.outputs is None:
        return None
    rank0 = next((r for r in ranks if r.index == 0), None)
    if rank0 is None or not rank0.started:
        return dict(run.outputs)
    text, _ = tail(rank0.pod, rank0.container, False)
    summary = output_workdir.parse_summary((text or "").splitlines())
    if summary is None:
        return dict(run.outputs)
    return {**run.outputs, "files": summary.files, "bytes": summary.bytes}


# --- logs of every rank ----------------------------------------------------------------------------


@dataclass
class RankLog:
    rank: RankState
    previous: str | None  # the log of the container instance before the last restart
    current: str | None
    unavailable: str | None  # why there is no current log (pending, pulling, ...)

    def to_dict(self) -> dict:
        return {
            "rank": self.rank.rank,
            "pod": self.rank.pod,
            "container": self.rank.container,
            "state": self.rank.state,
            "previous": self.previous,
            "log": self.current,
            "unavailable": self.unavailable,
        }


def rank_logs(client: KubeClient, run: RunSummary, notes: list[str] | None = None) -> Iterator[RankLog]:
    """The log of every rank, in rank order; a rank without one says why instead — also when its log could
    not be read (the pod deleted since the list, not allowed, the server failing): the other ranks' logs are
    still given. With `notes`, a pods list that fails is a line there (and no rank), else its error."""
    if notes is None:
        pods = run_pods(client, run)
    else:
        pods = _partial(notes, "pods", lambda: run_pods(client, run), [])
    for rank in pod_states.rank_states(pods, run.backend):
        previous = None
        if rank.previous is not None:
            previous, _ = _log_or_why(client, rank, previous=True)
        current, unavailable = None, None
        if rank.streamable:
            current, why = _log_or_why(client, rank, previous=False)
            if current is None:
                unavailable = f"its log could not be read: {why}"
        else:
            unavailable = rank_explanation(rank)
        yield RankLog(rank, previous, current, unavailable)


def _log_or_why(client: KubeClient, rank: RankState, previous: bool) -> tuple[str | None, str | None]:
    """(log, None), or (None, why there is none or why it could not be read, in a few words)."""
    try:
        return client.pod_log(rank.pod, rank.container, previous=previous)
    except KubeApiError as e:
        return None, brief(e).removeprefix(": ").removeprefix(" ")


def follow_logs(
    client: KubeClient,
    run: RunSummary,
    write: Callable[[str, str], None],
    explain: Callable[[str, str], None],
    poll_seconds: float | None = None,
    seen: Callable[[list[RankState]], None] | None = None,
) -> RunSummary:
    """Stream every rank's log as it is written (`write(rank, line)`), starting ranks as they
    start and containers again after a restart; say why a rank has no log yet
    (`explain(rank, why)`, again when the reason changes); `seen(ranks)` after every read of the
    ranks (how each one's containers ended). Returns when the run has finished and every log has
    been read to its end; returns the run's last summary."""
    poll = FOLLOW_POLL_SECONDS if poll_seconds is None else poll_seconds
    streams: dict[tuple[str, int], threading.Thread] = {}
    refused: dict[tuple[str, int], int] = {}
    explained: dict[str, str] = {}
    lock = threading.Lock()
    no_pods_checked = float("-inf")

    def stream(rank: RankState, key: tuple[str, int]) -> None:
        try:
            for line in client.follow_pod_log(rank.pod, rank.container):
                with lock:
                    write(rank.rank, line)
        except KubeApiError as e:
            with lock:
                refused[key] = refused.get(key, 0) + 1
                if e.status in (400, 404) and refused[key] < FOLLOW_ATTEMPTS:
                    streams.pop(key, None)  # not started after all: try again at the next poll
                else:
                    explain(rank.rank, f"log stream ended: {e.detail or e.problem}")
        except Exception as e:  # noqa: BLE001 - a thread's error would otherwise vanish
            with lock:
                explain(rank.rank, f"log stream failed: {type(e).__name__}: {e}")

    failing_since: float | None = None  # the cluster has not answered the polls since then
    while True:
        try:
            run = summarize(client.get_run(run.name, run.backend))
            ranks = pod_states.rank_states(run_pods(client, run), run.backend)
        except KubeApiError as e:
            if e.status == 404 and not e.not_served:
                with lock:
                    explain("run", f"{run.name} was deleted")
                break
            if e.status in (401, 403) or e.not_served:
                raise
            # A server failing for a while (each poll's retries said already): the logs keep streaming, and
            # the polls go on until it answers again or FOLLOW_GIVE_UP_SECONDS have passed.
            failing_since = failing_since if failing_since is not None else time.monotonic()
            if time.monotonic() - failing_since > FOLLOW_GIVE_UP_SECONDS:
                raise
            why = f"the run's state could not be read{brief(e)}; asking again"
            if explained.get("run") != why:
                explained["run"] = why
                with lock:
                    explain("run", why)
            time.sleep(poll)
            continue
        failing_since = None
        if seen is not None:
            with lock:
                seen(ranks)
        # Before any pod exists (queued, not created yet): say why, again when that changes.
        due = run.finished or time.monotonic() - no_pods_checked >= NO_PODS_RECHECK_SECONDS
        if not ranks and not streams and due:
            no_pods_checked = time.monotonic()
            reason = why_no_pods(client, run)
            why = f"no pods, so no logs: {reason}" if run.finished else f"no pods yet: {reason} (waiting for them)"
            if explained.get("run") != why:
                explained["run"] = why
                with lock:
                    explain("run", why)
        for rank in ranks:
            key = (rank.pod, rank.restarts)
            if rank.streamable:
                with lock:
                    if key not in streams:
                        thread = threading.Thread(target=stream, args=(rank, key), daemon=True)
                        streams[key] = thread
                        thread.start()
                continue
            why = rank_explanation(rank)
            if explained.get(rank.rank) != why:
                explained[rank.rank] = why
                with lock:
                    explain(rank.rank, why)
        with lock:
            live = [t for t in streams.values() if t.is_alive()]
        if run.finished and not live:
            break
        time.sleep(poll)
    for thread in list(streams.values()):
        thread.join()
    return run
