"""Adversarial suite: candidates that cheat must not come out `correct`, and the guard that caught them is named.

One evaluation per candidate (CPU, Triton interpreter), run two at a time by the module's `EvalPool`; every
test then asserts on its verdict. Tests marked `xfail(strict=True)` state what the referee *should* do and
document a hole it has today (see each reason); they turn into failures (XPASS) once the hole is closed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    CANDIDATES,
    TASK_PAIR,
    TASK_TINY,
    EvalPool,
    Job,
    descendants,
    from_template,
    kill_marked,
    leftover_workers,
    needed_jobs,
)

from kernelsmith.referee.sandbox import Limits
from kernelsmith.referee.verdict import Severity, Status, Verdict

SECRET_NAME = "KERNELSMITH_TEST_API_KEY"  # a made-up name, so no real key of whoever runs the tests is involved
SECRET = "sk-test-secret-1234567890"

OBFUSCATIONS = {  # spelling of the torch call -> the aten operator the referee must see
    "getattr": ('getattr(torch, "re" + "lu")(x)', "aten::relu"),
    "aten_op": ("torch.ops.aten.relu.default(x)", "aten::relu"),
    "functional": ("F.relu(x)", "aten::relu"),
    "submodule": ("self.act(x)", "aten::relu"),
    "method": ("x.relu()", "aten::relu"),
    "eval": ('eval("torch." + "relu")(x)', "aten::relu"),
    "clamp": ("torch.clamp(x, min=0)", "aten::clamp"),
}
CONCURRENCY = ("thread", "fork", "subprocess")

# The rebuild's attack suite (tests/candidates/attack_template.py): job -> (prelude at import, forward body,
# statuses allowed, guards that must be named). Each is a class of attack that worked against the old referee.
RET = "        return y"
ZEROS = "        scratch = relu(x)\n        y = torch.zeros_like(x)\n" + RET  # a kernel ran; the answer is wrong
ATTACKS = {
    # Forged report: messages written straight to the judge's link (raw fd, no socket object) before any work.
    "forge_message": ('_fd = int(os.environ["KERNELSMITH_FD"])\n'
                      'os.write(_fd, b\'{"op": "ready"}\')\n'
                      'os.write(_fd, b\'{"op": "output", "case": "trial0", "n_outputs": 0, "values": []}\')',
                      "        y = relu(x)\n" + RET, {Status.REJECTED}, ["protocol_violation"]),
    # Seeds readable: look everywhere for the referee's job files; compute nothing.
    "seek_seeds": ('_hits = []\n'
                   'for _root in ("/", "/tmp", "/job", "/dev/shm", os.environ.get("HOME", "/")):\n'
                   '    try:\n'
                   '        _hits += [n for n in os.listdir(_root) if n.endswith((".json", ".pt")) or "seed" in n]\n'
                   '    except OSError:\n'
                   '        pass\n'
                   'print("SEEDS FOUND", _hits, flush=True)',
                   ZEROS, {Status.INCORRECT}, ["output_mismatch"]),
    # The judge attacked: its parent killed or stopped (in the sandbox that is the sandbox's own init).
    "kill_parent": ("os.kill(os.getppid(), signal.SIGKILL)", "        y = relu(x)\n" + RET, {Status.REJECTED},
                    ["referee_access"]),
    "stop_parent": ("os.kill(os.getppid(), signal.SIGSTOP)", "        y = relu(x)\n" + RET, {Status.REJECTED},
                    ["referee_access"]),
    "kill_everyone": ("os.kill(-1, signal.SIGKILL)", "        y = relu(x)\n" + RET, {Status.REJECTED},
                      ["referee_access"]),
    # The audit hook fooled by a foreign co_filename (a thread and a torch call "from the stdlib").
    "foreign_filename": ('exec(compile("import torch\\ndef sneaky(x):\\n    return torch.relu(x)\\n", '
                         '"/usr/lib/python3/threading.py", "exec"), globals())',
                         "        y = sneaky(x)\n" + RET, {Status.REJECTED}, ["tampering"]),
    "foreign_code_replace": ("def _f(x):\n    return torch.relu(x)\n"
                             "_f.__code__ = _f.__code__.replace(co_filename='/usr/lib/python3/os.py')",
                             "        y = _f(x)\n" + RET, {Status.REJECTED}, ["tampering"]),
    # The strict policy switched off from inside.
    "exclude_python_key": ("", "        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet("
                           "torch._C.DispatchKey.Python)):\n            y = torch.relu(x)\n" + RET,
                           {Status.REJECTED}, ["tampering"]),
    "redispatch": ("", "        ks = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)\n"
                   "        y = torch.ops.aten.relu.default.redispatch(ks, x)\n" + RET, {Status.REJECTED},
                   ["tampering"]),
    "torch_in_grid": ("_out = []\n"
                      "def _grid(meta):\n    _out.append(torch.relu(_x[0]))\n    return (0,)\n_x = []",
                      "        _x[:] = [x]\n        _out.clear()\n        scratch = torch.empty_like(x)\n"
                      "        relu_kernel[_grid](x, scratch, x.numel(), BLOCK=1024)\n        y = _out[0]\n" + RET,
                      {Status.REJECTED}, ["torch_compute_op"]),
    "empty_grid_numpy": ("", "        scratch = torch.empty_like(x)\n"
                         "        relu_kernel[(0,)](x, scratch, x.numel(), BLOCK=1024)\n"
                         "        y = torch.from_numpy(np.maximum(x.numpy(), 0))\n" + RET,
                         {Status.REJECTED}, ["no_triton_kernel"]),
    "output_attribute": ("", "        y = torch.empty_like(x)\n        y.detach = lambda: torch.relu(x)\n" + RET,
                         {Status.REJECTED, Status.INCORRECT, Status.RUNTIME_ERROR}, ["output_not_dense"]),
    "patch_tensor_class": ("torch.Tensor.__eq__ = lambda a, b: True", "        y = relu(x)\n" + RET,
                           {Status.REJECTED}, ["tampering"]),
    # The recorders' own state edited from inside (a second, private ledger must agree with them).
    "recorder_off": ("from torch.utils._python_dispatch import _get_current_dispatch_mode_stack as _modes",
                     "        scratch = relu(x)\n        _m = _modes()[-1]\n        _m.active = False\n"
                     "        y = torch.relu(x)\n        _m.active = True\n" + RET, {Status.REJECTED}, ["tampering"]),
    "clear_ops": ("from torch.utils._python_dispatch import _get_current_dispatch_mode_stack as _modes",
                  "        scratch = relu(x)\n        y = torch.relu(x)\n        _m = _modes()[-1]\n"
                  "        _m.ops.clear()\n" + RET, {Status.REJECTED}, ["tampering"]),
    "bump_launches": ("import inspect\nfrom triton.runtime.interpreter import InterpretedFunction as _IF\n"
                      "from triton.runtime.jit import JITFunction as _JF\n"
                      "_recs = [inspect.signature(c.run).parameters['_recorder'].default for c in (_IF, _JF)]",
                      "        for _r in _recs:\n            _r.kernels['relu_kernel'] += 1\n"
                      "        y = torch.from_numpy(np.maximum(x.numpy(), 0))\n" + RET, {Status.REJECTED},
                      ["tampering"]),
    "kwdefaults": ("from triton.runtime.interpreter import InterpretedFunction as _IF\n"
                   "_rec = _IF.run.__kwdefaults__['_recorder']", "        y = relu(x)\n" + RET, {Status.REJECTED},
                   ["referee_access"]),
    # Memory and output floods, /dev/shm left behind.
    "stdout_flood": ("", "        os.write(1, b'F' * (64 << 20))\n" + ZEROS, {Status.INCORRECT},
                     ["output_mismatch"]),
    "shm_leftover": ('open("/dev/shm/kernelsmith-attack-leftover", "wb").write(b"x" * 4096)',
                     ZEROS, {Status.INCORRECT}, ["output_mismatch"]),
}


def _cli_eval(job: Job) -> dict:
    """`kernelsmith eval` in a fresh process whose own (exec-time) environment holds the secret."""
    env = {**os.environ, SECRET_NAME: SECRET}
    cmd = [sys.executable, "-c", "from kernelsmith.cli import app; app()", "eval", str(job.task),
           str(job.candidate_path()), "--device", "cpu", "--json"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return {"verdict": Verdict.from_dict(json.loads(proc.stdout)), "stdout": proc.stdout,
            "stderr": proc.stderr, "rc": proc.returncode}


def _jobs(gen: Path) -> list[Job]:
    jobs = [
        Job("good_relu", "good_relu.py"),
        Job("good_pair", "good_pair.py", task=TASK_PAIR),
        Job("good_tiny", "good_tiny.py", task=TASK_TINY),
        Job("torch_fallback", "adv_torch_fallback.py"),
        Job("decoy_strict", "adv_decoy_kernel.py"),
        Job("decoy_lenient", "adv_decoy_kernel.py", options={"policy": "lenient"}),
        Job("zeros", "adv_zeros.py", task=TASK_TINY),
        Job("inplace", "adv_inplace.py"),
        Job("default_dtype", "adv_default_dtype.py"),
        Job("cache", "adv_cache.py"),
        Job("uninit", "adv_uninit.py"),
        Job("uninit_assume_zero", "adv_uninit_assume_zero.py"),
        Job("patch_allclose", "adv_patch_allclose.py"),
        Job("subclass_plain", "adv_subclass_plain.py"),
        Job("subclass_lazy", "adv_subclass_lazy.py"),
        Job("secret_api", "adv_secret.py"),
        Job("secret_cli", "adv_secret.py", runner=_cli_eval),
        Job("compile_strict", "adv_compile.py"),
        Job("compile_lenient", "adv_compile.py", options={"policy": "lenient"}),
        Job("timer_patch", "adv_timer_patch.py"),
        Job("foreign_kernel", "adv_foreign_kernel.py"),
        Job("hole_disable_modes", "hole_disable_modes.py"),
        Job("import_thread", "hole_import_thread.py"),
        Job("patch_worker", "hole_patch_worker.py"),
        Job("hole_raw_thread", "hole_raw_thread.py"),
        Job("hole_patch_code", "hole_patch_code.py"),
        Job("hole_forge_results", "hole_forge_results.py"),
        Job("hole_numpy", "hole_numpy.py"),
        Job("hole_precompute", "hole_precompute.py"),
        Job("hole_forged_report", "hole_forged_report.py"),
        Job("hole_json_bomb", "hole_json_bomb.py"),
        Job("hole_shape_overflow", "hole_shape_overflow.py"),
        Job("write_outside", from_template("adv_write_outside_template.py", "__TARGET__",
                                           str(gen / "overwritten.txt"), gen / "write_outside.py")),
        Job("hole_escape", from_template("hole_escape_template.py", "__MARKER__", str(gen / "escaped.pid"),
                                         gen / "hole_escape.py")),
    ]
    for key, (expr, _) in OBFUSCATIONS.items():
        path = from_template("adv_obfuscated_template.py", "__COMPUTE__", expr, gen / f"obf_{key}.py")
        jobs.append(Job(f"obf_{key}", path))
    for how in CONCURRENCY:
        path = from_template("adv_concurrency_template.py", "__HOW__", how, gen / f"conc_{how}.py")
        jobs.append(Job(f"conc_{how}", path))
    template = (CANDIDATES / "attack_template.py").read_text()
    for name, (prelude, forward, _, _) in ATTACKS.items():
        path = gen / f"attack_{name}.py"
        path.write_text(template.replace("__PRELUDE__", prelude).replace("__FORWARD__", forward))
        jobs.append(Job(f"attack_{name}", path))
    jobs.append(Job("runaway_memory", _runaway(gen), options={"limits": Limits(memory_mb=768)}))
    jobs.append(Job("hostile_task", "good_relu.py", task=from_template("task_hostile.py", "__MARKER__",
                                                                        str(gen / "task-escaped.txt"),
                                                                        gen / "task_hostile.py")))
    jobs.append(Job("probe_poison", "probe_poison.py"))
    return jobs


def _runaway(gen: Path) -> Path:
    """Allocates without end in forward (numpy: no torch allocator cache in the way)."""
    path = gen / "attack_runaway.py"
    body = "        hog = []\n        while True:\n            hog.append(np.ones(32 << 20))\n"
    path.write_text((CANDIDATES / "attack_template.py").read_text().replace("__PRELUDE__", "")
                    .replace("__FORWARD__", body))
    return path


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("adversarial")


@pytest.fixture(scope="module")
def pool(request: pytest.FixtureRequest, gen_dir: Path):
    # The secret is in this process's os.environ (not in its exec-time /proc environ) for every evaluation.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(SECRET_NAME, SECRET)
        p = EvalPool("adversarial", _jobs(gen_dir), needed_jobs(request))
        yield p
        p.close()
    kill_marked(gen_dir / "escaped.pid")  # hole_escape's daemon, by the pid it wrote (it would exit in 60 s)


NOBODY = 65534


def _unsandboxed(v: Verdict) -> bool:
    """The candidate's child ran as the parent's user (here: root), not as `nobody`."""
    return v.sandbox.get("uid") != NOBODY


# --------------------------------------------------------------------------------------------------------
# Honest candidates


@pytest.mark.parametrize("case", ["good_relu", "good_pair", "good_tiny"])
def test_honest_candidate_is_correct(pool: EvalPool, case: str) -> None:
    v = pool.verdict(case)
    assert v.status is Status.CORRECT, v.error + "\n" + v.log
    assert not [g for g in v.guards if g.severity is not Severity.WARN]
    assert v.trials == 5 and v.max_rel_err == 0.0
    assert v.kernels and sum(v.kernels.values()) == 6  # trial0, its poisoned repeat, trial1..4


@pytest.mark.uses("good_tiny")
def test_tiny_task_is_not_flagged_degenerate(pool: EvalPool) -> None:
    """|y| ~ 1e-6 is small, not degenerate: the scale-relative tolerance still separates right from zeros."""
    assert pool.verdict("good_tiny").finding("degenerate_task") is None


# --------------------------------------------------------------------------------------------------------
# Cheats the referee catches: (job, statuses allowed, guards that must all be present)

CAUGHT = [
    ("torch_fallback", {Status.REJECTED}, ["no_triton_kernel", "torch_compute_op"]),
    ("decoy_strict", {Status.REJECTED}, ["torch_compute_op"]),
    ("zeros", {Status.INCORRECT}, ["output_mismatch"]),
    ("inplace", {Status.INCORRECT}, ["input_mutated"]),
    ("cache", {Status.INCORRECT}, ["cached_result"]),
    ("uninit_assume_zero", {Status.INCORRECT}, ["poisoned_memory"]),
    ("patch_allclose", {Status.REJECTED, Status.INCORRECT}, ["tampering"]),
    ("subclass_plain", {Status.REJECTED, Status.INCORRECT}, ["output_not_dense"]),
    ("subclass_lazy", {Status.REJECTED, Status.INCORRECT}, ["output_not_dense"]),
    ("compile_strict", {Status.REJECTED}, ["torch_compile"]),
    ("timer_patch", {Status.REJECTED}, ["tampering"]),
    ("foreign_kernel", {Status.REJECTED}, ["no_triton_kernel"]),
    *[(f"conc_{how}", {Status.REJECTED}, ["extra_thread"]) for how in CONCURRENCY],
    ("import_thread", {Status.REJECTED}, ["extra_thread"]),  # a threading.Thread started at import
    ("patch_worker", {Status.REJECTED}, ["tampering"]),  # rebinding the channel's send
    # Attacks on the referee itself, refused by the audit hook (kernelsmith/referee/audit.py):
    ("hole_disable_modes", {Status.REJECTED}, ["tampering"]),  # _disable_current_modes() around a torch call
    ("hole_raw_thread", {Status.REJECTED}, ["extra_thread"]),  # _thread.start_new_thread at import
    ("hole_patch_code", {Status.REJECTED}, ["tampering"]),  # swapping the channel's encode.__code__
    ("hole_forge_results", {Status.REJECTED}, ["referee_access"]),  # reading job.json, writing phase1.json
    ("hole_precompute", {Status.REJECTED}, ["referee_access"]),  # seeds from job.json in __init__
    ("hole_escape", {Status.REJECTED}, ["native_access"]),  # libc fork() through ctypes at import
    # Attacks on the judge's channel (red team, 2026-12-03): forged answers, malformed messages.
    ("hole_forged_report", {Status.REJECTED}, ["native_access"]),  # ctypes behind "<lib>" frames: now seen
    ("hole_json_bomb", {Status.REJECTED}, ["protocol_violation"]),
    ("hole_shape_overflow", {Status.REJECTED, Status.INCORRECT}, []),
    # Overwriting a file outside its work dir: refused by the audit hook, or absent from the sandbox's view.
    ("write_outside", {Status.REJECTED, Status.RUNTIME_ERROR}, []),
    *[(f"attack_{name}", statuses, guards) for name, (_, _, statuses, guards) in ATTACKS.items()],
]


@pytest.mark.parametrize(("case", "statuses", "guards"), CAUGHT, ids=[c[0] for c in CAUGHT])
def test_cheat_is_caught(pool: EvalPool, case: str, statuses: set[Status], guards: list[str]) -> None:
    v = pool.verdict(case)
    assert v.status in statuses, f"{case}: {v.status.value}: {v.error}\n{v.log}"
    for name in guards:
        finding = v.finding(name)
        assert finding is not None, f"{case}: no {name} finding; got {[g.name for g in v.guards]}"
        assert finding.severity is not Severity.WARN
    assert v.error  # one line saying why
    assert v.speedup is None


@pytest.mark.uses("zeros")
def test_zeros_fail_relative_not_absolute(pool: EvalPool) -> None:
    v = pool.verdict("zeros")
    assert v.max_abs_err is not None and v.max_abs_err < 1e-5  # would pass atol=1e-5
    assert "got 0" in v.error


@pytest.mark.uses("cache")
def test_cache_names_the_earlier_input(pool: EvalPool) -> None:
    v = pool.verdict("cache")
    assert "earlier input (trial0)" in v.finding("cached_result").message


@pytest.mark.uses("patch_allclose", "timer_patch")
def test_tampering_names_what_was_rebound(pool: EvalPool) -> None:
    msg = pool.verdict("patch_allclose").finding("tampering").message
    assert "torch.allclose" in msg and "torch.testing.assert_close" in msg
    msg = pool.verdict("timer_patch").finding("tampering").message
    assert "time.perf_counter" in msg or "Event.elapsed_time" in msg


@pytest.mark.uses("foreign_kernel")
def test_foreign_kernel_is_reported_as_foreign(pool: EvalPool) -> None:
    v = pool.verdict("foreign_kernel")
    assert "foreign" in v.finding("no_triton_kernel").message and "relu_kernel" in v.error
    assert v.kernels == {}


@pytest.mark.uses("decoy_lenient")
def test_decoy_kernel_is_allowed_under_lenient(pool: EvalPool) -> None:
    """KernelBench's rule: any torch, as long as a Triton kernel runs."""
    v = pool.verdict("decoy_lenient")
    assert v.status is Status.CORRECT, v.error
    assert v.ops.get("aten::relu") == 6 and v.kernels.get("decoy_kernel") == 6


