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


@pytest.fixture
def local_ray():
    """A local Ray instance of 2 CPUs, started by the first of consecutive tests that ask for it and
    shut down after the last (``pytest_runtest_teardown``); the engine uses an instance it finds as it
    is. Those tests run first (``pytest_collection_modifyitems``): one start instead of one a test, on
    one xdist worker. (test_experiments' Table III smoke test starts the engine's own instance.)"""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray


def pytest_collection_modifyitems(items):
    # stable: the tests that share the Ray instance first, in their order, then the others in theirs
    items.sort(key=lambda item: "local_ray" not in getattr(item, "fixturenames", ()))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    if "local_ray" in getattr(item, "fixturenames", ()) and \
            (nextitem is None or "local_ray" not in getattr(nextitem, "fixturenames", ())):
        import ray

        ray.shutdown()
