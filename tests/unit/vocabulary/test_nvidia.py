"""NVIDIA's names, read once for every room: the MIG profile grammar, a slice's share of its GPU, the resources."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.vocabulary import nvidia


def test_the_mig_grammar_takes_compute_instances_and_media_engines():
    assert nvidia.MIG_PROFILE.match("1g.10gb") and nvidia.MIG_PROFILE.match("1c.2g.20gb+me")
    assert not nvidia.MIG_PROFILE.match("10gb") and not nvidia.MIG_PROFILE.match("1g.10gb+x")
    assert nvidia.mig_name("1c.3g.40gb+me") == nvidia.MigName(compute=1, slices=3, gigabytes=40, media=True)
    assert nvidia.mig_name("3g.40gb") == nvidia.MigName(compute=3, slices=3, gigabytes=40, media=False)
    assert nvidia.mig_name("3g.40") is None


@pytest.mark.parametrize(
    "profile, share",
    [("1g.10gb", 1 / 7), ("7g.80gb", 1), ("1c.3g.40gb", 1 / 7), ("2g.12gb", 2 / 4), ("1g.6gb+me", 1 / 4)],
)
def test_a_slice_is_its_compute_slices_share_of_its_gpu(profile, share):
    assert nvidia.mig_name(profile).share == pytest.approx(share)


def test_a_slice_s_resource_names_its_profile_and_is_read_back():
    resource = nvidia.mig_resource("1g.10gb")
    assert resource == "nvidia.com/mig-1g.10gb" and nvidia.mig_profile_of(resource) == "1g.10gb"
    assert nvidia.mig_profile_of(nvidia.GPU_RESOURCE) is None and nvidia.mig_profile_of(None) is None
    assert nvidia.mig_profile_of("example.com/mig-1g.10gb") is None  # another vendor's, not NVIDIA's slice


def test_every_model_s_profiles_are_valid_and_fit_the_gpu():
    for label, _, profiles in nvidia.PROFILES_BY_MODEL:
        for profile in profiles:
            name = nvidia.mig_name(profile.name)
            assert name is not None and name.slices == profile.slices <= nvidia.SLICES, (label, profile)
        assert profiles[-1].slices == nvidia.SLICES, label  # the whole GPU's profile ends each table
