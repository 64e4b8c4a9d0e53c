"""Code that runs inside the training processes, locally and in job images.

Imports only the standard library, torch, transformers/accelerate (lazily) and other `runtime`
modules: the image builder ships this package on its own, without the rest of the plugin.
"""