@pytest.mark.uses("compile_lenient")
def test_torch_compile_only_warns_under_lenient(pool: EvalPool) -> None:
    v = pool.verdict("compile_lenient")
    assert v.status is Status.CORRECT, v.error
    assert v.finding("torch_compile").severity is Severity.WARN


@pytest.mark.parametrize("case", [f"obf_{k}" for k in OBFUSCATIONS])
def test_obfuscated_torch_call_is_seen(pool: EvalPool, case: str) -> None:
    v = pool.verdict(case)
    op = OBFUSCATIONS[case.removeprefix("obf_")][1]
    assert v.status is Status.REJECTED, v.error
    assert v.finding("torch_compute_op") is not None and op in v.finding("torch_compute_op").message
    assert v.finding("no_triton_kernel") is None  # the decoy did launch: torch compute is the reason
    assert v.ops.get(op) == 6 and v.kernels.get("decoy_kernel") == 6


# --------------------------------------------------------------------------------------------------------
# Uninitialised output and the poisoning of output memory


def _probes(v: Verdict) -> list[str]:
    return [line.split()[1] for line in v.log.splitlines() if line.startswith("PROBE ")]


@pytest.mark.uses("uninit")
def test_uninitialised_tail_is_caught(pool: EvalPool) -> None:
    v = pool.verdict("uninit")
    assert v.status is Status.INCORRECT, v.error
    assert {g.name for g in v.guards} & {"poisoned_memory", "output_mismatch", "nonfinite_output"}


