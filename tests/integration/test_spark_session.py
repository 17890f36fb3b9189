"""The pipeline's Spark settings reach the running session (the shared test SparkSession)."""

from solaris.config import load_config
from solaris.spark import codegen_compilations


def test_the_session_keeps_compiled_query_code_and_reuses_it(spark):
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == str(load_config().spark.codegen_cache_entries)
    # the tests' settings (tests/world.py: why) reach the session; expressions are still compiled
    assert spark.conf.get("spark.sql.codegen.wholeStage") == spark.conf.get("spark.sql.adaptive.enabled") == "false"

    def query():
        # a query shape no other test runs, so its first run must compile
        return (spark.range(50).selectExpr("id % 7 AS k", "id * 3 + 11 AS v")
                .groupBy("k").agg({"v": "max"}).collect())

    before = codegen_compilations(spark)
    first = query()
    compiled = codegen_compilations(spark) - before
    second = query()
    assert compiled > 0
    assert codegen_compilations(spark) - before == compiled  # the same code again: taken from the cache
    assert sorted(first) == sorted(second)


def test_the_session_allocates_tungsten_pages_of_the_configured_size(spark):
    """A broadcast relation takes whole pages: the driver's memory manager must use the config's size."""
    memory = spark.sparkContext._jsc.sc().env().memoryManager()
    assert load_config().spark.buffer_page_size == "2m" and memory.pageSizeBytes() == 2 * 1024 * 1024 - 16
