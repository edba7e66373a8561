"""The comparison's tolerance rules (scale-aware, per dtype, NaN/Inf, structure)."""

import torch

from kernelsmith.referee.compare import compare_outputs, degenerate_reason


def test_exact_and_small_errors_pass() -> None:
    r = torch.randn(64, 64)
    assert compare_outputs([r.clone()], [r]).ok
    assert compare_outputs([r + 1e-5 * r.abs().max()], [r]).ok


def test_zeros_fail_on_tiny_outputs() -> None:
    r = torch.randn(1000) * 1e-7
    res = compare_outputs([torch.zeros_like(r)], [r])
    assert not res.ok and res.kind == "mismatch" and "outside tolerance" in res.reason


def test_tf32_level_error_passes_fp32_but_gross_error_fails() -> None:
    a, b = torch.randn(128, 256), torch.randn(256, 128)
    ref = a @ b
    approx = (a.bfloat16().float() @ b.bfloat16().float())  # ~bf16 inputs: 4e-3 relative, too coarse
    tf32_like = ref + torch.randn_like(ref) * 1e-4 * ref.abs().max()
    assert compare_outputs([tf32_like], [ref]).ok
    assert not compare_outputs([approx * 1.01], [ref]).ok


def test_half_precision_is_looser() -> None:
    r = torch.randn(256).half()
    noisy = (r.float() * (1 + 5e-3)).half()
    assert compare_outputs([noisy], [r]).ok
    assert not compare_outputs([noisy.float()], [r.float() * (1 - 5e-3)]).ok


def test_nan_where_reference_has_none_fails_and_matching_nan_passes() -> None:
    r = torch.randn(10)
    o = r.clone()
    o[3] = float("nan")
    res = compare_outputs([o], [r])
    assert not res.ok and res.kind == "nonfinite" and "(3)" in res.reason
    r2 = r.clone()
    r2[3] = float("nan")
    assert compare_outputs([o], [r2]).ok


def test_structure_mismatches() -> None:
    r = torch.randn(4, 4)
    assert compare_outputs([r.reshape(16)], [r]).kind == "structure"
    assert compare_outputs([r.double()], [r]).kind == "structure"
    assert compare_outputs([r, r], [r]).kind == "structure"


def test_integer_outputs_compare_exactly() -> None:
    r = torch.arange(10)
    o = r.clone()
    o[7] += 1
    assert not compare_outputs([o], [r]).ok and compare_outputs([r.clone()], [r]).ok


def test_degenerate_reference_is_reported() -> None:
    assert "nearly zero" in degenerate_reason([torch.zeros(100)])
    assert "nearly constant" in degenerate_reason([torch.full((100,), 3.0) + 1e-9 * torch.randn(100)])
    assert degenerate_reason([torch.randn(100)]) == ""
