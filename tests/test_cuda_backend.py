"""The CUDA C++ backend on a machine without a GPU: sources are compiled (nvcc and g++ are here), nothing runs.

One real successful build in the whole suite (`solutions_cuda/level1/01_relu.py`: about 1 min with nvcc on an
idle 2-core machine, 4 min and more on a loaded one); the second evaluation of the same source must come from the
build cache (seconds). Compile errors must come back as `compile_error` with nvcc's `file(line): error` line,
trimmed. The limits here are generous on purpose (30 min, against the 240 s default build step): what is tested
is the build and its cache, never how busy the machine is.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelsmith.backends import BACKEND_NAMES, get_backend
from kernelsmith.backends.cuda import (
    CudaSourceError,
    extract_specs,
    global_kernel_names,
    spec_digest,
    trim_compiler_output,
)
from kernelsmith.referee.evaluation import EvalOptions, evaluate
from kernelsmith.referee.verdict import Status

ROOT = Path(__file__).parent.parent
CANDIDATES = Path(__file__).parent / "candidates"
TASK = CANDIDATES / "task_relu.py"
RELU_CUDA = ROOT / "solutions_cuda" / "level1" / "01_relu.py"
HAVE_NVCC = bool(shutil.which("nvcc") or Path("/usr/local/cuda/bin/nvcc").exists()) and bool(shutil.which("g++"))
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc/g++ not installed")


def _opts(cache: Path, **kw) -> EvalOptions:
    return EvalOptions(device="cpu", backend="cuda", timeout_s=1800, compile_timeout_s=1800, build_cache_dir=str(cache),
                       **kw)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The module's evaluations, run concurrently: the one good build (then again, cached) and a bad one."""
    cache = tmp_path_factory.mktemp("cuda-cache")

    def timed(cand: Path):
        t0 = time.monotonic()
        return evaluate(TASK, cand, _opts(cache)), time.monotonic() - t0

    with ThreadPoolExecutor(2) as ex:
        good = ex.submit(timed, RELU_CUDA)
        bad = ex.submit(timed, CANDIDATES / "cuda_syntax.py")
        first = good.result()
        again = timed(RELU_CUDA)
        return {"first": first, "again": again, "syntax": bad.result(), "cache": cache}


def test_backends_registered() -> None:
    assert BACKEND_NAMES == ("triton", "cuda")
    assert get_backend("triton").guard_name == "no_triton_kernel"
    assert get_backend("cuda").guard_name == "no_custom_kernel"
    assert "load_inline" in get_backend("cuda").prompt_notes
    with pytest.raises(ValueError, match="backend"):
        get_backend("hip")
    with pytest.raises(ValueError, match="backend"):
        EvalOptions(backend="hip").validate()


def test_extract_reads_kernelbench_format() -> None:
    specs = extract_specs(RELU_CUDA.read_text())
    assert [s["name"] for s in specs] == ["kernelsmith_relu"]
    assert specs[0]["functions"] == [("relu_forward", "")]
    assert "relu_kernel" in global_kernel_names(specs[0]["cuda_sources"])
    assert spec_digest(specs[0], "objects") != spec_digest(specs[0], "full")


@pytest.mark.parametrize("snippet, message", [
    ('load_inline(name="x", cpp_sources="", cuda_sources=make(), functions=["f"])', "not a literal"),
    ('load_inline(name="x", cpp_sources="", cuda_sources="k", functions=["f"], extra_cuda_cflags=["-o/tmp/x"])',
     "not allowed"),
    ('load_inline(name="x", cpp_sources="", cuda_sources="k", functions=["f"], extra_ldflags=["-lfoo"])',
     "not allowed"),
    ('load_inline(**args)', "by name"),
    ('x = 1', "no `load_inline"),
])
def test_extract_refuses(snippet: str, message: str) -> None:
    with pytest.raises(CudaSourceError, match=message):
        extract_specs("from torch.utils.cpp_extension import load_inline\n" + snippet + "\n")


def test_trim_keeps_error_lines_only() -> None:
    noise = "\n".join(f"/x/site-packages/torch/include/c10/foo.h({i}): warning #3306-D: blah" for i in range(300))
    text = noise + "\n/tmp/b/build-x/cuda.cu(7): error: expected a \";\"\n      if (i < n)\n      ^\n" + noise
    out = trim_compiler_output(text, "/tmp/b/build-x")
    assert out.startswith('cuda.cu(7): error: expected a ";"')
    assert len(out) < 300


