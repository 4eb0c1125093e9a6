"""The peer libraries' side of the layer study: where each of our weights sits in PyG's and
DGL's modules (:mod:`.mapping`), and DGL in an environment of its own (:mod:`.env`,
``python -m bench peers --setup``), run in a worker process (:mod:`.dgl_worker`,
:mod:`.dgl_layers`) that :mod:`.client` drives.
"""
