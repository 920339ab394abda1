"""miocore's own OpenBLAS running its parallel work on OpenMP teams
(miocore.backends.cpu_gemm_openmp): products right against float64, every product of two or
more jobs through the callback, one product at a time, the settings that keep OpenBLAS's own
threads, and no hang where a team is larger than the machine."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from miocore import InvalidEnvironmentError
from miocore.backends import cpu_blas, cpu_gemm, cpu_gemm_openmp

pytest.importorskip("numba")

RNG = np.random.default_rng(20261128)

_JOB_CALLBACK = ctypes.CFUNCTYPE(
    None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p,
    ctypes.c_int,
)  # fmt: skip


def _own_loads() -> bool:
    return cpu_gemm.coretype_for(cpu_blas.cpu_flags()) is not None and (
        cpu_gemm._wheel_library() is not None
    )


@pytest.fixture
def teams(monkeypatch: pytest.MonkeyPatch) -> cpu_gemm.OwnOpenBlas:
    """The own OpenBLAS on OpenMP teams of two, for products of any size."""
    if not _own_loads():
        pytest.skip("no AVX-512 CPU or scipy-openblas32 here")
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_DYNAMIC", "OMP_THREAD_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MIOCORE_CPU_BLAS", "openblas")
    monkeypatch.setenv("MIOCORE_CPU_BLAS_THREADS", "openmp")
    monkeypatch.setattr(cpu_gemm, "_chosen", None)
    lib = cpu_gemm.own_blas()
    assert lib is not None
    if lib.openmp is None:
        pytest.skip("numba's GNU OpenMP runtime is not available here")
    lib.set_threads(2)
    yield lib
    monkeypatch.setattr(cpu_gemm, "_chosen", None)  # the next test loads afresh


class _Spy:
    """Counts the jobs OpenBLAS hands to the callback, then runs them there."""

    def __init__(self, lib: cpu_gemm.OwnOpenBlas) -> None:
        self.jobs: list[int] = []
        self._real = _JOB_CALLBACK(lib.openmp.address)
        self._own = _JOB_CALLBACK(self._call)
        self._hook = ctypes.CDLL(lib.path).scipy_openblas_set_threads_callback_function
        self._hook.argtypes = [ctypes.c_void_p]
        self._restore = lib.openmp.address

    def _call(self, sync: int, dojob: int, count: int, size: int, data: int, arg: int) -> None:
        self.jobs.append(count)
        self._real(sync, dojob, count, size, data, arg)

    def __enter__(self) -> _Spy:
        self._hook(ctypes.cast(self._own, ctypes.c_void_p).value)
        return self

    def __exit__(self, *exc: object) -> None:
        self._hook(self._restore)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray, k: int) -> bool:
    return bool(np.allclose(got, want, rtol=1e-5, atol=2e-6 * np.sqrt(k) * 8))


@pytest.mark.parametrize(("m", "n", "k"), [(3136, 64, 64), (784, 128, 512), (197, 301, 1000)])
def test_products_run_as_teams_and_match_float64(
    teams: cpu_gemm.OwnOpenBlas, m: int, n: int, k: int
) -> None:
    for trans_a, trans_b, beta in [(False, False, 0.0), (True, False, 1.0), (False, True, 0.5)]:
        a = _r(k, m).T if trans_a else _r(m, k)
        b = _r(n, k).T if trans_b else _r(k, n)
        c = _r(m, n)
        want = a.astype(np.float64) @ b.astype(np.float64) + beta * c.astype(np.float64)
        with _Spy(teams) as spy:
            cpu_gemm.gemm(a, b, c, beta)
        assert spy.jobs and max(spy.jobs) == 2, spy.jobs
        assert _close(c, want, k), (m, n, k, trans_a, trans_b, beta)


def test_strided_batches_run_as_teams_and_match_float64(teams: cpu_gemm.OwnOpenBlas) -> None:
    a, b = _r(16, 64, 512), _r(16, 512, 256)
    out = np.empty((16, 64, 256), np.float32)
    with _Spy(teams) as spy:
        cpu_gemm.matmul(a, b, out)
    assert spy.jobs
    assert _close(out, a.astype(np.float64) @ b.astype(np.float64), 512)


def test_the_same_bits_as_on_openblas_own_threads(
    teams: cpu_gemm.OwnOpenBlas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenBLAS splits a product the same way on either threads: the results are identical."""
    a, b = _r(1000, 300), _r(300, 200)
    on_teams = np.empty((1000, 200), np.float32)
    cpu_gemm.gemm(a, b, on_teams)
    monkeypatch.setenv("MIOCORE_CPU_BLAS_THREADS", "openblas")
    lib = cpu_gemm.own_blas()
    assert lib is not None and lib.openmp is None
    lib.set_threads(2)
    on_pool = np.empty_like(on_teams)
    cpu_gemm.gemm(a, b, on_pool)
    assert np.array_equal(on_teams, on_pool)


