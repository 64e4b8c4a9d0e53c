"""The plugin's vocabulary: each fact that more than one room needs, written once, at the bottom of the layers
so that every room imports it and none copies it. Standard library only, and nothing of the rest of the plugin:
it ships in every job image beside runtime/ and datafetch/ (image/runtime_layer.py), whose pods need it too.

- `wire`: the words of what crosses between vdk and a run's processes: the project's name, the `[vdk-ml-training]`
  prefix and the kind of each line after it (each line's format and reader live in one module, named there), the
  problem/fix text of a reported failure, the container's termination message, the plugin's environment
  variables' prefix and VDK's rule for a setting's variable;
- `nvidia`: NVIDIA's names a run meets: the device plugin's resources, GPU feature discovery's node label, the
  MIG profile grammar, a GPU's slices and the profiles of each GPU model;
- `local_cache`: where vdk caches what it builds and reads on this machine;
- `package_indexes`: how several package indexes are searched (`index_strategy`'s choices, uv's flag for each);
- `human_units`: sizes and counts as every message writes them (`4.5 KB`, `1 package`).
"""
