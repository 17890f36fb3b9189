import os
from pathlib import Path

import pytest

from solaris.config import ConfigError, load_config
from solaris.spark import (
    CLUSTER_SHUFFLE_PARTITIONS,
    SparkSetupError,
    delta_jars,
    driver_java_options,
    local_threads,
    page_size_bytes,
    session_conf,
    shuffle_partitions,
)


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
    # production keeps whole-stage code generation and adaptive execution; the tests turn both off
    assert conf["spark.sql.codegen.wholeStage"] == conf["spark.sql.adaptive.enabled"] == "true"
    tests = session_conf(load_config(overrides=["spark.whole_stage_codegen=false", "spark.adaptive=false"]))
    assert tests["spark.sql.codegen.wholeStage"] == tests["spark.sql.adaptive.enabled"] == "false"


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


def test_the_tungsten_page_size_is_set_from_config_not_grown_with_the_heap():
    # less the 16-byte header of the long[] holding a page: a 2 MB page then fills one G1 region exactly
    assert session_conf(load_config())["spark.buffer.pageSize"] == str(2 * 1024 * 1024 - 16)
    assert session_conf(load_config(overrides=["spark.buffer_page_size=16m"]))["spark.buffer.pageSize"] == str(
        16 * 1024 * 1024 - 16)
    assert page_size_bytes("512k") == 512 * 1024 - 16 and page_size_bytes("1g") == (1 << 30) - 16
    for bad in ("2 MB", "0m", "2", "2t"):
        with pytest.raises(ConfigError):
            load_config(overrides=[f"spark.buffer_page_size={bad}"])


def test_a_one_stage_driver_gets_the_c1_jit_and_a_session_driver_keeps_c2_with_the_parallel_collector():
    config = load_config(overrides=["spark.class_data_archive=null"])
    assert session_conf(config, one_stage=True)["spark.driver.extraJavaOptions"] == (
        "-Duser.timezone=UTC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")
    assert session_conf(config)["spark.driver.extraJavaOptions"] == "-Duser.timezone=UTC -XX:+UseParallelGC"
    plain = load_config(overrides=["spark.class_data_archive=null", "spark.one_stage_java_options=",
                                   "spark.session_java_options="])
    assert driver_java_options(plain, one_stage=True) == "-Duser.timezone=UTC"
    assert driver_java_options(plain) == "-Duser.timezone=UTC"


def test_the_class_data_archive_is_used_only_when_set_up_wrote_it(tmp_path):
    archive = tmp_path / "spark-classes.jsa"
    config = load_config(overrides=[f"spark.class_data_archive={archive}"])
    assert "SharedArchiveFile" not in driver_java_options(config)  # absent file: the JVM loads classes as usual
    archive.write_bytes(b"archive")
    assert f"-XX:SharedArchiveFile={archive}" in driver_java_options(config).split()
    assert f"-XX:SharedArchiveFile={archive}" in driver_java_options(config, one_stage=True).split()


def test_a_relative_class_data_archive_is_anchored_like_the_jars(tmp_path):
    config = load_config(overrides=["spark.class_data_archive=jars/spark-classes.jsa"])
    assert config.spark.class_data_archive == str(Path(config.spark.jars_dir) / "spark-classes.jsa")


@pytest.mark.parametrize(("master", "threads"), [
    ("local", 1), ("local[3]", 3), ("local[4,2]", 4), ("local[*]", os.cpu_count() or 1),
    ("spark://host:7077", None), ("yarn", None), ("k8s://https://api:6443", None), ("local-cluster[2,1,1024]", None),
])
def test_local_threads_are_read_from_the_master(master, threads):
    assert local_threads(master) == threads


def test_shuffle_partitions_follow_a_local_masters_threads_unless_the_config_sets_them():
    config = load_config()
    assert config.spark.shuffle_partitions is None
    assert session_conf(config, master="local[3]")["spark.sql.shuffle.partitions"] == "3"
    assert session_conf(config, master="yarn")["spark.sql.shuffle.partitions"] == str(CLUSTER_SHUFFLE_PARTITIONS)
    # Delta's snapshot rebuild follows them, never below two tasks
    assert session_conf(config, master="local[1]")["spark.databricks.delta.snapshotPartitions"] == "2"
    fixed = load_config(overrides=["spark.shuffle_partitions=16"])
    assert shuffle_partitions(fixed, "local[2]") == 16
    assert session_conf(fixed, master="yarn")["spark.databricks.delta.snapshotPartitions"] == "16"
    # so do the tasks of a parallel file listing (VACUUM's), instead of Spark's 10,000
    listing = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
    assert session_conf(config, master="local[3]")[listing] == "3"
    assert session_conf(fixed, master="yarn")[listing] == "16"
