"""Compile a program's Triton kernels for an NVIDIA GPU on a machine without one (`tests/test_gpu_codegen.py`
runs it as a script; `kernelbench_sweep.py --gpu-codegen` uses `launch_spec` and `compile_all` on every seed).

Triton's interpreter, which runs the CPU tests, never lowers a kernel: a kernel can pass every CPU test and still
fail to compile for the GPU (a scalar the code generator cannot type, a constexpr branch that leaves a variable
undefined, a layout ptxas refuses). Triton compiles ahead of time for a named target with no device present, so:

    python benchmarks/gpu_codegen.py record TASK.py PROGRAM.py LAUNCHES.json   # TRITON_INTERPRET=1: run the program once
                                                                          # on the task's inputs, note every launch
    python benchmarks/gpu_codegen.py compile PROGRAM.py LAUNCHES.json [ARCH]   # no interpreter: compile each noted launch
                                                                          # (argument types, constexprs, num_warps,
                                                                          # num_stages) for cuda:ARCH (default 90)

    python benchmarks/gpu_codegen.py time PROGRAM.py LAUNCHES.json ARCH "BLOCK_M=256,num_warps=2" ...
                                                                          # each noted launch with each set of
                                                                          # overrides: compile seconds, shared memory

`compile` prints one JSON line per launch ({"kernel", "ok", "error"}) and exits 1 when any failed. `time` (what a
tuner variant costs to compile: a large dot tile can take a minute) prints one line per launch and override set
({"kernel", "overrides", "ok", "s", "shared", "error"}); an override names a constexpr, num_warps or num_stages,
and a launch without that constexpr is left out.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_PTR = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int64": "i64",
        "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def launch_spec(fn, arg_names: list[str], args: tuple, kwargs: dict) -> dict:
    """What Triton needs to compile this launch of `fn` (the kernel's Python function) ahead of time: each
    argument's type (a tensor's pointer type, an int's width), the constexprs, num_warps and num_stages."""
    import torch

    params = inspect.signature(fn).parameters
    bound = dict(zip(arg_names, args))
    bound.update({k: v for k, v in kwargs.items() if k in params})
    signature, constexprs = {}, {}
    for name, value in bound.items():
        if "constexpr" in str(params[name].annotation) or value is None:
            signature[name] = "constexpr"
            constexprs[name] = value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + _PTR[str(value.dtype).removeprefix("torch.")]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: argument {name} is a {type(value).__name__}")
    return {"kernel": fn.__name__, "signature": signature, "constexprs": constexprs,
            "num_warps": kwargs.get("num_warps", 4), "num_stages": kwargs.get("num_stages", 3)}


def unique(launches: list[dict]) -> list[dict]:
    return list({json.dumps(x, sort_keys=True, default=str): x for x in launches}.values())


def record(task: str, program: str, out: str) -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from triton.runtime.interpreter import InterpretedFunction

    launches: list[dict] = []
    original = InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        launches.append(launch_spec(self.fn, self.arg_names, args, kwargs))
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    ref = _load(task, "codegen_task")
    prog = _load(program, "codegen_program")
    torch.manual_seed(0)
    model = prog.ModelNew(*ref.get_init_inputs())
    with torch.no_grad():
        model(*ref.get_inputs())
    Path(out).write_text(json.dumps(unique(launches), indent=1))


def compile_one(prog: Any, launch: dict, arch: int) -> dict:
    """One noted launch compiled for cuda:ARCH: {"kernel", "ok", "error"} (and "shared", its bytes, when ok)."""
    import triton
    from triton.backends.compiler import GPUTarget

    try:
        src = triton.compiler.ASTSource(fn=getattr(prog, launch["kernel"]), signature=launch["signature"],
                                        constexprs=launch["constexprs"])
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                           options={"num_warps": launch["num_warps"], "num_stages": launch["num_stages"]})
        return {"kernel": launch["kernel"], "ok": True, "shared": k.metadata.shared}
    except Exception as exc:  # noqa: BLE001 - every launch is tried; the failures are the output
        return {"kernel": launch["kernel"], "ok": False, "error": f"{type(exc).__name__}: {str(exc)[-1500:]}"}


def compile_all(program: str, launches: str, arch: int) -> int:
    prog = _load(program, "codegen_program")
    failed = 0
    for launch in json.loads(Path(launches).read_text()):
        out = compile_one(prog, launch, arch)
        failed += not out["ok"]
        print(json.dumps({k: v for k, v in out.items() if k != "shared"}), flush=True)
    return 1 if failed else 0


def time_overrides(program: str, launches: str, arch: int, sets: list[str]) -> None:
    prog = _load(program, "codegen_program")
    for launch in json.loads(Path(launches).read_text()):
        for text in sets:
            over = {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}
            if any(k not in launch["constexprs"] and k not in ("num_warps", "num_stages") for k in over):
                continue
            spec = dict(launch, constexprs={**launch["constexprs"], **{k: v for k, v in over.items()
                                                                     if k in launch["constexprs"]}})
            spec.update({k: v for k, v in over.items() if k in ("num_warps", "num_stages")})
            t0 = time.perf_counter()
            out = compile_one(prog, spec, arch)
            print(json.dumps({"overrides": text, **out, "s": round(time.perf_counter() - t0, 1)}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(*sys.argv[2:5])
    elif sys.argv[1] == "time":
        time_overrides(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
    else:
        sys.exit(compile_all(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 90))
