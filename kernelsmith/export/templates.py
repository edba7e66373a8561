'''The files of an exported package, as text: they import torch and triton only (never kernelsmith), since the
package must run where kernelsmith is not installed.'''

from __future__ import annotations

INIT = '''"""{title}: Triton kernels found by kernelsmith for the task {task!r}, as a drop-in replacement.

`apply(model)` returns a `ModelNew` carrying `model`'s parameters and buffers. Without a GPU the kernels run
through Triton's interpreter (TRITON_INTERPRET=1 is set on import when torch sees no GPU): correct, not fast.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

if not torch.cuda.is_available():  # Triton reads this when the kernels are defined, below
    os.environ.setdefault("TRITON_INTERPRET", "1")

from . import reference  # noqa: E402
from .kernels import ModelNew  # noqa: E402
from .reference import Model, get_init_inputs, get_inputs  # noqa: E402

__all__ = ["Model", "ModelNew", "apply", "get_init_inputs", "get_inputs", "reference"]


class StateMismatch(ValueError):
    """`ModelNew` names its parameters or buffers differently from the model given to `apply`."""


def apply(model: torch.nn.Module, init_inputs: Sequence[Any] | None = None) -> ModelNew:
    """A `ModelNew` built with `init_inputs` (default: the task's `get_init_inputs()`), holding `model`'s
    parameters and buffers, on `model`'s device, in its train/eval mode. Raises `StateMismatch` naming the keys
    that do not match: a model never silently keeps random weights."""
    args = list(get_init_inputs() if init_inputs is None else init_inputs)
    new = ModelNew(*args)
    state = model.state_dict()
    mine = new.state_dict()
    missing = sorted(k for k in mine if k not in state)
    unexpected = sorted(k for k in state if k not in mine)
    if missing or unexpected:
        raise StateMismatch(f"ModelNew's state does not match {{type(model).__name__}}'s: missing keys "
                            f"{{missing or 'none'}}, unexpected keys {{unexpected or 'none'}}")
    shapes = [f"{{k}}: {{tuple(state[k].shape)}} vs {{tuple(v.shape)}}" for k, v in mine.items()
              if tuple(v.shape) != tuple(state[k].shape)]
    if shapes:
        raise StateMismatch(f"ModelNew's state does not match {{type(model).__name__}}'s shapes: "
                            + "; ".join(shapes))
    tensors = [*model.parameters(), *model.buffers()]
    if tensors:
        new = new.to(tensors[0].device)
    new.load_state_dict(state, strict=True)
    return new.train(model.training)
'''