FILL_A, FILL_B = "fefefefe", "7f7f7f7f"  # glibc's M_PERTURB fills (worker.PERTURB): huge negative, huge positive


@pytest.mark.uses("probe_poison")
def test_poisoning_reaches_every_call(pool: EvalPool) -> None:
    """Unwritten output memory holds the run's poison on every call (the repeat a different one), whatever
    the heap's layout: glibc fills each allocation (M_PERTURB, set per run by the worker)."""
    v = pool.verdict("probe_poison")
    assert v.status is Status.CORRECT, v.error
    assert _probes(v) == [FILL_A, FILL_B] + [FILL_A] * 4


# --------------------------------------------------------------------------------------------------------
# Secrets of the parent's environment


@pytest.mark.parametrize("case", ["secret_api", "secret_cli"])
def test_secret_not_passed_to_child(pool: EvalPool, case: str) -> None:
    v = pool.verdict(case)
    assert "SECRET VISIBLE IN CHILD ENVIRONMENT" not in v.error + v.log
    assert v.status is not Status.RUNTIME_ERROR, v.error
    assert "ANCESTOR" in v.log  # the snooping did run


@pytest.mark.parametrize("case", ["secret_api", "secret_cli"])
def test_secret_never_in_verdict(pool: EvalPool, case: str) -> None:
    result = pool.result(case)
    v = pool.verdict(case)
    assert SECRET not in json.dumps(v.to_dict())
    if isinstance(result, dict):
        assert SECRET not in result["stdout"] + result["stderr"]


