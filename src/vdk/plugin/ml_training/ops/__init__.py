"""Use cases: click-free functions that take a spec (or a selection) and return data, raising MLTrainingError.
The Python API of the plugin; `cli/` declares flags, calls one of them and renders what it returns."""
