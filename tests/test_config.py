"""The run configuration: YAML plus flags, validated, errors naming the setting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelsmith.settings import EvalSettings, SettingsError
from kernelsmith.workshop.config import ConfigError, load_config


def test_defaults_follow_the_recipe() -> None:
    cfg = load_config()
    assert (cfg.rounds, cfg.temperature, cfg.top_p, cfg.response_mode) == (40, 0.6, 0.95, "full")
    assert cfg.models == []  # the offline proposer


def test_yaml_then_flags(tmp_path: Path) -> None:
    p = tmp_path / "run.yaml"
    p.write_text("rounds: 10\npopulation: 4\nmodels:\n  - name: qwen\n    base_url: http://localhost:8000/v1\n"
                 "    weight: 3\noverrides:\n  batch_size: 16\n")
    cfg = load_config(p, {"rounds": 12, "device": None})
    assert cfg.rounds == 12 and cfg.population == 4 and cfg.device == "cuda"
    assert cfg.models[0].base_url == "http://localhost:8000/v1" and cfg.models[0].weight == 3
    assert cfg.overrides == {"batch_size": 16}


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("rounds: 0\n", "setting 'rounds': Input should be greater than or equal to 1"),
        ("roundz: 5\n", "setting 'roundz': unknown setting"),
        ("device: tpu\n", "setting 'device'"),
        ("models:\n  - name: m\n    weight: -1\n", "setting 'models.0.weight'"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("rounds: [\n", "not valid YAML"),
    ],
)
def test_bad_values_name_file_and_setting(tmp_path: Path, yaml_text: str, needle: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml_text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(p) in str(exc.value) and needle in str(exc.value)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config("/nonexistent/run.yaml")


@pytest.mark.parametrize(
    ("yaml_text", "needle"),
    [
        ("eval_timeout_s: .nan\n", "setting 'eval_timeout_s': Input should be a finite number (got nan) "
                                   "(allowed: > 0 and <= 86400)"),
        ("request_timeout_s: .inf\n", "(allowed: > 0 and <= 86400)"),
        ("max_cost_usd: -1\n", "setting 'max_cost_usd': Input should be greater than 0 (got -1)"),
        ("rounds: 100000000\n", "(allowed: >= 1 and <= 100000)"),
        ("models:\n  - name: m\n    weight: .inf\n", "setting 'models.0.weight': Input should be a finite number"),
        ("temperature: 5\n", "(allowed: >= 0 and <= 2)"),
    ],
)
def test_numbers_are_finite_and_bounded_and_the_error_names_the_limit(tmp_path: Path, yaml_text: str,
                                                                      needle: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml_text)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value).startswith(f"{p}: ") and needle in str(exc.value), str(exc.value)
    assert exc.value.file == str(p) and "\n" not in str(exc.value)


def test_a_bad_flag_is_blamed_on_the_command_line_not_the_file(tmp_path: Path) -> None:
    p = tmp_path / "ok.yaml"
    p.write_text("rounds: 3\n")
    with pytest.raises(ConfigError) as exc:
        load_config(p, {"eval_timeout_s": float("inf")})
    assert str(exc.value).startswith("command line: setting 'eval_timeout_s'") and exc.value.file is None


def test_only_a_bounded_regular_file_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="it is a FIFO, not a regular file"):
        load_config(fifo)  # refused, not waited on


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"timeout_s": float("nan")}, "timeout_s nan: Input should be a finite number (allowed: > 0 and <= 86400)"),
        ({"timeout_s": "Infinity"}, "timeout_s 'Infinity': Input should be a finite number"),
        ({"trials": 100000}, "(allowed: >= 1 and <= 100)"),
        ({"tolerance": 1e9}, "(allowed: > 0 and <= 1)"),
        ({"timing": {"budget_s": 1e9}}, "timing option budget_s 1000000000.0: must be a finite number in [0.01, 600]"),
        ({"timing": {"max_reps": 2.5}}, "timing option max_reps 2.5: must be an integer"),
        ({"timing": {"min_reps": 50, "max_reps": 40}}, "min_reps must not exceed max_reps"),
        ({"timing": {"graph": "sometimes"}}, "expected auto, on or off"),
    ],
)
def test_evaluation_settings_refuse_what_no_evaluation_could_use(settings: dict, needle: str) -> None:
    """The one settings model: the CLI, the workshop and the HTTP service all validate through it."""
    with pytest.raises(SettingsError) as exc:
        EvalSettings(**settings)
    assert needle in str(exc.value), str(exc.value)
