"""Kernel studies: micro-benchmarks of the building blocks (:mod:`.micro`, ``python -m bench
kernels``) with the SuiteSparse kernels each runs (:mod:`.burble`), and the cuda executor's
kernels compiled and modelled without a GPU (:mod:`.cuda`, ``python -m bench cuda-kernels``).
"""
