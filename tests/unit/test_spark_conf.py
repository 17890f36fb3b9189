import pytest

from solaris.config import load_config
from solaris.spark import SparkSetupError, delta_jars, session_conf


def test_session_conf_has_delta_utc_arrow_and_local_jars():
    config = load_config()
    conf = session_conf(config, master="local[3]")
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    jars = conf["spark.jars"].split(",")
    assert any("delta-spark_" in jar for jar in jars) and any("delta-storage-" in jar for jar in jars)
    assert "spark.jars.packages" not in conf  # never an Ivy download at session start


def test_master_defaults_to_config():
    config = load_config(overrides=["spark.master=local[1]"])
    assert session_conf(config)["spark.master"] == "local[1]"


def test_missing_jars_explain_setup(tmp_path):
    with pytest.raises(SparkSetupError, match="make setup"):
        delta_jars(tmp_path)


def test_adaptive_execution_is_on_by_default_and_can_be_turned_off():
    assert session_conf(load_config())["spark.sql.adaptive.enabled"] == "true"
    assert session_conf(load_config(overrides=["spark.adaptive=false"]))["spark.sql.adaptive.enabled"] == "false"


def test_the_codegen_cache_is_sized_from_config_not_sparks_default_of_100():
    assert session_conf(load_config())["spark.sql.codegen.cache.maxEntries"] == "2000"
    conf = session_conf(load_config(overrides=["spark.codegen_cache_entries=500"]))
    assert conf["spark.sql.codegen.cache.maxEntries"] == "500"