TEST = '''"""ModelNew against the task's reference Model on fresh random inputs (and the task's hidden shapes), with
kernelsmith's referee tolerances. Runs on the GPU when torch sees one, else through Triton's interpreter."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from . import Model, apply, get_init_inputs, get_inputs, reference

# The referee's per-dtype tolerances (an element passes when |out - ref| <= tol * max|ref| + tol * |ref|)
TOLERANCE = {tolerances}
DEFAULT_TOLERANCE = {default_tolerance!r}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SEEDS = {seeds!r}
INIT_SEED = 42
IN_PLACE = {in_place!r}


def seed_all(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed % (2**32))


def on_device(values: list[Any]) -> list[Any]:
    return [v.to(DEVICE) if isinstance(v, torch.Tensor) else v for v in values]


def tensors(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def build() -> torch.nn.Module:
    seed_all(INIT_SEED)
    with torch.device(DEVICE):
        return Model(*get_init_inputs())


def models() -> tuple[torch.nn.Module, torch.nn.Module]:
    model = build()
    # apply() switches the model it is given in place (an optimize package): it gets a twin, same seed
    return model.eval(), apply(build() if IN_PLACE else model).eval()


def check(outs: list[torch.Tensor], refs: list[torch.Tensor]) -> None:
    assert len(outs) == len(refs), f"{{len(outs)}} outputs, expected {{len(refs)}}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.shape == r.shape, f"output {{i}}: shape {{tuple(o.shape)}}, expected {{tuple(r.shape)}}"
        assert o.dtype == r.dtype, f"output {{i}}: dtype {{o.dtype}}, expected {{r.dtype}}"
        if not r.is_floating_point():
            assert torch.equal(o, r), f"output {{i}}: values differ"
            continue
        tol = TOLERANCE.get(str(r.dtype).replace("torch.", ""), DEFAULT_TOLERANCE)
        hp = torch.float64 if r.dtype == torch.float64 else torch.float32
        o64, r64 = o.detach().to(hp).cpu(), r.detach().to(hp).cpu()
        finite = torch.isfinite(r64)
        assert torch.equal(torch.isfinite(o64), finite), f"output {{i}}: non-finite values where the reference has none"
        assert torch.equal(o64[~finite].nan_to_num(), r64[~finite].nan_to_num()), f"output {{i}}: non-finite values differ"
        rf, of = r64[finite], o64[finite]
        if not rf.numel():
            continue
        scale = max(float(rf.abs().max()), torch.finfo(r.dtype).tiny)
        err = (of - rf).abs()
        over = err > tol * scale + tol * rf.abs()
        assert not bool(over.any()), (f"output {{i}}: {{int(over.sum())}} of {{over.numel()}} elements outside "
                                      f"tolerance {{tol:g}} (max |err| {{float(err.max()):.3g}}, scale {{scale:.3g}})")


def run_both(inputs: list[Any]) -> None:
    model, new = models()
    with torch.no_grad():
        refs = tensors(model(*[v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]))
        outs = tensors(new(*inputs))
    check(outs, refs)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_inputs(seed: int) -> None:
    seed_all(seed)
    with torch.device(DEVICE):
        inputs = on_device(list(get_inputs()))
    run_both(inputs)


def test_hidden_shapes() -> None:
    if not hasattr(reference, "get_test_inputs"):
        pytest.skip("the task defines no get_test_inputs()")
    seed_all(0)
    with torch.device(DEVICE):
        cases = [on_device(list(c)) for c in reference.get_test_inputs()]
    assert cases, "get_test_inputs() returned no cases"
    for case in cases:
        run_both(case)


def test_apply_carries_state() -> None:
    model, new = models()
    state, carried = model.state_dict(), new.state_dict()
    assert sorted(state) == sorted(carried)
    for name, value in state.items():
        assert torch.equal(carried[name].cpu(), value.cpu()), f"{{name}} was not carried over"
'''

README = '''# {package}: {task}

Triton kernels found by kernelsmith for the task `{task}`, exported as a drop-in
package. It needs only torch and triton (kernelsmith is not imported).

| | |
|---|---|
| task | `{task}` (`{task_file}`{overrides}) |
| program | `{program}` ({origin}) |
| device | {device} |
| GPU | {gpu} |
| versions | torch {torch}, triton {triton}, python {python} |
| speedup | {speedup} |
| accuracy | max abs err {max_abs_err}, max rel err {max_rel_err} (referee, {trials} trials) |

## Use

```python
import torch
from {package} import Model, apply, get_init_inputs

model = Model(*get_init_inputs())        # or your own instance of the same module, weights loaded
fast = apply(model)                      # a ModelNew holding model's parameters and buffers
```

`apply(model, init_inputs=None)` builds `ModelNew(*init_inputs)` (default: the task's `get_init_inputs()`),
loads `model.state_dict()` into it and moves it to the model's device; when the names or shapes of the
parameters and buffers differ it raises `StateMismatch` naming them. The kernels were verified at the shapes in
`reference.py`; check other shapes with the tests below.

## Files

- `kernels.py`: the kernels and `ModelNew`, as the run recorded them
- `reference.py`: the task: `Model`, `get_inputs()`, `get_init_inputs()`{test_inputs_note}
- `test_package.py`: `ModelNew` against `Model` on fresh random inputs (seeds {seeds}){hidden_note}, with the
  referee's tolerances: `python -m pytest {package}` (from the folder holding `{package}`; without a GPU it runs
  through Triton's interpreter)
- `export.json`: where this came from
'''

