"""The distributed studies, each an MPI job of workers: the ``dist`` executor against one
process (:mod:`.executor`, ``python -m bench dist``; worker :mod:`.executor_worker`), words sent
per rank against the bound (:mod:`.comm`, ``python -m bench comm``; worker
:mod:`.comm_worker`) and training at scale on a grid (:mod:`.scale`, ``python -m bench
scale``); beside them, no MPI: the planning table and plot of ``docs/planning.md``
(:mod:`.planning_plot`, ``python -m bench.distributed.planning_plot``) and the planned memory
against the memory study's measurements (:mod:`.memory_validation`).
"""
