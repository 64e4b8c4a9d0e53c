"""What ran after training, as the summary names it: a push to the Hub counted once it reached its network call, and
the save it made of what it would upload is the push's, not a save of the script's; a push that raised is none."""

from vdk.plugin.ml_training.runtime.after_training import Phase


def test_a_push_counts_once_with_its_own_save_inside_it():
    phase = Phase()
    with phase.pushing():
        with phase.saving():  # save_pretrained inside push_to_hub
            pass
        phase.saved()  # a file saver under it
    phase.saved()  # the script's own torch.save after it
    assert phase.items() == ("1 save", "1 Hub push (checked up to the network call)")


def test_a_push_that_raised_is_not_counted():
    phase = Phase()
    try:
        with phase.pushing():
            raise OSError("No space left on device")
    except OSError:
        pass
    assert phase.items() == ()
    other = Phase()
    with other.pushing():
        pass
    with other.pushing():
        pass
    phase.take(other)
    assert phase.items() == ("2 Hub pushes (checked up to the network call)",) and other.items() == ()
