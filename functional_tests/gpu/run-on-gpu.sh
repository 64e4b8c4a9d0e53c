#!/usr/bin/env bash
# The real-GPU check in one call (docs/gpu-verification.md), from the repository's root on a machine with an
# NVIDIA GPU and no network:
#
#   bash functional_tests/gpu/run-on-gpu.sh            # OUT: the folder the report goes to (default ./gpu-check-out)
#   bash functional_tests/gpu/run-on-gpu.sh --dry-run  # on a machine without a GPU: the GPU parts skipped
#
# 1. a virtual environment that sees the machine's own packages (its CUDA torch, transformers, accelerate,
#    Lightning, nvidia-ml-py), even when that machine's python3 is itself a virtual environment;
# 2. the carried wheels (`make gpu-check-prepare` put them in .gpu-carry/wheels) installed into it WITHOUT
#    network: the project and what the machine lacks, resolved against what it has (--no-index);
# 3. the check (functional_tests/gpu/check.py) with what is left of the budget, stopped at it if it overruns;
# 4. a report in any case: the check writes gpu-report.json and gpu-report.txt after every part; when the
#    set-up failed before it could start, this script writes them, saying what failed.
#
# VDK_GPU_CHECK_SECONDS (default 540): the whole call's time, set-up included; the device call's timeout must
# leave a little above it. VDK_GPU_CARRY (default .gpu-carry), VDK_GPU_PYTHON (default python3).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/gpu-check-out}
CARRY=${VDK_GPU_CARRY:-$ROOT/.gpu-carry}
PY=${VDK_GPU_PYTHON:-python3}
BUDGET=${VDK_GPU_CHECK_SECONDS:-540}
VENV=${VDK_GPU_VENV:-$(mktemp -d /tmp/vdk-gpu-check-venv.XXXXXX)}
START=$(date +%s)
mkdir -p "$OUT"
LOG=$OUT/setup.log
: >"$LOG"
# Nothing can be fetched on that machine: fail at once instead of waiting for a network that is not there.
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 UV_OFFLINE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONUNBUFFERED=1

say() { echo "[gpu-check $(($(date +%s) - START))s] $*" | tee -a "$LOG"; }

no_report() {  # the set-up failed: a report that says so, with the log's end
  "$PY" - "$OUT" "$1" "$LOG" <<'EOF'
import json, sys, time, pathlib
out, why, log = pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
tail = log.read_text(errors="replace").splitlines()[-40:] if log.exists() else []
data = {"check": "vdk-ml-training real-GPU check (functional_tests/gpu/run-on-gpu.sh)",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "environment": {},
        "parts": [{"name": "set-up", "status": "failed", "detail": why}], "setup_tail": "\n".join(tail)}
(out / "gpu-report.json").write_text(json.dumps(data, indent=2) + "\n")
(out / "gpu-report.txt").write_text(f"vdk-ml-training real-GPU check: the set-up failed: {why}\n\n" + "\n".join(tail) + "\n")
EOF
  cat "$OUT/gpu-report.txt"
  exit 1
}

say "python: $(command -v "$PY") ($("$PY" --version 2>&1)); GPU: $(nvidia-smi -L 2>/dev/null | head -1 || echo none)"
[ -d "$CARRY/wheels" ] || no_report "no carried wheels in $CARRY/wheels: run \`make gpu-check-prepare\` first, and name .gpu-carry in the call's carry list"

# 1. The venv. Its own site-packages first, then the machine python's, with their .pth files processed
#    (site.addsitedir): --system-site-packages alone would show the base interpreter's, which is not the
#    machine's environment when its python3 is a venv.
say "virtual environment $VENV"
"$PY" -m venv --without-pip --system-site-packages "$VENV" >>"$LOG" 2>&1 || no_report "python3 -m venv failed"
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" - "$SITE" <<'EOF' >>"$LOG" 2>&1 || no_report "cannot write the .pth of the machine's packages"
import site, sys
dirs = [d for d in site.getsitepackages() + [site.getusersitepackages()] if d and d != sys.argv[1]]
lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)
open(f"{sys.argv[1]}/_vdk_gpu_check_machine.pth", "w").write(lines)
print("machine site-packages:", dirs)
EOF
"$VENV/bin/python" -c 'import torch, pip; print("torch", torch.__version__, "cuda", torch.version.cuda)' >>"$LOG" 2>&1 \
  || no_report "the venv does not see the machine's torch and pip"

# 2. The carried wheels: the project's own (always this one, over any installed), then what it needs, resolved
#    against what the machine has; if that resolution fails, every carried wheel as it is (they are all
#    packages the machine lacks) and `pip check` says what does not fit.
say "installing the carried wheels ($(ls "$CARRY/wheels" | wc -l) files, $(du -sh "$CARRY/wheels" | cut -f1))"
"$VENV/bin/python" -m pip install -q --no-index --no-deps --force-reinstall --no-cache-dir \
  "$CARRY"/wheels/vdk_ml_training-*.whl >>"$LOG" 2>&1 || no_report "pip could not install the project's wheel"
if ! "$VENV/bin/python" -m pip install -q --no-index --find-links "$CARRY/wheels" --no-cache-dir vdk-ml-training \
  >>"$LOG" 2>&1; then
  say "resolving against the machine's packages failed (above); installing every carried wheel as it is"
  "$VENV/bin/python" -m pip install -q --no-index --no-deps --no-cache-dir "$CARRY"/wheels/*.whl >>"$LOG" 2>&1 \
    || no_report "pip could not install the carried wheels"
fi
"$VENV/bin/python" -m pip check >>"$LOG" 2>&1 || say "pip check found conflicts (above); going on"
if [ ! -x "$VENV/bin/vdk" ]; then  # vdk-core came from the machine's packages: its entry point, in this venv
  printf '#!%s\nimport sys\nfrom vdk.internal.cli_entry import main\nsys.exit(main())\n' "$VENV/bin/python" >"$VENV/bin/vdk"
  chmod +x "$VENV/bin/vdk"
fi
"$VENV/bin/vdk" --help >/dev/null 2>>"$LOG" || no_report "vdk does not start in the venv"

# 3. The check, with what is left: it keeps its own deadline; `timeout` stops it if it overruns anyway.
LEFT=$((BUDGET - ($(date +%s) - START) - 10))
[ "$LEFT" -gt 60 ] || no_report "the set-up left ${LEFT} s of ${BUDGET} s for the check"
say "the check: $LEFT s"
timeout -k 10 "$((LEFT + 5))" "$VENV/bin/python" -m functional_tests.gpu.check --out "$OUT" --seconds "$LEFT" "$@" \
  > >(tee "$OUT/check.log") 2>&1
CODE=$?
[ -s "$OUT/gpu-report.json" ] || no_report "the check ended ($CODE) before its first report"
[ "$CODE" -eq 124 ] && say "the check overran its time and was stopped: its report holds the parts it finished"
say "done ($CODE): $OUT/gpu-report.txt"
exit "$CODE"