def test_callers_on_several_threads_each_get_their_own_product(
    teams: cpu_gemm.OwnOpenBlas,
) -> None:
    """OpenBLAS gives every product's jobs the same per-thread buffers: products from several
    Python threads must go through one at a time, and each must come out right."""
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((600, 256)).astype(np.float32)
        b = rng.standard_normal((256, 300)).astype(np.float32)
        c = np.empty((600, 300), np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        for _ in range(15):
            cpu_gemm.gemm(a, b, c)
            if not _close(c, want, 256):
                errors.append(f"caller {seed}")

    callers = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=120)
    assert not errors
    assert not any(caller.is_alive() for caller in callers)


@pytest.mark.parametrize(
    ("settings", "on_teams"),
    [
        ({"OMP_WAIT_POLICY": "passive"}, False),
        ({"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}, True),
        ({"OMP_DYNAMIC": "true"}, False),
        ({"OMP_THREAD_LIMIT": "4"}, False),
        ({"MIOCORE_CPU_BLAS_THREADS": "openblas"}, False),
        ({"MIOCORE_CPU_BLAS_THREADS": "auto"}, True),
    ],
)
def test_settings_that_keep_openblas_threads(
    teams: cpu_gemm.OwnOpenBlas,
    monkeypatch: pytest.MonkeyPatch,
    settings: dict[str, str],
    on_teams: bool,
) -> None:
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cpu_gemm, "_chosen", None)
    lib = cpu_gemm.own_blas()
    assert lib is not None
    assert (lib.openmp is not None) == on_teams
    lib.set_threads(2)
    a, b = _r(800, 256), _r(256, 128)
    c = np.empty((800, 128), np.float32)
    cpu_gemm.gemm(a, b, c)
    assert _close(c, a.astype(np.float64) @ b.astype(np.float64), 256)


def test_a_bad_threads_choice_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _own_loads():
        pytest.skip("no AVX-512 CPU or scipy-openblas32 here")
    monkeypatch.setenv("MIOCORE_CPU_BLAS", "openblas")
    monkeypatch.setenv("MIOCORE_CPU_BLAS_THREADS", "gomp")
    monkeypatch.setattr(cpu_gemm, "_chosen", None)
    with pytest.raises(InvalidEnvironmentError) as info:
        cpu_gemm.own_blas()
    assert "MIOCORE_CPU_BLAS_THREADS" in str(info.value) and "gomp" in str(info.value)
    monkeypatch.setattr(cpu_gemm, "_chosen", None)


def test_more_jobs_than_cores_finish() -> None:
    """A team is sized to the product's jobs, not to the machine: four jobs on fewer cores
    still all run at once and finish (a fresh process, under a time limit, in case they do not)."""
    if not _own_loads():
        pytest.skip("no AVX-512 CPU or scipy-openblas32 here")
    script = (
        "import os\n"
        "os.environ.update(MIOCORE_CPU_BLAS='openblas', MIOCORE_CPU_BLAS_THREADS='openmp')\n"
        "import numpy as np\n"
        "from miocore.backends import cpu_gemm\n"
        "lib = cpu_gemm.own_blas()\n"
        "assert lib.openmp is not None\n"
        "lib.set_threads((os.cpu_count() or 1) + 2)\n"
        "a = np.random.rand(2000, 300).astype(np.float32)\n"
        "b = np.random.rand(300, 400).astype(np.float32)\n"
        "c = np.empty((2000, 400), np.float32)\n"
        "for _ in range(5):\n"
        "    cpu_gemm.gemm(a, b, c)\n"
        "print(float(np.abs(c - a.astype(np.float64) @ b).max()))\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_WAIT_POLICY", "OMP_DYNAMIC", "OMP_THREAD_LIMIT")
    }
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 1e-2


def test_uninstall_gives_the_library_its_threads_back(teams: cpu_gemm.OwnOpenBlas) -> None:
    a, b = _r(1000, 256), _r(256, 256)
    c = np.empty((1000, 256), np.float32)
    with _Spy(teams) as spy:  # leaving it installs the real callback again
        cpu_gemm_openmp.uninstall(teams.path)
        cpu_gemm.gemm(a, b, c)
    assert not spy.jobs
    assert _close(c, a.astype(np.float64) @ b.astype(np.float64), 256)
