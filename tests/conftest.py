import os

# Two xdist workers on two cores: multi-threaded BLAS in each makes QR/matmul 20-50x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