INIT_OPTIMIZE = '''"""{title}: {task!r} with the parts kernelsmith evolved swapped in (`kernelsmith optimize`).

`apply(model)` switches your model instance to `ModelNew` in place: its forward runs the winning Triton kernels
for the swapped parts, bound to the model's own parameters and buffers (nothing copied), and the model's own
ops everywhere else. Without a GPU the kernels run through Triton's interpreter (TRITON_INTERPRET=1 is set on
import when torch sees no GPU): correct, not fast.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

if not torch.cuda.is_available():  # Triton reads this when the kernels are defined, below
    os.environ.setdefault("TRITON_INTERPRET", "1")

from . import reference  # noqa: E402
from .kernels import ModelNew  # noqa: E402
from .reference import Model, get_init_inputs, get_inputs  # noqa: E402

__all__ = ["Model", "ModelNew", "apply", "get_init_inputs", "get_inputs", "reference"]


class StateMismatch(ValueError):
    """The model given to `apply` is not the model this package was made for (its parameters and buffers
    differ by name or shape, or a swapped part finds no tensor of its own shape)."""


def apply(model: torch.nn.Module, init_inputs: Sequence[Any] | None = None) -> torch.nn.Module:
    """Switch `model` to `ModelNew` in place and return it. Its parameters and buffers are checked against the
    model this package was made for, built on the meta device from `init_inputs` (default: the task's
    `get_init_inputs()`); `StateMismatch` names what differs, and `model` is left as it was."""
    args = list(get_init_inputs() if init_inputs is None else init_inputs)
    with torch.device("meta"):
        expected = Model(*args).state_dict()
    state = model.state_dict()
    missing = sorted(k for k in expected if k not in state)
    unexpected = sorted(k for k in state if k not in expected)
    if missing or unexpected:
        raise StateMismatch(f"{{type(model).__name__}}'s state does not match the model's: missing keys "
                            f"{{missing or 'none'}}, unexpected keys {{unexpected or 'none'}}")
    shapes = [f"{{k}}: {{tuple(state[k].shape)}} vs {{tuple(v.shape)}}" for k, v in expected.items()
              if tuple(v.shape) != tuple(state[k].shape)]
    if shapes:
        raise StateMismatch(f"{{type(model).__name__}}'s shapes do not match the model's: " + "; ".join(shapes))
    before = model.__class__
    model.__class__ = ModelNew
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model._ks_attach()
    failed = [str(w.message) for w in caught if "kernelsmith: part" in str(w.message)]
    if failed:
        model.__class__ = before
        model.__dict__.pop("_ks_parts", None)
        raise StateMismatch("; ".join(failed))
    return model
'''

README_OPTIMIZE = '''# {package}: {task}

`{task}` with the parts `kernelsmith optimize` evolved swapped in, exported as a drop-in package. It needs
only torch and triton (kernelsmith is not imported).

| | |
|---|---|
| model | `{task}` (`{task_file}`{overrides}) |
| parts swapped in | {program} ({origin}) |
| device | {device} |
| GPU | {gpu} |
| versions | torch {torch}, triton {triton}, python {python} |
| speedup (whole model) | {speedup} |
| accuracy | max abs err {max_abs_err}, max rel err {max_rel_err} (referee, lenient policy) |

{parts_table}

## Use

```python
from {package} import Model, apply, get_init_inputs

model = Model(*get_init_inputs())        # or your own instance, weights loaded
apply(model)                             # switched in place: the swapped parts run the Triton kernels
```

`apply(model)` checks the names and shapes of the model's parameters and buffers against the model this package
was made for (`StateMismatch` names what differs), switches its class to `ModelNew` and binds each swapped part
to the model's own tensors: nothing is copied, and later weight loads, `.to()` or `.half()` are followed. The
kernels were verified at the shapes in `reference.py`.

## Files

- `kernels.py`: `optimized.py` — the model's file, the winning kernels of each part, and `ModelNew`
- `reference.py`: the model: `Model`, `get_inputs()`, `get_init_inputs()`{test_inputs_note}
- `test_package.py`: `ModelNew` against `Model` on fresh random inputs (seeds {seeds}){hidden_note}, with the
  referee's tolerances: `python -m pytest {package}` (from the folder holding `{package}`)
- `export.json`: where this came from
'''
