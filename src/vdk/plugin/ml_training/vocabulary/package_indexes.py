"""How several package indexes are searched for a job's requirements: the choices of `index_strategy` (a key of
[ml-training], job/keys.py) and uv's `--index-strategy` for each (dependencies/uv_install.py passes it to every
install: a local run's overlay, the image's dependency layer, a sweep's packages in it). Standard library only."""

from __future__ import annotations

# `best-match`: every index is searched and the best version wins, as pip does; `first-index`: a package comes only
# from the first index that has it (uv's default: a public index cannot shadow a private package's name).
INDEX_STRATEGIES = {"best-match": "unsafe-best-match", "first-index": "first-index"}
DEFAULT_INDEX_STRATEGY = "best-match"
