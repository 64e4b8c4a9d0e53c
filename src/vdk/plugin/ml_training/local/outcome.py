"""How a local run ended, from the ranks' result files and torchrun's log: passed or not, steps and
losses per rank, and for a failure its root cause (the first rank that failed) and nothing else; and that
outcome as the evidence the diagnosis reads (`evidence`: what it means and the fix are `diagnosis/`'s)."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from vdk.plugin.ml_training.diagnosis.evidence import Blame
from vdk.plugin.ml_training.diagnosis.evidence import Ending
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.rules.engine_failure import engine_message
from vdk.plugin.ml_training.local import stack_dump
from vdk.plugin.ml_training.local.launcher import LocalRun
from vdk.plugin.ml_training.local.rank_memory import machine_memory_bytes
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.protocol import SPAWNED_NOTHING
from vdk.plugin.ml_training.runtime.watchdog import Stall
from vdk.plugin.ml_training.units import format_duration

# A rank's end as torchrun's ChildFailedError lists it.
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_FIRST_FAILURE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
# torchrun stopping the ranks still alive after a failure (forked ranks / fresh interpreters).
_CLOSED = re.compile(r"(?:Closing process (\d+) via signal|Sending process (\d+) closing signal)")
_SOURCE_LOCATION = re.compile(r"\[/[^\]\s]+:\d+\] ")
MISSING = "missing"  # no result file: the rank never got to run its bootstrap
LAUNCHER_RANK = -1  # the launcher process of a script that spawns its workers (they are the ranks)


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    status: str  # a protocol status, or MISSING
    steps: int | None = None
    last_loss: float | str | None = None
    error: dict[str, str] | None = None  # type, message, traceback
    ended_at: float | None = None
    exit_code: int | None = None  # as torchrun saw it, when it reported one
    adaptations: dict[str, int] = field(default_factory=dict)
    log: Path | None = None  # rank >= 1: its stdout and stderr
    stack: str = ""  # faulthandler's dump: set when it crashed or was terminated
    stopped_by_torchrun: bool = False  # still running when torchrun stopped the ranks after a failure
    progress: str | None = None  # rank 0 of a full run: the last progress line it printed
    observed: tuple[str, ...] = ()  # smoke run: what the code did that explains a failure (cpu_shims)
    spawned: tuple[int, ...] = ()  # smoke run's launcher: the workers each of its mp.spawn calls started
    stall: dict[str, Any] | None = None  # full run: what the stall watchdog saw (runtime/watchdog.Stall.to_dict)
    epoch_end: protocol.EpochEnd | None = None  # smoke run: whether it reached the end of an epoch
    training_end: protocol.TrainingEnd | None = None  # smoke run: whether the code after its training loop ran
    peak_memory: int | None = None  # bytes: its peak resident memory, as last sampled
    # smoke run: what the code asked for that the smoke run turned off (`report_to=wandb`), each with the module
    # the cluster run imports for it (None: none)
    turned_off: dict[str, str | None] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "the launcher process" if self.rank == LAUNCHER_RANK else f"rank {self.rank}"

    @property
    def crash(self) -> str | None:
        """'Segmentation fault', ... when the interpreter crashed."""
        return stack_dump.crash(self.stack)

    @property
    def succeeded(self) -> bool:
        return self.status in (protocol.STOPPED, protocol.FINISHED)

    @property
    def crashed_at_exit(self) -> bool:
        """Reported success, then its interpreter died shutting down (a library's thread or destructor)."""
        return self.succeeded and self.exit_code is not None and self.exit_code not in (0, -signal.SIGTERM)

    @property
    def died_abruptly(self) -> bool:
        """Ended without reporting, by a signal or exit of its own, not stopped after another's failure."""
        if self.status not in (protocol.RUNNING, MISSING):
            return False
        if self.exit_code is not None:
            return self.exit_code not in (0, -signal.SIGTERM)
        # Forked ranks: torchrun names the exit status of the first rank it saw end only. A stack dump
        # without a crash header is faulthandler's answer to SIGTERM: someone stopped the rank.
        if self.crash is not None:
            return True
        return self.status == protocol.RUNNING and not self.stopped_by_torchrun and not protocol.has_dump(self.stack)

    def death(self) -> str:
        """'was killed by SIGSEGV' / 'exited with code 3 ...' / 'died without a Python error ...'."""
        if self.exit_code is None:
            if self.crash:
                return f"crashed ({self.crash})"
            return (
                "died without a Python error (a signal such as SIGKILL, often the out-of-memory killer, or os._exit())"
            )
        if self.exit_code < 0:
            try:
                name = signal.Signals(-self.exit_code).name
            except ValueError:
                name = f"signal {-self.exit_code}"
            return f"was killed by {name}"
        return f"exited with code {self.exit_code}" + ("" if self.succeeded else " before reporting")


@dataclass(frozen=True)
class RunOutcome:
    run: LocalRun
    ranks: list[RankOutcome]
    passed: bool
    root_cause: RankOutcome | None  # the rank to blame for a failure, when one can be named
    headline: str  # one line: what went wrong (empty when passed)
    consequences: list[RankOutcome] = field(default_factory=list)  # ranks that failed after it
    warnings: list[str] = field(default_factory=list)
    untrained: bool = False  # a smoke run whose ranks all ended without an optimizer step
    launcher: RankOutcome | None = None  # the process that spawned the ranks, if the script spawns them

    @property
    def steps(self) -> int | None:
        counts = [r.steps for r in self.ranks if r.steps is not None]
        return min(counts) if counts else None

    @property
    def epoch_end(self) -> protocol.EpochEnd | None:
        """Whether the smoke run reached the end of an epoch: as the first rank that tells says."""
        known = [r.epoch_end for r in self.ranks if r.epoch_end is not None]
        return known[0] if known else None

    @property
    def training_end(self) -> protocol.TrainingEnd | None:
        """Whether the code after the smoke run's training loop ran: as the first rank that tells says."""
        known = [r.training_end for r in self.ranks if r.training_end is not None]
        return known[0] if known else None

    def turned_off(self) -> dict[str, str | None]:
        """What the code asked for that the smoke run turned off, on any rank: {what: module it needs, or None}."""
        out: dict[str, str | None] = {}
        for rank in [*self.ranks, *([self.launcher] if self.launcher else [])]:
            out.update(rank.turned_off)
        return out

    def adaptations(self) -> list[str]:
        seen: dict[str, int] = {}
        for rank in [*self.ranks, *([self.launcher] if self.launcher else [])]:
            for name, count in rank.adaptations.items():
                seen[name] = max(seen.get(name, 0), count)
        return list(seen)


def analyse(run: LocalRun) -> RunOutcome:
    exit_codes, first_failed, stopped_pids = _agent_failures(run.agent_log)
    records = protocol.read_results(run.run_dir)
    launcher_record = protocol.read_launcher(run.run_dir) if run.plan.workers else None
    if run.exit_code == 0:
        # torchrun saw every rank exit with 0: one without a final word ended by os._exit(0)
        for record in [*records.values(), *([launcher_record] if launcher_record else [])]:
            if record.get("status") == protocol.RUNNING:
                record["status"] = protocol.FINISHED
    launcher = None
    if run.plan.workers:  # torchrun's one process is the launcher; the workers it spawned are the ranks
        launcher = _rank(run, protocol.LAUNCHER, launcher_record, exit_codes.get(0), stopped_pids)
        # the workers that started: the script decides how many (nprocs), the smoke run only offers GPUs
        ranks = [_rank(run, rank, records[rank], None, set()) for rank in sorted(records)]
        first_failed = LAUNCHER_RANK if first_failed == 0 else first_failed
    else:
        ranks = [
            _rank(run, rank, records.get(rank), exit_codes.get(rank), stopped_pids)
            for rank in range(run.plan.processes)
        ]
    processes = [*ranks, *([launcher] if launcher else [])]
    passed = run.exit_code == 0 and not run.timed_out and all(r.succeeded and not r.crashed_at_exit for r in processes)
    warnings = _warnings(run, ranks) if passed else []
    if passed and run.plan.mode == protocol.SMOKE and not any(r.steps for r in ranks):
        # A smoke run is there to show that the code trains: ending without one step shows nothing.
        return RunOutcome(
            run,
            ranks,
            False,
            None,
            _untrained_headline(processes),
            warnings=warnings,
            untrained=True,
            launcher=launcher,
        )
    if passed:
        return RunOutcome(run, ranks, True, None, "", warnings=warnings, launcher=launcher)
    root, headline = _root_cause(run, processes, first_failed)
    others = [r for r in processes if r is not root and (r.status == protocol.FAILED or r.died_abruptly)]
    return RunOutcome(run, ranks, False, root, headline, others, warnings, launcher=launcher)


def _rank(
    run: LocalRun, name: int | str, record: dict[str, Any] | None, exit_code: int | None, stopped_pids: set[int]
) -> RankOutcome:
    run_dir = run.run_dir
    log = protocol.log_path(run_dir, name)
    stack_file = protocol.stack_path(run_dir, name)
    stack = stack_file.read_text(encoding="utf-8", errors="replace").strip() if stack_file.exists() else ""
    stack = _job_paths(run, stack)
    rank = name if isinstance(name, int) else LAUNCHER_RANK
    memory = run.peak_memory.get(name)
    if record is None:
        return RankOutcome(
            rank, MISSING, exit_code=exit_code, log=log if log.exists() else None, stack=stack, peak_memory=memory
        )
    error = record.get("error")
    if isinstance(error, dict):  # the ranks ran copies of the job's files: show the job's own
        error = {k: _job_paths(run, v) if isinstance(v, str) else v for k, v in error.items()}
    return RankOutcome(
        rank=rank,
        status=str(record.get("status", protocol.RUNNING)),
        steps=record.get("steps"),
        last_loss=record.get("last_loss"),
        error=error,
        ended_at=record.get("ended_at"),
        exit_code=exit_code,
        adaptations=dict(record.get("adaptations") or {}),
        log=log if log.exists() else None,
        stack=stack,
        stopped_by_torchrun=record.get("pid") in stopped_pids,
        progress=record.get("progress"),
        observed=tuple(record.get("observed") or ()),
        spawned=tuple(n for n in record.get("spawned") or () if isinstance(n, int)),
        turned_off=dict(record.get("turned_off") or {}),
        stall=_stall_in_job(run, record.get("stall")),
        epoch_end=protocol.EpochEnd.from_record(record.get("epoch_end")),
        training_end=protocol.TrainingEnd.from_record(record.get("training_end")),
        peak_memory=memory,
    )


def _job_paths(run: LocalRun, text: str) -> str:
    if run.work is not None:
        return run.work.to_job_paths(text)
    if run.outputs is not None and text:  # in the image, the ranks ran the job's files linked into it
        return text.replace(f"{run.outputs}{os.sep}", f"{run.plan.spec.job_dir}{os.sep}")
    return text


def _stall_in_job(run: LocalRun, stall: object) -> dict | None:
    """The stall watchdog's record, its frames naming the job's files rather than the working copies."""
    if not isinstance(stall, dict):
        return None
    threads = [
        {**thread, "frames": [_job_paths(run, str(frame)) for frame in thread.get("frames") or []]}
        for thread in stall.get("threads") or []
        if isinstance(thread, dict)
    ]
    return {**stall, "threads": threads}


def _agent_failures(agent_log: Path) -> tuple[dict[int, int], int | None, set[int]]:
    """From torchrun's log: rank -> exit code for each failed rank it listed, the rank it saw fail
    first, and the pids of the ranks it stopped because another had failed."""
    try:
        text = agent_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}, None, set()
    stopped = {int(a or b) for a, b in _CLOSED.findall(text)}
    codes = {int(rank): int(code) for rank, code in _FAILURE.findall(text)}
    first = None
    root_section = text.split("Root Cause", 1)
    if len(root_section) == 2:
        match = _FAILURE.search(root_section[1])
        if match:
            first = int(match.group(1))
    if first is None:
        match = _FIRST_FAILURE.search(text)
        if match:
            first = int(match.group(2))  # single node: local rank == rank
            codes.setdefault(first, int(match.group(1)))
    return codes, first, stopped