@pytest.mark.uses("secret_cli")
def test_secret_in_exec_environment_is_redacted_and_rejected(pool: EvalPool) -> None:
    """The CLI process got the secret at exec, so /proc/<ppid>/environ holds it; whatever the child printed of
    it must come back redacted and reject the candidate."""
    r = pool.result("secret_cli")
    v = r["verdict"]
    if f"FOUND {SECRET_NAME}=" in v.log:
        assert f"FOUND {SECRET_NAME}=[REDACTED]" in v.log
        assert v.status is Status.REJECTED and v.finding("secret_leak") is not None
        assert r["rc"] == 1
    else:  # the read of the ancestors' environment was refused: the attempt alone rejects the candidate
        assert v.status is Status.REJECTED and v.finding("secret_access") is not None
        assert r["rc"] == 1


@pytest.mark.uses("secret_api")
def test_secret_set_after_exec_is_not_found(pool: EvalPool) -> None:
    """os.environ changes do not reach /proc/self/environ: with the API the candidate finds nothing."""
    v = pool.verdict("secret_api")
    assert f"FOUND {SECRET_NAME}" not in v.log
    assert v.finding("secret_leak") is None
    assert v.status is Status.REJECTED and v.finding("secret_access") is not None  # it tried /proc/PID/environ


