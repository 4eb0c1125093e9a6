"""The test files that run on every executor of a session: one list, read by
``conftest.py`` (which parametrizes their executor); and the part of it the cuda executor
runs, read by the simulator's sessions (``test_suite_on_executors.py``) and the GPU study
(``bench/gpu/suite.py``, which runs them with ``--executor cuda`` on a device)."""

EVERY_EXECUTOR = ("test_executor_conformance.py", "test_compose_kernels.py", "test_ops.py",
                  "test_virtual.py", "test_compose.py", "test_compose_rules.py",
                  "test_activations.py", "test_nn_*.py", "test_train_*.py")

#: The executor-neutral files written for device arrays as well as host ones (inputs moved
#: with the executor's ``asarray``, results read with ``to_numpy``): the cuda executor runs
#: these, in the simulator and on a GPU, beside ``tests/gpu``. The layer and training files
#: (``test_nn_*``, ``test_train_*``, ``test_activations``) write host arrays into parameters
#: and compare results as numpy arrays, which CuPy refuses; their cuda coverage is
#: ``tests/gpu``, which holds every layer, training step and checkpoint to the cpu executor.
ON_A_DEVICE = ("test_executor_conformance.py", "test_ops.py", "test_virtual.py",
               "test_compose.py", "test_compose_rules.py", "test_compose_kernels.py")