def _root_cause(run: LocalRun, ranks: list[RankOutcome], first_failed: int | None) -> tuple[RankOutcome | None, str]:
    # A rank that stopped stepping is stopped by its watchdog; the ranks waiting for it in a collective
    # wait a little longer, so the first stall not in a collective is the one to blame.
    stalled = sorted(
        (r for r in ranks if r.status == protocol.STALLED),
        key=lambda r: (bool((r.stall or {}).get("collective")), r.ended_at or float("inf")),
    )
    if stalled:
        root = stalled[0]
        return root, f"stalled: {(root.stall or {}).get('line') or f'no optimizer step on {root.label}'}"
    # A rank that died without a word (a segfault, the OOM killer) makes its peers fail, never the
    # reverse: a rank that raises reports before it exits.
    died = [r for r in ranks if r.died_abruptly]
    if died:
        root = next((r for r in died if r.rank == first_failed), died[0])
        return root, f"{root.label} {root.death()}"
    failed = sorted((r for r in ranks if r.status == protocol.FAILED), key=lambda r: r.ended_at or float("inf"))
    if failed:
        root = failed[0]
        return root, f"{root.label} failed: {one_line(root.error)}"
    at_exit = [r for r in ranks if r.crashed_at_exit]
    if at_exit:
        root = next((r for r in at_exit if r.rank == first_failed), at_exit[0])
        return root, f"{root.label} {root.death()} after its script ended, while Python shut down"
    if run.timed_out:
        running = [str(r.rank) for r in ranks if not r.succeeded and r.rank != LAUNCHER_RANK]
        who = f"rank {', '.join(running)} still running" if running else "torchrun still running"
        limit = format_duration(run.plan.timeout_seconds or 0)
        return None, f"timed out after {limit} ({run.plan.timeout_setting}): {who}"
    if not any(r.status != MISSING for r in ranks):
        said = engine_message(run.agent_log) if run.engine else None
        if said is not None:  # the engine's failure, not torchrun's: the container never ran
            return None, f"{run.engine} could not start the job's container (exit code {run.exit_code}): {said}"
        return None, f"torchrun failed before any rank started (exit code {run.exit_code})"
    unfinished = [r for r in ranks if not r.succeeded]
    if unfinished:
        root = unfinished[0]
        return root, f"{root.label} {root.death()}"
    return None, f"torchrun exited with code {run.exit_code}"


