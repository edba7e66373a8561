"""The run configuration: YAML plus flags, validated, errors naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

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
