"""The timing phase's stopping rule (the GPU side is in tests/gpu): repetitions stop once the ratio is known."""

from __future__ import annotations

import numpy as np

from kernelsmith.referee.timing import TimingOptions, bootstrap_ratio, repeat_until_settled


def _runner(noise: float, ratio: float = 1.25, seed: int = 0):
    rng = np.random.default_rng(seed)
    calls: list[tuple[int, int]] = []

    def run(first: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        calls.append((first, n))
        ref = 0.1 * np.exp(rng.normal(0, noise, n))
        return ref, ref / ratio * np.exp(rng.normal(0, noise, n))

    return run, calls


def test_a_stable_pair_stops_early_and_keeps_its_ratio() -> None:
    run, calls = _runner(noise=0.005)
    opts = TimingOptions(min_reps=30, chunk=100)
    ref_t, cand_t = repeat_until_settled(run, 3000, opts)
    assert len(ref_t) == len(cand_t) == 100  # one chunk was enough at 0.5% noise
    assert [first for first, _ in calls] == [0]
    lo, hi = bootstrap_ratio(ref_t, cand_t, 500)
    assert lo < 1.25 < hi


def test_a_noisy_pair_spends_its_budget() -> None:
    run, calls = _runner(noise=0.2)
    ref_t, _ = repeat_until_settled(run, 1000, TimingOptions(chunk=100))
    assert len(ref_t) == 1000  # 20% noise never settles to 0.1% within the budget
    assert [first for first, _ in calls] == list(range(0, 1000, 100))  # consecutive repetition numbers


def test_target_zero_spends_the_whole_budget() -> None:
    run, _ = _runner(noise=0.0001)
    ref_t, _ = repeat_until_settled(run, 450, TimingOptions(target_rse=0, chunk=100))
    assert len(ref_t) == 450  # the last chunk is cut to the budget


def test_the_device_trace_is_set_against_the_recorder() -> None:
    """The device's kernel names (CUPTI) against the launches the recorder counted in the same call: a launch
    that ran nothing on the device rejects; strict names device kernels nobody launched; no trace never passes."""
    from kernelsmith.referee.evaluation import device_trace_findings

    honest = {"kernels": {"relu_kernel": 1, "Memset (Device)": 1}, "recorded": {"relu_kernel": 1}}
    assert device_trace_findings(honest, "strict") == ({"relu_kernel": 1, "Memset (Device)": 1}, [])
    forged = {"kernels": {"void at::native::vectorized_elementwise_kernel<4, at::native::(anon)::relu>": 1},
              "recorded": {"relu_kernel": 1}}
    _, found = device_trace_findings(forged, "lenient")
    assert [(f.name, f.severity.value) for f in found] == [("launch_not_on_device", "reject")]
    _, found = device_trace_findings(forged, "strict")
    assert {f.name for f in found} == {"launch_not_on_device", "device_kernel_unaccounted"}
    # A whole model: 120 Triton kernels beside 200 library ones (only the first 64 of each were read, and
    # ResNet101's honest seed was rejected for launches past them).
    ours = {f"ks_elementwise_{i}_kernel": 1 for i in range(120)}
    model = {"kernels": {**{f"cudnn_conv_{i}": 3 for i in range(200)}, **ours}, "recorded": ours}
    assert device_trace_findings(model, "lenient")[1] == []
    model["kernels"].pop("ks_elementwise_119_kernel")  # ... and a forged launch at the end is still caught
    _, found = device_trace_findings(model, "lenient")
    assert [f.name for f in found] == ["launch_not_on_device"] and "ks_elementwise_119_kernel" in found[0].message
    for broken in ({"error": "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"}, {"kernels": {}, "recorded": {"k": 1}}):
        _, found = device_trace_findings(broken, "strict")
        assert [(f.name, f.severity.value) for f in found] == [("device_trace_unavailable", "warn")]
