import pytest

from solaris.config import ConfigError, load_config, parse_overrides


def test_default_config_loads_and_paths_are_absolute():
    config = load_config()
    assert config.warehouse.is_absolute()
    assert config.model.embedding_dim == 64
    assert config.table_path("events").endswith("/events")


def test_override_changes_nested_value_and_parses_types():
    config = load_config(overrides=["precompute.ttl_hours=3", "spark.ui_enabled=true"])
    assert config.precompute.ttl_hours == 3.0
    assert config.spark.ui_enabled is True


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"precompute\.ttl_hour"):
        load_config(overrides=["precompute.ttl_hour=3"])


def test_bad_value_is_named():
    with pytest.raises(ConfigError, match=r"model\.embedding_dim"):
        load_config(overrides=["model.embedding_dim=-4"])
    with pytest.raises(ConfigError, match=r"ingest"):
        load_config(overrides=["ingest.rating_min=9", "ingest.rating_max=1"])


def test_table_names_must_be_plain_folders():
    with pytest.raises(ConfigError, match="tables"):
        load_config(overrides=["tables.events=../escape"])


def test_bad_yaml_file_reports_path(tmp_path):
    bad = tmp_path / "conf" / "x.yaml"
    bad.parent.mkdir()
    bad.write_text("warehouse: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_parse_overrides_rejects_malformed():
    assert parse_overrides(["a.b=1", "a.c=x"]) == {"a": {"b": 1, "c": "x"}}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])
    with pytest.raises(ConfigError):
        parse_overrides(["a..b=1"])


def test_paths_are_confined_to_warehouse(tmp_path):
    config = load_config(overrides=[f"warehouse={tmp_path}"])
    assert config.resolve_under_warehouse("snapshots/x.json") == tmp_path / "snapshots" / "x.json"
    with pytest.raises(ConfigError, match="escapes"):
        config.resolve_under_warehouse("../../etc/passwd")
    with pytest.raises(ConfigError, match="escapes"):
        config.resolve_under_warehouse("/etc/passwd")


def test_warehouse_env_var_overrides_file_but_not_flags(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLARIS_WAREHOUSE", str(tmp_path / "from_env"))
    assert load_config().warehouse == tmp_path / "from_env"
    assert load_config(overrides=[f"warehouse={tmp_path / 'flag'}"]).warehouse == tmp_path / "flag"


def test_packaged_yaml_is_exactly_the_typed_defaults():
    """One source of defaults: conf/solaris.yaml documents every key with the value solaris/config.py has."""
    import yaml

    from solaris.config import SolarisConfig, default_config_file

    raw = yaml.safe_load(default_config_file().read_text())
    assert raw == SolarisConfig().model_dump(mode="json")


def test_yaml_header_override_examples_are_accepted():
    import re

    from solaris.config import default_config_file

    header = [line for line in default_config_file().read_text().splitlines() if line.startswith("#")]
    examples = re.findall(r"--set (\S+?)`?(?=\s|$)", "\n".join(header))
    assert examples and load_config(overrides=examples).precompute.ttl_hours == 3


def test_default_config_is_package_data_and_anchors_paths_at_the_checkout():
    from pathlib import Path

    import solaris
    from solaris.config import default_config_file

    root = Path(solaris.__file__).resolve().parent.parent
    assert Path(str(default_config_file())) == root / "conf" / "solaris.yaml"  # editable install of this checkout
    config = load_config()
    assert config.warehouse == root / "warehouse" and config.spark.jars_dir == str(root / "jars")


def test_relative_paths_anchor_at_solaris_home_then_the_config_file_then_the_working_dir(tmp_path, monkeypatch):
    from solaris.config import base_dir_for

    explicit = tmp_path / "project" / "conf" / "prod.yaml"
    explicit.parent.mkdir(parents=True)
    explicit.write_text("warehouse: data\nspark: {jars_dir: lib}\n")
    config = load_config(explicit)
    assert config.warehouse == tmp_path / "project" / "data"
    assert config.spark.jars_dir == str(tmp_path / "project" / "lib")
    # the packaged default outside a checkout (an installed wheel): the working directory
    installed = tmp_path / "site-packages" / "solaris" / "conf" / "solaris.yaml"
    monkeypatch.chdir(tmp_path)
    assert base_dir_for(installed, explicit=False) == tmp_path
    monkeypatch.setenv("SOLARIS_HOME", str(tmp_path / "home"))
    assert base_dir_for(installed, explicit=False) == tmp_path / "home"
    assert load_config(explicit).warehouse == tmp_path / "home" / "data"