@pytest.mark.uses("secret_cli")
def test_child_cannot_read_ancestors_environment(pool: EvalPool) -> None:
    v = pool.verdict("secret_cli")
    assert not [line for line in v.log.splitlines() if line.startswith("ANCESTOR") and line.endswith(" readable")]


def _encodings(secret: str) -> dict[str, str]:
    """The secret as a leaking candidate might print it (tests/candidates/adv_secret.py prints all of these)."""
    import base64
    import codecs
    import urllib.parse

    raw = secret.encode()
    return {"literal": secret, "reversed": secret[::-1], "base64": base64.b64encode(raw).decode(),
            "base64url": base64.urlsafe_b64encode(raw).decode(), "base32": base64.b32encode(raw).decode(),
            "hex": raw.hex(), "HEX": raw.hex().upper(), "rot13": codecs.encode(secret, "rot13"),
            "url": urllib.parse.quote(secret, safe=""), "codes": ",".join(str(ord(c)) for c in secret),
            "utf16": secret.encode("utf-16-le").decode("latin-1")}


@pytest.mark.parametrize("case", ["secret_api", "secret_cli"])
def test_encoded_secret_never_in_verdict(pool: EvalPool, case: str) -> None:
    """No encoding of the secret anywhere the candidate's output reaches (the verdict, the CLI's stdout and
    stderr), also with whitespace removed (one character a line): the read itself is refused."""
    r = pool.result(case)
    outputs = [json.dumps(pool.verdict(case).to_dict(), ensure_ascii=False)]
    if isinstance(r, dict):
        outputs += [r.get("stdout", ""), r.get("stderr", "")]
    for text in outputs:
        squeezed = "".join(text.replace("\\n", "").split())
        for name, enc in _encodings(SECRET).items():
            assert enc not in text and enc not in squeezed, name


