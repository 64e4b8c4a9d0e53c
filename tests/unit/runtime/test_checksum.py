"""Parameter checksums in this process: the digest covers every parameter an optimizer stepped, once, and
changes with any of them; nothing stepped prints no line; the lines read back among other output.
(Ranks under torchrun printing them: tests/integration/runtime/test_checksum_ranks.py.)"""

from __future__ import annotations

import torch

from vdk.plugin.ml_training.runtime.checksum import Checksum
from vdk.plugin.ml_training.runtime.checksum import ParameterChecksum
from vdk.plugin.ml_training.runtime.checksum import format_line
from vdk.plugin.ml_training.runtime.checksum import parse_checksums
from vdk.plugin.ml_training.runtime.steps import StepCounter


def test_the_digest_covers_every_stepped_parameter_once_and_changes_with_any():
    def digest(seed: int, poke: bool = False) -> Checksum:
        torch.manual_seed(seed)
        model = torch.nn.Linear(3, 2)
        counter = StepCounter().install()
        try:
            checksum = ParameterChecksum().attach(counter)
            # the same parameters in two optimizers count once
            first = torch.optim.SGD(model.parameters(), lr=0.1)
            second = torch.optim.SGD([model.weight], lr=0.1)
            for optimizer in (first, second):
                model(torch.ones(1, 3)).sum().backward()
                optimizer.step()
            if poke:
                with torch.no_grad():
                    model.bias[0] += 1e-7
            return checksum.take(rank=0)
        finally:
            counter.uninstall()

    a, b = digest(1), digest(1)
    assert a == b and a.tensors == 2 and a.steps == 2  # each optimizer stepped on a backward of its own
    assert digest(1, poke=True).sha256 != a.sha256
    assert digest(2).sha256 != a.sha256
    assert ParameterChecksum().take(0) is None  # nothing stepped: no line


def test_lines_read_back_among_other_output():
    line = format_line(Checksum(3, 32, "ab" * 32, 4))
    other = format_line(Checksum(1, 32, "cd" * 32, 4))
    found = parse_checksums(["epoch 0 loss 1.0", f"[rank3]: {line}", "[vdk-ml-training] parameters rank=x"])
    assert found == {3: Checksum(3, 32, "ab" * 32, 4)}
    assert sorted(parse_checksums([line + other])) == [1, 3]  # two processes' output on one line
