"""S3 keys as the paths they land on (datafetch/s3_source.py): normalised as a file system reads them, and every
way two keys land on one path, or a key on none, refused naming the keys (moto: tests/integration/datafetch)."""

from __future__ import annotations

import pytest

from vdk.plugin.ml_training.datafetch.s3_source import S3Object
from vdk.plugin.ml_training.datafetch.s3_source import check_paths
from vdk.plugin.ml_training.datafetch.s3_source import local_path
from vdk.plugin.ml_training.datafetch.source_errors import SourceError


@pytest.mark.parametrize(
    ("key", "path"),
    [("d/c.txt", "d/c.txt"), ("d/./c.txt", "d/c.txt"), ("d//c.txt", "d/c.txt"), ("./c", "c"), ("/c", "c"),
     ("a/../b", "b"), ("../x", ""), ("a/../../x", ""), (".", ""), ("..", "")],
)  # fmt: skip
def test_a_key_is_the_path_a_file_system_gives_it(key, path):
    assert local_path(key) == path


def objects(*keys: str) -> list[S3Object]:
    return [S3Object(key, 1, '"e"') for key in keys]


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        (("d/c.txt", "d/./c.txt"), ["'d/c.txt' and 'd/./c.txt'", "land on one file, data/d/c.txt"]),
        (("a/b", "a/x/../b"), ["'a/b' and 'a/x/../b'"]),
        (("d/c", "d/c/x"), ["'d/c' of s3://b/p is a file where the key 'd/c/x' needs a directory"]),
        (("ok", "../../etc/passwd"), ["leads out of its directory: '../../etc/passwd'"]),
    ],
)
def test_keys_that_alias_are_refused_naming_them(keys, words):
    with pytest.raises(SourceError) as caught:
        check_paths(objects(*keys), "data", "s3://b/p")
    for word in words:
        assert word in caught.value.problem, caught.value.problem
    assert "s3://b/p/" in caught.value.fix


def test_keys_of_their_own_paths_pass():
    check_paths(objects("a/b.txt", "a/c.txt", "b", "c/d/e"), "data", "s3://b/p")
