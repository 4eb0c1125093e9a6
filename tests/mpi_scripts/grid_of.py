"""Build the grid over COMM_WORLD (fails unless the process count is a square)."""

from gblas_gnn import dist

print(dist.Grid(), flush=True)