def _untrained_headline(ranks: list[RankOutcome]) -> str:
    if any(SPAWNED_NOTHING in r.observed for r in ranks):
        return f"no optimizer step was taken: the script called {SPAWNED_NOTHING}, so no training process started"
    return "no optimizer step was taken: the script ended without calling step() on a torch.optim optimizer"


def _warnings(run: LocalRun, ranks: list[RankOutcome]) -> list[str]:
    if run.plan.mode != protocol.SMOKE:
        return []
    wanted = run.plan.spec.smoke_steps
    out = []
    if any(r.steps for r in ranks):
        short: dict[int, list[int]] = {}
        for r in ranks:
            # a rank stopped at the second epoch may have taken fewer (gradient accumulation over more batches)
            if r.status == protocol.FINISHED and (r.steps or 0) < wanted:
                short.setdefault(r.steps or 0, []).append(r.rank)
        for done, which in sorted(short.items()):
            who = "every rank" if len(which) == len(ranks) > 1 else "rank " + ", ".join(map(str, which))
            if not done:  # others trained: this one serves them, or returned early
                out.append(
                    f"{who} took no optimizer step while the others trained: right for a peer that serves them (an "
                    "RPC parameter server or observer), else check why it returned early"
                )
                continue
            out.append(
                f"the script ended by itself after {done} of {wanted} optimizer steps (smoke_steps) on {who}: "
                "its training loop is shorter than the smoke run"
            )
    for r in ranks:
        if isinstance(r.last_loss, str):
            out.append(f"rank {r.rank}: the last loss is {r.last_loss}")
    return out


