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


@pytest.fixture(autouse=True)
def _one_evaluation_episode(request):
    """Tests train budgets of a few hundred steps; the end-of-run evaluation they get is one episode
    (Ant's or MountainCar's ten take 10,000 env steps, most of such a test's time). A test of the
    default's ten marks itself ``default_evaluation``; a run in a subprocess keeps the default."""
    if request.node.get_closest_marker("default_evaluation"):
        yield
        return
    from rlhls.host.hyperparams import HyperParams

    field = HyperParams.__dataclass_fields__["eval_episodes"]
    default, field.default = field.default, 1
    try:
        yield
    finally:
        field.default = default
