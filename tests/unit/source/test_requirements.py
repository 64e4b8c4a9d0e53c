"""requirements.txt read one way for every room: names by packaging (PEP 503, extras, markers), continued lines,
includes followed once, options and URLs told apart."""

from __future__ import annotations

from vdk.plugin.ml_training.source.requirements import RequirementsFile
from vdk.plugin.ml_training.source.requirements import is_distribution_name
from vdk.plugin.ml_training.source.requirements import requirement_name


def test_names_extras_continuations_urls_and_options(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text(
        "Transformers[torch,sentencepiece]>=4 \\\n  ; python_version >= '3.10'\n"
        "-e git+https://example.com/x.git#egg=My_Package\n# comment\n--extra-index-url https://x\n"
        "https://example.com/wheels/Some_Thing-1.0-py3-none-any.whl\n"
        "numpy==2.1.0 --hash=sha256:0123  # pinned\n./local/path\n"
    )
    found = RequirementsFile.read(path)
    assert found.names == {
        "transformers": {"torch", "sentencepiece"},
        "my-package": set(),
        "some-thing": set(),
        "numpy": set(),
    }
    assert found.options == ("--extra-index-url https://x",) and found.unnamed == ("./local/path",)
    assert len(found.lines) == 6  # the continued line is one, the comment none
    assert found.lists("TRANSFORMERS") and not found.lists("torch")
    assert RequirementsFile.read(None).names == {} and RequirementsFile.read(tmp_path / "none.txt").lines == ()


def test_includes_are_followed_once_relative_to_the_file_that_names_them(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.txt").write_text("torch>=2\n-r ../requirements.txt\n")  # a circle: read once
    (tmp_path / "extra.txt").write_text("pyyaml\n")
    path = tmp_path / "requirements.txt"
    path.write_text("-r sub/base.txt\n--requirement=extra.txt\nnumpy\n")
    found = RequirementsFile.read(path)
    assert set(found.names) == {"torch", "pyyaml", "numpy"}
    assert found.lines == ("-r sub/base.txt", "--requirement=extra.txt", "numpy")  # its own lines, as written
    assert found.options == ()  # an include is no option


def test_a_file_asks_only_for_what_is_provided_unless_an_option_or_an_unknown_line_says_more(tmp_path):
    path = tmp_path / "requirements.txt"
    path.write_text("torch>=2\nTorch==2.13.0 ; python_version > '3'\n")
    assert RequirementsFile.read(path).only(("torch",))
    path.write_text("torch\n--extra-index-url https://download.pytorch.org/whl/cpu\n")
    assert not RequirementsFile.read(path).only(("torch",))
    path.write_text("torch\ntorchvision\n")
    assert not RequirementsFile.read(path).only(("torch",))
    (tmp_path / "more.txt").write_text("torchvision\n")
    path.write_text("torch\n-r more.txt\n")
    assert not RequirementsFile.read(path).only(("torch",))  # what the include asks for counts too
    assert RequirementsFile.read(path).only(("torch", "TorchVision"))


def test_one_requirement_s_name_and_valid_distribution_names():
    assert requirement_name("Torch[cuda]>=2 ; python_version > '3'") == "torch"
    assert requirement_name("nvidia-ml-py==13.0.0") == "nvidia-ml-py" and requirement_name("not valid ===") is None
    assert is_distribution_name("zope.interface") and is_distribution_name("a")
    assert not is_distribution_name("-torch") and not is_distribution_name("torch-") and not is_distribution_name("")