def test_nonliteral_sources_are_a_clear_compile_error(tmp_path: Path) -> None:
    v = evaluate(TASK, CANDIDATES / "cuda_nonliteral.py", _opts(tmp_path))
    assert v.status is Status.COMPILE_ERROR
    assert "not a literal" in v.error and "cuda_sources" in v.error
    assert "compiled" not in v.timing.get("build", {}) or not v.timing["build"]["compiled"]  # refused before nvcc


@needs_nvcc
def test_syntax_error_reports_nvcc_line(builds: dict) -> None:
    v, _ = builds["syntax"]
    assert v.status is Status.COMPILE_ERROR, v.error
    assert "cuda.cu(" in v.error and "error" in v.error, v.error
    assert 'expected a ";"' in v.error, v.error
    assert len(v.error) <= 1600 and v.error.count("\n") < 20, v.error
    assert "site-packages" not in v.error


@needs_nvcc
def test_valid_candidate_compiles_and_needs_gpu(builds: dict) -> None:
    v, seconds = builds["first"]
    assert v.status is Status.RUNTIME_ERROR, (v.error, v.log)
    assert "compiled" in v.error and "need a GPU" in v.error and "--device cuda" in v.error
    assert v.timing["build"]["cached"] is False and v.timing["build"]["compiled"] == ["kernelsmith_relu"]
    assert v.timing["build"]["mode"] == "objects"
    print(f"first build {seconds:.1f} s")


@needs_nvcc
def test_second_evaluation_hits_the_cache(builds: dict) -> None:
    v, seconds = builds["again"]
    first_s = builds["first"][1]
    assert v.status is Status.RUNTIME_ERROR
    assert v.timing["build"]["cached"] is True and v.timing["build"]["compiled"] == []
    assert "from the build cache" in v.error
    assert seconds < first_s, (seconds, first_s)  # no compiler ran (the build info above says so); no fixed bound
    entries = [p for p in builds["cache"].iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1 and (entries[0] / "ok.json").exists()


CUDA_PROGRAM = '''
import torch
from torch.utils.cpp_extension import load_inline

# EVOLVE-BLOCK-START
src = r"""
#define BLOCK_SIZE 256
__global__ void k(float* y) {}
torch::Tensor f(torch::Tensor x) {
    const int threads = 128;
    k<<<(x.numel() + threads - 1) / threads, threads>>>(x.data_ptr<float>());
    k<<<blocks, 512>>>(x.data_ptr<float>());
    return x;
}
"""
ext = load_inline(name="e", cpp_sources="torch::Tensor f(torch::Tensor x);", cuda_sources=src, functions=["f"])
# EVOLVE-BLOCK-END
'''


def test_tuner_finds_cuda_launch_knobs() -> None:
    import random

    from kernelsmith.workshop.offline.mutate import knobs, mutate, set_knobs

    found = {k.name: k.value for k in knobs(CUDA_PROGRAM)}
    assert found == {"cuda.BLOCK_SIZE": 256, "cuda.threads": 128, "cuda.launch": 512}
    edited = set_knobs(CUDA_PROGRAM, {"cuda.BLOCK_SIZE": 512, "cuda.launch": 1024})
    assert "#define BLOCK_SIZE 512" in edited and "<<<blocks, 1024>>>" in edited
    m = mutate(CUDA_PROGRAM, random.Random(0), n_changes=3)
    assert len(m.changes) == 3 and m.source != CUDA_PROGRAM
    assert extract_specs(m.source)[0]["name"] == "e"  # still a valid cuda candidate
    assert knobs(RELU_CUDA.read_text())[0].name == "cuda.THREADS"


def test_prompt_and_config_know_the_backend() -> None:
    from kernelsmith.workshop.config import ConfigError, load_config
    from kernelsmith.workshop.prompt import build_prompt

    cuda = build_prompt(task_name="t", reference="r", parent_code="c", parent_verdict=None, backend="cuda")
    triton = build_prompt(task_name="t", reference="r", parent_code="c", parent_verdict=None)
    assert "CUDA C++" in cuda.messages[0]["content"] and "load_inline" in cuda.messages[0]["content"]
    assert "@triton.jit" in triton.messages[0]["content"] and "load_inline" not in triton.messages[0]["content"]
    assert load_config(None, {"backend": "cuda"}).backend == "cuda"
    assert load_config(None, {}).backend == "triton"
    with pytest.raises(ConfigError, match="backend"):
        load_config(None, {"backend": "hip"})