# --------------------------------------------------------------------------------------------------------
# Holes: cheats that come out `correct` today. Each asserts what should happen.


@pytest.mark.xfail(strict=True, reason="REFEREE HOLE (CPU only): Tensor.numpy()/torch.from_numpy do not reach "
                   "the dispatcher; on CUDA the .cpu() copy would be a host_transfer, on CPU nothing is checked")
@pytest.mark.uses("hole_numpy")
def test_numpy_compute_is_caught(pool: EvalPool) -> None:
    v = pool.verdict("hole_numpy")
    assert v.status is not Status.CORRECT


@pytest.mark.uses("hole_escape")
def test_no_process_outlives_its_evaluation(pool: EvalPool) -> None:
    pool.verdict("hole_escape")
    time.sleep(0.5)  # the daemon starts at import; the evaluation itself took seconds
    left = leftover_workers()
    deadline = time.monotonic() + 10  # a killed sandbox's processes are reaped asynchronously on a loaded host
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftover_workers()
    assert not left, f"worker processes alive after their evaluation: {left}"


def test_escaped_daemon_never_starts(pool: EvalPool, gen_dir: Path) -> None:
    pool.verdict("hole_escape")
    marker = gen_dir / "escaped.pid"
    deadline = time.monotonic() + 2
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not marker.exists()


