"""The test files that run on every executor of a session: one list, read by
``conftest.py`` (which parametrizes their executor) and by the GPU study
(``bench/gpu/suite.py``, which runs them with ``--executor cuda`` on a device)."""

EVERY_EXECUTOR = ("test_executor_conformance.py", "test_compose_kernels.py", "test_ops.py",
                  "test_virtual.py", "test_compose.py", "test_compose_rules.py",
                  "test_activations.py", "test_nn_*.py", "test_train_*.py")
