"""The embedding model: which one, where its files are, how it runs.

* ``models``: the model registry (``get_model``, ``spec_for``), the torch
  backend, the embedding cache (``embed_with_cache``).
* ``onnx``: the ONNX backends (``onnx``, ``onnx-int8``), exported once.
* ``base``: the types both share.
"""