@pytest.mark.uses("write_outside")
def test_write_outside_work_dir_is_refused(pool: EvalPool, gen_dir: Path) -> None:
    pool.verdict("write_outside")
    assert not (gen_dir / "overwritten.txt").exists()


# --------------------------------------------------------------------------------------------------------
# The rebuild: what the OS boundary and the judge's channel add (tests/test_sandbox.py probes the boundary alone)


@pytest.mark.uses("default_dtype")
def test_candidate_state_cannot_change_the_inputs(pool: EvalPool) -> None:
    """The judge makes every input: a default dtype the candidate sets changes nothing it is judged on."""
    v = pool.verdict("default_dtype")
    assert v.status is Status.CORRECT and v.trials == 5, v.error


@pytest.mark.uses("attack_seek_seeds")
def test_no_referee_file_is_in_reach(pool: EvalPool) -> None:
    assert "SEEDS FOUND []" in pool.verdict("attack_seek_seeds").log


@pytest.mark.uses("attack_stdout_flood")
def test_output_flood_is_cut(pool: EvalPool) -> None:
    v = pool.verdict("attack_stdout_flood")
    assert len(v.log) < 64 << 10 and "bytes cut" in v.log


@pytest.mark.uses("attack_shm_leftover")
def test_shared_memory_is_private_and_gone(pool: EvalPool) -> None:
    pool.verdict("attack_shm_leftover")
    assert not Path("/dev/shm/kernelsmith-attack-leftover").exists()


@pytest.mark.uses("runaway_memory")
def test_runaway_allocation_ends_at_the_limit(pool: EvalPool) -> None:
    v = pool.verdict("runaway_memory")
    assert v.status is Status.CRASHED and "memory limit" in v.error, v.error
    assert v.elapsed_s < 60  # the kernel's limit, not the 120 s deadline


@pytest.mark.uses("hostile_task")
def test_hostile_task_code_is_sandboxed(pool: EvalPool, gen_dir: Path) -> None:
    """Task code runs in the judge's sandbox: no secret, no write outside, no network, no other process."""
    v = pool.verdict("hostile_task")
    assert v.status is Status.CRASHED and "task's reference failed" in v.error, v.error
    assert "HOSTILE env []" in v.log and "HOSTILE write refused" in v.log and "HOSTILE network refused" in v.log
    procs = [line for line in v.log.splitlines() if line.startswith("HOSTILE processes")]
    assert procs and max(json.loads(procs[0].split(" ", 2)[2])) < 10
    assert not (gen_dir / "task-escaped.txt").exists()
    assert SECRET not in v.log


def test_every_verdict_says_how_it_was_isolated(pool: EvalPool) -> None:
    v = pool.verdict("good_relu")
    assert v.sandbox["isolation"] == "bwrap" and v.sandbox["uid"] == NOBODY and v.sandbox["network"] == "isolated"
    assert v.sandbox["memory_limit"] in ("cgroup-v2", "cgroup-v1", "rlimit-data")
    assert v.sandbox["visible_processes"] <= 3


@pytest.mark.uses("hole_forged_report", "hole_json_bomb", "hole_shape_overflow")
def test_attacks_on_the_channel_are_the_candidates_fault_and_leave_the_judge_clean(pool: EvalPool) -> None:
    """A malformed or forged message is never blamed on the task, and a kept judge holds nothing of it after."""
    from kernelsmith.referee.evaluation import standing_sandboxes

    for case in ("hole_forged_report", "hole_json_bomb", "hole_shape_overflow"):
        v = pool.verdict(case)
        assert "task's reference" not in v.error, (case, v.error)
    held = []
    for root in standing_sandboxes():
        for pid in descendants(root):
            try:
                held += [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            except OSError:
                continue
    assert not [h for h in held if "leaked-into-judge" in h], held