def one_line(error: dict[str, str] | None, width: int = 200) -> str:
    """'ValueError: boom' out of a reported error (a SyntaxError's message has the code above it)."""
    error = error or {}
    lines = [line.strip() for line in error.get("message", "").strip().splitlines() if line.strip()]
    kind = error.get("type", "")
    line = next((x for x in lines if kind and x.startswith(kind + ":")), lines[0] if lines else kind or "an error")
    if line.endswith(":") and line in lines and lines.index(line) + 1 < len(lines):
        line = f"{line} {lines[lines.index(line) + 1]}"  # "RuntimeError:" with its message on the next lines
    line = _SOURCE_LOCATION.sub("", line)  # "[/__w/pytorch/.../pair.cc:553] " of native errors
    return line if len(line) <= width else line[: width - 1] + "…"


# --- the evidence the diagnosis reads ------------------------------------------------------------------


def evidence(outcome: RunOutcome, again: str | None = None) -> Evidence:
    """What the failed run left, for the diagnosis. `again`: how its fix ends (default: run the same
    `vdk run` again)."""
    run = outcome.run
    plan = run.plan
    full = " --full" if plan.mode == protocol.FULL else ""
    container = " --container" if run.engine else ""
    processes = [*outcome.ranks, *([outcome.launcher] if outcome.launcher else [])]
    root = outcome.root_cause
    facts = LocalFacts(
        spec=plan.spec,
        mode=plan.mode,
        headline=outcome.headline,
        again=again or f"run `vdk run{container}{full} {plan.spec.job_dir}` again",
        gpus=plan.gpus,
        adapted=plan.mode == protocol.FULL and protocol.switched_on(protocol.ADAPT_TO_CPU, dict(plan.env)),
        ranks=plan.ranks,
        smoke_gpus=plan.env.get(protocol.SMOKE_GPUS, "?"),
        timeout_setting=plan.timeout_setting,
        timed_out=run.timed_out,
        untrained=outcome.untrained,
        in_image=bool(run.engine),
        engine=run.engine,
        agent_log=run.agent_log,
        machine_memory=machine_memory_bytes(),
        left_out=run.work.exclusion if run.work is not None else None,
    )
    blame = None
    if root is not None:
        blame = Blame(_rank_evidence(root), _ending(root), stall=_stall(root))
    return Evidence(tuple(_rank_evidence(r) for r in processes), blame, local=facts)


