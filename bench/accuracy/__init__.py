"""Test accuracy on Planetoid through the real ``gblas-gnn`` command (:mod:`.planetoid`, run as
``python bench/accuracy/planetoid.py --root DIR``).
"""
