"""Property-based tests: whatever config.ini holds, the parser returns a valid spec or raises
JobConfigError — never a raw traceback of another type."""

import string

from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import KEYS
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.units import parse_quantity

# Values that are close to valid ones, so the fuzzer reaches deep into each key's checks.
interesting_values = st.one_of(
    st.sampled_from(
        [
            "0",
            "1",
            "2:8",
            "8:2",
            "1g.10gb",
            "16Gi",
            "0.5",
            "1e3",
            "1e999999999999",
            "-1",
            "12h",
            "1h30m",
            "auto",
            "job",
            "train.py",
            "-m pkg.mod",
            "-m",
            "'",
            '"a b"',
            "",
            " ",
            "%(x)s",
            "localhost:5000/x",
            "Gi",
        ]
    ),
    st.text(alphabet=string.printable.replace("\r", "").replace("\n", ""), max_size=30),
)
keys = st.one_of(st.sampled_from(sorted(KEYS)), st.text(alphabet=string.ascii_letters + "_-", min_size=1, max_size=15))


def render(pairs, env_pairs, raw_tail):
    lines = ["[job]", "type = ml-training", "[ml-training]"]
    lines += [f"{k} = {v}" for k, v in pairs]
    if env_pairs:
        lines.append("[ml-training.env]")
        lines += [f"{k} = {v}" for k, v in env_pairs]
    return "\n".join(lines) + "\n" + raw_tail


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pairs=st.lists(st.tuples(keys, interesting_values), max_size=6),
    env_pairs=st.lists(
        st.tuples(st.text(string.ascii_letters + "_0", min_size=1, max_size=8), interesting_values), max_size=3
    ),
    raw_tail=st.text(max_size=40),
)
def test_parser_returns_spec_or_raises_its_own_error(tmp_path, pairs, env_pairs, raw_tail):
    job = tmp_path / "fuzz-job"
    job.mkdir(exist_ok=True)
    (job / "train.py").write_text('if __name__ == "__main__":\n    pass\n')
    (job / "pkg").mkdir(exist_ok=True)
    (job / "pkg" / "mod.py").write_text("")
    (job / "config.ini").write_text(render(pairs, env_pairs, raw_tail), encoding="utf-8")
    try:
        spec = load_job_spec(job)
    except JobConfigError as e:
        assert str(e).startswith(str(job))
        assert "Fix: " in str(e)
        return
    assert isinstance(spec, MLJobSpec)
    assert spec.nodes.min >= 1 and spec.nodes.max >= spec.nodes.min
    assert spec.procs_per_node >= 1 and spec.smoke_steps >= 1 and spec.smoke_processes >= 1
    assert 0 < parse_quantity(spec.shm_size) <= parse_quantity(spec.memory)
    assert (job / spec.entrypoint.target).is_file() or spec.entrypoint.is_module
    spec.fingerprint()  # always serialisable