def _rank_evidence(rank: RankOutcome) -> RankEvidence:
    launcher = rank.rank == LAUNCHER_RANK
    return RankEvidence(
        rank=protocol.LAUNCHER if launcher else str(rank.rank),
        label=rank.label,
        index=None if launcher else rank.rank,
        ended=_ending(rank),
        error=rank.error,
        log=rank.log,
        observed=rank.observed,
        peak_memory=rank.peak_memory,
    )


def _ending(rank: RankOutcome) -> Ending:
    code = rank.exit_code
    name = None
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
    return Ending(
        exit_code=code,
        signal=name,
        crash=rank.crash,
        unnamed_signal=code is None and rank.died_abruptly and not rank.crash,
    )


def _stall(rank: RankOutcome) -> Stall | None:
    """The stall watchdog's record (runtime/watchdog.Stall.to_dict) read back."""
    stall = rank.stall
    if stall is None:
        return None
    last_step = stall.get("last_step")
    return Stall(
        rank=str(stall.get("rank", rank.rank)),
        seconds=float(stall.get("seconds") or 0),
        last_step=last_step if isinstance(last_step, int) else None,
        collective=stall.get("collective"),
        threads=[(str(t.get("name")), [str(f) for f in t.get("frames") or []]) for t in stall.get("threads") or []],
    )
