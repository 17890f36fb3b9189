"""The pipeline's Spark settings reach the running session (the shared test SparkSession)."""

from solaris.config import load_config
from solaris.spark import codegen_compilations, session_conf
from tests.world import TEST_OVERRIDES


def test_the_session_keeps_compiled_query_code_and_reuses_it(spark):
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == str(load_config().spark.codegen_cache_entries)

    def query():
        # a query shape no other test runs, so its first run must compile
        return (spark.range(50).selectExpr("id % 7 AS k", "id * 3 + 11 AS v")
                .groupBy("k").agg({"v": "max"}).collect())

    # the tests' session runs without generated code (tests.world.TEST_OVERRIDES): hardly anything
    # compiles (an operator or two that Spark always generates)
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"
    start = codegen_compilations(spark)
    interpreted = query()
    before = codegen_compilations(spark)
    # the defaults' generated code, for this test only (both are run-time settings of the session)
    conf = session_conf(load_config())
    keys = ("spark.sql.codegen.wholeStage", "spark.sql.codegen.factoryMode")
    try:
        for key in keys:
            spark.conf.set(key, conf[key])
        first = query()
        compiled = codegen_compilations(spark) - before
        second = query()
        assert compiled > before - start
        assert codegen_compilations(spark) - before == compiled  # the same code again: taken from the cache
    finally:
        for key in keys:
            spark.conf.set(key, session_conf(load_config(overrides=TEST_OVERRIDES))[key])
    assert sorted(first) == sorted(second) == sorted(interpreted)


def test_the_session_allocates_tungsten_pages_of_the_configured_size(spark):
    """A broadcast relation takes whole pages: the driver's memory manager must use the config's size."""
    memory = spark.sparkContext._jsc.sc().env().memoryManager()
    assert load_config().spark.buffer_page_size == "2m" and memory.pageSizeBytes() == 2 * 1024 * 1024 - 16
