"""The console script's entry point on a grid where rank 2 hits an error nothing catches
(run with plain ``python``, not ``python -m mpi4py``): the command's own hook must abort the
whole job instead of leaving the other ranks waiting."""

import sys

from mpi4py import MPI

from gblas_gnn.cli import command


def failing_train(args):
    MPI.COMM_WORLD.Barrier()
    if MPI.COMM_WORLD.Get_rank() == 2:
        raise RuntimeError("rank 2 gives up inside the command")
    MPI.COMM_WORLD.Barrier()                    # the others would wait here for ever
    print(f"rank {MPI.COMM_WORLD.Get_rank()} reached the end")   # none must


command._train = failing_train
sys.exit(command.main(["train", "--executor", "dist", "--no-progress"]))
