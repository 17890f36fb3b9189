"""bench/process_cpu.py's pure parts: /proc parsing, labels and the sums (no process sampled)."""

from __future__ import annotations

import pytest

from tests.unit.bench_scripts import bench_script


def _stat(name: str, utime: int, stime: int, start: int) -> str:
    after = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), str(stime), "0", "0", "20", "0",
             "1", "0", str(start), "0"]
    return f"1234 ({name}) " + " ".join(after) + "\n"


def test_a_thread_name_with_spaces_and_parentheses_is_read_whole():
    with bench_script("process_cpu") as cpu:
        name, seconds, start = cpu.parse_stat(_stat("Executor task (x) 1", 250, 50, 777))
    assert name == "Executor task (x) 1" and seconds == pytest.approx(300 / cpu.CLOCK_TICKS) and start == 777


def test_labels_name_a_jvm_by_its_starter_and_python_by_its_script():
    with bench_script("process_cpu") as cpu:
        pytest_label = cpu.process_label(["/v/bin/python3.11", "-m", "pytest", "-q", "tests/unit"], None)
        assert pytest_label == "python pytest unit"  # the first two words, file names without folders
        assert cpu.process_label(["/usr/bin/java", "-cp", "x"], pytest_label) == "java <- python pytest unit"
        assert cpu.process_kind("java <- python pytest unit") == "JVM of a pytest session"
        airflow = cpu.process_label(["/v/bin/python", "/v/bin/airflow", "dags", "test"], None)
        assert cpu.process_kind(f"java <- {airflow}") == "JVM of a spark-submit"
        launcher = cpu.process_label(["bash", "/s/bin/spark-class", "org.apache.spark.deploy.SparkSubmit"], None)
        assert launcher == "bash spark-class org.apache.spark.deploy.SparkSubmit"  # a shell: labelled again once
        assert cpu.process_kind(f"java <- {launcher}") == "JVM of Spark's launcher"  # it has exec'd the JVM
        assert cpu.process_kind(cpu.process_label(["python", "-m", "pyspark.daemon"], None)) == "PySpark Python workers"
        assert cpu.process_label([], None) == "?"
        # thread names as the kernel keeps them: cut to 15 characters
        assert cpu.thread_kind("java <- x", "C2 CompilerThre") == "jit compiler"
        assert cpu.thread_kind("java <- x", "Executor task l") == "spark tasks"
        assert cpu.thread_kind("java <- x", "GC Thread#1") == "garbage collector"
        assert cpu.thread_kind("java <- x", "Thread-12") == "driver (py4j calls)"
        assert cpu.thread_kind("java <- x", "netty-rpc") == "jvm other"
        assert cpu.thread_kind("python pytest", "python") == ""


def test_the_breakdown_counts_each_thread_from_its_first_sample_and_a_reused_id_as_a_new_thread():
    with bench_script("process_cpu") as cpu:
        jvm = "java <- python pytest tests"
        first = {(1, 1, 10): cpu.ThreadSample((1, 1, 10), jvm, "C1 CompilerThre", 5.0),
                 (2, 2, 10): cpu.ThreadSample((2, 2, 10), "python pytest tests", "python", 3.0)}
        last = {(1, 1, 10): cpu.ThreadSample((1, 1, 10), jvm, "C1 CompilerThre", 7.5),  # +2.5
                (2, 2, 10): cpu.ThreadSample((2, 2, 10), "python pytest tests", "python", 3.0),  # idle
                (2, 2, 99): cpu.ThreadSample((2, 2, 99), jvm, "Executor task l", 4.0)}  # born later
        result = cpu.breakdown(first, last, wall_seconds=10.0, machine_cpu_seconds=8.0)
        assert result.attributed_cpu_seconds == pytest.approx(6.5)
        assert result.by_jvm_thread_kind == {"spark tasks": 4.0, "jit compiler": 2.5}
        assert result.by_process_kind == {"JVM of a pytest session": 6.5}
        lines = cpu.report_lines(result)
        assert lines[0].startswith("wall 10 s; machine CPU 8 s (0.80 cores") and "not attributed 2 s" in lines[0]


def test_a_run_without_a_command_is_refused():
    with bench_script("process_cpu") as cpu, pytest.raises(SystemExit):
        cpu.main(["--interval", "0.1"])
