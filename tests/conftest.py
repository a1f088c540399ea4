import os

# Two xdist workers on two cores: multi-threaded BLAS in each makes QR/matmul 20-50x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


import pytest  # noqa: E402


@pytest.fixture
def csim_calls(monkeypatch):
    """The kernel names of every CsimBackend call in the test, in order (the backend still runs)."""
    from rlhls.host import backends

    calls = []
    real = backends.CsimBackend.call

    def counting(self, kernel, params, **arrays):
        calls.append(kernel)
        return real(self, kernel, params, **arrays)

    monkeypatch.setattr(backends.CsimBackend, "call", counting)
    return calls
