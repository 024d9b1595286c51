"""The benchmark runs end to end on a tiny configuration and writes a complete report (no timing is asserted)."""

import json
import subprocess
import sys

import pytest
import torch

from tests.helpers.launch import REPO, load_benchmark_module


@pytest.mark.slow
def test_benchmark_runs_every_model_and_writes_its_report(tmp_path):
    benchmark = load_benchmark_module("benchmark")
    output = tmp_path / "performance.md"
    record = benchmark.main(
        ["--configs", "tiny", "--rounds", "3", "--budget", "0", "--peak-size", "128", "--keep-denormals",
         "--output", str(output)]
    )  # fmt: skip

    report = output.read_text()
    assert "## tiny:" in report and "torch " in report and "transformers " in report
    assert record["flushed_denormals"] is False and "denormals flushed" not in report
    for model in ("ours", "marian", "bart", "torch_nn", "seed"):
        assert f"| {model} |" in report
    saved = json.loads(output.with_suffix(".json").read_text())
    assert saved == json.loads(json.dumps(record))
    rows = saved["results"][0]["models"]
    assert rows["marian"]["train_vs_marian"] == 1.0 and rows["marian"]["train_vs_marian_quartiles"] == [1.0, 1.0]
    for name in ("ours", "bart", "torch_nn", "seed"):
        lower, upper = rows[name]["train_vs_marian_quartiles"]
        assert lower <= rows[name]["train_vs_marian"] <= upper, name
        if lower < upper:
            assert f"| {rows[name]['train_vs_marian']:.2f} ({lower:.2f}-{upper:.2f}) |" in report, name
    assert saved["results"][0]["matmul_probe_gflops"] > 0
    for name, row in rows.items():
        assert row["train_tokens_per_s"] > 0 and row["train_rounds"] == 3, name
        assert 0 < row["train_mfu"] and f"| {row['train_mfu']:.0%} |" in report, name
        assert row["parameters"] > 0
    for name in ("ours", "marian", "bart", "seed"):
        assert rows[name]["greedy_tokens_per_s"] > 0 and rows[name]["greedy_vs_marian"] > 0
    assert "beam4_tokens_per_s" in rows["ours"] and "beam4_tokens_per_s" not in rows["seed"]
    assert "greedy_tokens_per_s" not in rows["torch_nn"]


def test_speed_ratios_are_per_round_medians_with_quartiles():
    benchmark = load_benchmark_module("benchmark")
    seconds = {"marian": [1.0, 1.0, 2.0, 1.0, 1.0], "ours": [0.5, 0.5, 2.0, 1.0, 2.0]}
    ratios = benchmark.speed_ratios(seconds, "marian")
    # Per-round ratios 2, 2, 1, 1, 0.5: each round compares the models of that round only.
    assert ratios["ours"] == (1.0, 1.0, 2.0)
    assert ratios["marian"] == (1.0, 1.0, 1.0)
    assert benchmark.speed_ratios(seconds, "bart") == {}
    assert benchmark.speed_ratios({"marian": [1.0], "ours": [0.8]}, "marian")["ours"] == (1.25, 1.25, 1.25)


def test_training_flops_count_the_output_projection_and_every_layer():
    benchmark = load_benchmark_module("benchmark")
    c = dict(benchmark.CONFIGS["tiny"])
    base = benchmark.training_flops(c)
    more_vocabulary = benchmark.training_flops(dict(c, vocab_size=c["vocab_size"] + 1))
    assert more_vocabulary - base == 3 * 2 * c["batch"] * c["length"] * c["d_model"]
    assert benchmark.training_flops(dict(c, layers=2)) > base


@pytest.mark.slow
def test_benchmark_runs_in_bf16_autocast_and_reports_mfu_against_a_stated_peak(tmp_path):
    """The GPU mode's code path (autocast, stated peak), exercised on the CPU with two models."""
    benchmark = load_benchmark_module("benchmark")
    output = tmp_path / "performance.md"
    record = benchmark.main(
        ["--configs", "tiny", "--models", "ours,marian", "--dtype", "bf16", "--peak-tflops", "0.001",
         "--peak-size", "128", "--rounds", "3", "--budget", "0", "--no-beam", "--keep-denormals",
         "--output", str(output)]
    )  # fmt: skip
    assert record["dtype"] == "bf16" and record["stated_peak_tflops"] == 0.001
    assert "MFU (stated peak)" in output.read_text()
    rows = record["results"][0]["models"]
    assert set(rows) == {"ours", "marian"} and "beam4_tokens_per_s" not in rows["ours"]


@pytest.mark.slow
def test_a_model_that_cannot_run_is_reported_and_the_others_are_timed(tmp_path, monkeypatch):
    benchmark = load_benchmark_module("benchmark")

    def broken(c):
        raise RuntimeError("no kernel for this device")

    monkeypatch.setitem(benchmark.ENTRIES, "bart", benchmark.Entry("bart", broken, True))
    output = tmp_path / "performance.md"
    record = benchmark.main(
        ["--configs", "tiny", "--models", "ours,marian,bart", "--peak-size", "128", "--rounds", "3", "--budget", "0",
         "--no-beam", "--keep-denormals", "--output", str(output)]
    )  # fmt: skip
    result = record["results"][0]
    assert set(result["models"]) == {"ours", "marian"}
    assert result["failed"] == {"bart": "RuntimeError: no kernel for this device"}
    assert "`bart` did not run: RuntimeError: no kernel for this device" in output.read_text()
    assert result["models"]["ours"]["greedy_tokens_per_s"] > 0


@pytest.mark.slow
def test_static_cache_entries_time_generation_only(tmp_path):
    benchmark = load_benchmark_module("benchmark")
    output = tmp_path / "static.md"
    record = benchmark.main(
        ["--configs", "tiny", "--models", "ours,ours_static,marian_static", "--rounds", "3", "--budget", "0",
         "--peak-size", "128", "--keep-denormals", "--output", str(output)]
    )  # fmt: skip
    rows = record["results"][0]["models"]
    assert record["results"][0]["failed"] == {}
    for name in ("ours_static", "marian_static"):
        assert "train_tokens_per_s" not in rows[name] and rows[name]["train_memory_mb"] is None, name
        assert rows[name]["greedy_tokens_per_s"] > 0 and rows[name]["beam4_tokens_per_s"] > 0, name
        assert f"| {name} | {rows[name]['parameters'] / 1e6:.2f}M | - | - | - | - |" in output.read_text()
    assert rows["ours"]["train_tokens_per_s"] > 0


@pytest.mark.slow
def test_benchmark_with_kept_freed_memory_says_so_in_its_report(tmp_path):
    # In a subprocess: the allocator setting lasts for the whole process.
    output = tmp_path / "kept.md"
    command = [
        sys.executable, str(REPO / "benchmarks" / "benchmark.py"), "--configs", "tiny", "--models", "ours,marian",
        "--rounds", "3", "--budget", "0", "--peak-size", "128", "--no-beam", "--keep-freed-memory",
        "--output", str(output),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO)
    assert "freed memory kept for reuse" in output.read_text()
    assert json.loads(output.with_suffix(".json").read_text())["kept_memory"] is True
    # By default a CPU run flushes denormals, and says so.
    assert "denormals flushed to zero" in output.read_text()
    assert json.loads(output.with_suffix(".json").read_text())["flushed_denormals"] is True


@pytest.mark.slow
def test_denormals_are_flushed_on_every_thread_or_not_at_all():
    # In subprocesses: the setting lasts for the whole process. Set before any parallel work, the intra-op
    # threads inherit it; set after, only the calling thread would flush, so it is undone. That needs a second
    # intra-op thread (with one, the calling thread does all the work and a late flush holds everywhere): the
    # program asks for two whatever OMP_NUM_THREADS says, and reports how many threads its parallel work started
    # (an OpenMP thread limit may still keep it to the calling thread).
    program = """
import os, sys, torch
torch.set_num_threads(2)
from benchmarks import benchmark

def threads():  # the process's threads, where Linux lists them
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None

alone = threads()
if sys.argv[1] == "late":
    torch.full((1 << 20,), 1.0).sum()  # starts the intra-op threads first
flushed = benchmark.flush_denormals()
products = torch.full((1 << 20,), 1e-30) * 1e-9  # denormal unless flushed; counted as integers
started = threads() - alone if alone is not None else torch.get_num_threads() - 1
print(started, flushed, int(products.view(torch.int32).count_nonzero()))
"""
    for when, expected in (("early", "True 0"), ("late", f"False {1 << 20}")):
        result = subprocess.run(
            [sys.executable, "-c", program, when], check=True, capture_output=True, text=True, cwd=REPO
        )
        started, *outcome = result.stdout.split()[-3:]
        if when == "late" and int(started) == 0:
            pytest.skip("the parallel work ran on the calling thread alone: no thread to miss a late flush")
        assert outcome == expected.split(), when


@pytest.mark.slow
def test_deployed_engines_time_generation_with_ours_weights_and_report_int8_memory(tmp_path):
    for module in ("ctranslate2", "onnxruntime", "onnxscript"):
        pytest.importorskip(module)
    benchmark = load_benchmark_module("benchmark")
    output = tmp_path / "deployed.md"
    record = benchmark.main(
        ["--configs", "tiny", "--deployed", "--no-train", "--generation-batch-sizes", "8", "3", "--rounds", "1",
         "--budget", "0", "--peak-size", "128", "--keep-denormals", "--output", str(output)]
    )  # fmt: skip
    engines = ("ours_ct2", "ours_ct2_int8", "ours_onnx", "ours_onnx_int8", "ours_int8")
    assert record["models"] == ["ours", "marian", *engines] and record["generation_batch_sizes"] == [8, 3]
    result = record["results"][0]
    assert result["failed"] == {} and result["matmul_probe_gflops"] is None
    rows, report = result["models"], output.read_text()
    for name in ("ours", "marian", *engines):
        row = rows[name]
        assert "train_tokens_per_s" not in row and row["train_memory_mb"] is None, name
        for key in ("greedy", "beam4", "greedy_b3", "beam4_b3"):
            assert row[f"{key}_tokens_per_s"] > 0 and row[f"{key}_vs_marian"] > 0, (name, key)
            lower, upper = row[f"{key}_vs_marian_quartiles"]
            assert lower <= row[f"{key}_vs_marian"] <= upper, (name, key)
    for name in engines:
        assert rows[name]["parameters"] == rows["ours"]["parameters"], name  # ours's model, in another form
        assert rows[name]["weights_mb"] > 0, name
        assert f"| {name} | {rows[name]['parameters'] / 1e6:.2f}M | - | - | - | - |" in report, name
        assert f"| {name} | {rows[name]['greedy_b3_tokens_per_s']:,.0f} |" in report, name
    # int8 weights against the same form in float32: CTranslate2's model.bin, the ONNX graphs, torch's state_dict.
    for name in ("ours_ct2_int8", "ours_onnx_int8", "ours_int8"):
        assert 0 < rows[name]["weights_vs_fp32"] < 1, name
        assert rows[name]["weights_vs_fp32"] == rows[name]["weights_mb"] / rows[name]["weights_fp32_mb"]
        assert f"| {name} | {rows[name]['weights_mb']:,.1f} | {rows[name]['weights_vs_fp32']:.2f} |" in report
    assert rows["ours_ct2_int8"]["weights_fp32_mb"] == rows["ours_ct2"]["weights_mb"]
    assert rows["ours_onnx_int8"]["weights_fp32_mb"] == rows["ours_onnx"]["weights_mb"]
    assert rows["ours_int8"]["weights_fp32_mb"] == rows["ours"]["weights_mb"]
    assert "Generation at batch 3:" in report and "| model | weights MB | x fp32 |" in report
    assert "Matmul probe timed in the training rounds" not in report


@pytest.mark.slow
def test_a_deployed_engine_that_is_not_installed_is_skipped_with_its_reason(tmp_path, monkeypatch):
    benchmark = load_benchmark_module("benchmark")
    require = benchmark._require

    def without_ctranslate2(module, *args):
        if module == "ctranslate2":
            raise ImportError("ctranslate2 is not installed: skipped")
        require(module, *args)

    monkeypatch.setattr(benchmark, "_require", without_ctranslate2)
    output = tmp_path / "deployed.md"
    record = benchmark.main(
        ["--configs", "tiny", "--models", "ours,marian,ours_ct2,ours_int8", "--no-train", "--no-beam", "--rounds",
         "1", "--budget", "0", "--peak-size", "128", "--keep-denormals", "--output", str(output)]
    )  # fmt: skip
    result = record["results"][0]
    assert result["failed"] == {"ours_ct2": "ImportError: ctranslate2 is not installed: skipped"}
    assert set(result["models"]) == {"ours", "marian", "ours_int8"}
    assert result["models"]["ours_int8"]["greedy_tokens_per_s"] > 0
    assert "`ours_ct2` did not run: ImportError: ctranslate2 is not installed" in output.read_text()


@pytest.mark.slow
def test_deployed_engines_compute_in_the_runs_dtype_on_cuda_and_in_float32_on_the_cpu(tmp_path):
    benchmark = load_benchmark_module("benchmark")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert benchmark.ct2_compute_type(cpu, torch.float32, None) == "default"
    assert benchmark.ct2_compute_type(cpu, torch.float32, "int8") == "default"  # the converted int8 weights
    assert benchmark.ct2_compute_type(cuda, torch.float32, None) == "float32"
    assert benchmark.ct2_compute_type(cuda, torch.bfloat16, None) == "bfloat16"
    assert benchmark.ct2_compute_type(cuda, torch.float16, "int8") == "int8_float16"
    with pytest.raises(RuntimeError, match="float32 activations only"):
        benchmark.ct2_compute_type(cpu, torch.bfloat16, None)
    # The CPU-only engines refuse another dtype in the benchmark's table, with the reason.
    record = benchmark.main(
        ["--configs", "tiny", "--models", "ours,marian,ours_int8", "--dtype", "bf16", "--no-train", "--no-beam",
         "--rounds", "1", "--budget", "0", "--peak-size", "128", "--output", str(tmp_path / "d.md")]
    )  # fmt: skip
    reason = "RuntimeError: quantize_dynamic is timed with float32 activations only (--dtype fp32)"
    assert record["results"][0]["failed"] == {"ours_int8": reason}


def test_deployed_option_adds_the_engines_and_its_own_report():
    benchmark = load_benchmark_module("benchmark")
    args = benchmark.parse_arguments(["--deployed", "--generation-batch-sizes", "8", "32", "8"])
    assert args.models == ["ours", "marian", "ours_ct2", "ours_ct2_int8", "ours_onnx", "ours_onnx_int8", "ours_int8"]
    assert args.output == "benchmarks/results/performance-deployed.md" and args.generation_batch_sizes == [8, 32]
    args = benchmark.parse_arguments(["--deployed", "--models", "marian", "--output", "x.md"])
    assert args.models[:2] == ["marian", "ours_ct2"] and args.output == "x.md"
    default = benchmark.parse_arguments([])
    assert not set(default.models) & set(benchmark.DEPLOYED_MODELS)
    assert default.output == "benchmarks/results/performance.md"
    assert default.generation_batch_sizes == [8]


@pytest.mark.slow
def test_encoder_share_times_both_halves_of_a_call_and_bounds_each_engine(tmp_path):
    pytest.importorskip("ctranslate2")
    share = load_benchmark_module("encoder_share")
    output = tmp_path / "share.md"
    record = share.main(
        ["--configs", "tiny", "--batch-sizes", "3", "--rounds", "3", "--budget", "0", "--output", str(output)]
    )
    (row,) = record["results"]
    assert row["config"] == "tiny" and row["batch"] == 3 and row["rounds"] == 3
    seconds = row["seconds"]
    # Every call was timed (each engine call checked that its rows got 32, or 1, new tokens) and the ratios are read
    # from those medians. No timing is asserted: tiny calls on a shared machine can come in any order.
    for kind in ("greedy", "beam4"):
        assert row[f"marian_{kind}_encoder_share"] == seconds["marian_encoder"] / seconds[f"marian_{kind}"]
        for name in ("ct2", "ct2_int8"):
            full, first = seconds[f"{name}_{kind}"], seconds[f"{name}_{kind}_first_step"]
            assert full > 0 and first > 0, (name, kind)
            assert row[f"{name}_{kind}_vs_marian"] == seconds[f"marian_{kind}"] / full
            assert row[f"{name}_{kind}_bound"] == seconds[f"marian_{kind}"] / first
            assert row[f"{name}_{kind}_first_step_share"] == first / full
    assert json.loads(output.with_suffix(".json").read_text()) == json.loads(json.dumps(record))
    report = output.read_text()
    assert (
        f"| tiny | 3 | greedy | {row['marian_greedy_encoder_share']:.0%} | {row['ct2_greedy_vs_marian']:.2f} |"
        in report
    )


@pytest.mark.slow
def test_thread_layouts_time_each_engine_in_each_layout_beside_marian(tmp_path):
    pytest.importorskip("ctranslate2")
    layouts = load_benchmark_module("thread_layouts")
    output = tmp_path / "layouts.md"
    record = layouts.main(
        ["--configs", "tiny", "--batch-sizes", "3", "--engines", "ct2", "--rounds", "3", "--budget", "0",
         "--output", str(output)]
    )  # fmt: skip
    threads = record["threads"]
    names = list(dict.fromkeys(("1x1", f"1x{threads}", f"{threads}x1")))
    assert record["layouts"] == names and record["engines"] == ["ct2"]
    assert [(row["batch"], row["search"]) for row in record["results"]] == [(3, "greedy"), (3, "beam4")]
    for row in record["results"]:
        expected = {f"{kind}_{layout}" for kind in ("ct2", "marian_beside") for layout in names}
        assert set(row["seconds"]) == expected and all(value > 0 for value in row["seconds"].values())
        for layout in names:  # each layout against the same engine's for_cpu layout (itself: 1)
            assert (
                row["vs_spread"][f"ct2_{layout}"]
                == row["seconds"][f"ct2_{names[-1]}"] / row["seconds"][f"ct2_{layout}"]
            )
        assert row["vs_spread"][f"ct2_{names[-1]}"] == 1.0
    assert json.loads(output.with_suffix(".json").read_text()) == json.loads(json.dumps(record))
    first = record["results"][0]
    cell = f"{first['seconds']['ct2_1x1'] * 1e3:.0f} ({first['vs_spread']['ct2_1x1']:.2f})"
    assert f"| tiny | 3 | greedy | 1x1 | {cell} |" in output.read_text()
    with pytest.raises(SystemExit):
        layouts.main(["--engines", "ct2,tensorrt", "--output", str(output)])


def test_engine_calls_are_checked_for_equal_work_and_unchanged_threads():
    bench = load_benchmark_module("benchmark")
    bench.check_new_tokens("ct2", [32, 32, 32])
    with pytest.raises(RuntimeError, match=r"ct2 generated \[31, 32\] tokens per row, not 32"):
        bench.check_new_tokens("ct2", [32, 31, 32])
    with pytest.raises(RuntimeError, match=r"generated \[2\] tokens per row, not 1"):
        bench.check_new_tokens("first step", [2], expected=1)
    threads = torch.get_num_threads()
    bench.check_threads(threads, "here")
    try:
        torch.set_num_threads(threads + 1)
        with pytest.raises(RuntimeError, match=f"torch threads went from {threads} to {threads + 1} while building"):
            bench.check_threads(threads, "while building")
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_the_benchmarks_run_as_scripts_and_as_modules_and_report_into_benchmarks_results():
    # encoder_share imports benchmark, which imports seed_reference: as a script through its own folder on the path,
    # as a module through the package; neither edits sys.path.
    for command in (["benchmarks/encoder_share.py", "--help"], ["-m", "benchmarks.encoder_share", "--help"]):
        subprocess.run([sys.executable, *command], check=True, capture_output=True, text=True, cwd=REPO)
    for name in ("benchmark", "encoder_share", "thread_layouts", "device_check", "collation", "ngram_characters",
                 "batch_order", "float32_products", "kernel_cache", "ngram_left_out"):  # fmt: skip
        assert "sys.path" not in (REPO / "benchmarks" / f"{name}.py").read_text(), name
    results = REPO / "benchmarks" / "results"
    assert (results / "performance.md").is_file() and (results / "performance-deployed.md").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap statistics and /proc/self/status")
def test_training_memory_reports_each_setting_from_a_process_of_its_own(tmp_path):
    from benchmarks import training_memory

    output = tmp_path / "memory.json"
    shape = ["--d_model", "32", "--num_layers", "1", "--num_heads", "2", "--vocab_size", "100", "--batch_size", "4"]
    results = training_memory.main(["--steps", "6", "--report_every", "3", *shape, "--output", str(output)])
    assert list(results) == ["glibc", "keep_freed_memory"]
    # Each child says whether its setting took effect: only keep_freed_memory's malloc keeps a large freed block.
    assert [reports[-1]["large_blocks_kept"] for reports in results.values()] == [False, True]
    for setting, reports in results.items():
        assert [report["step"] for report in reports] == [3, 6]
        for report in reports:
            assert report["setting"] == setting
            assert 0 < report["in_use_mib"] <= report["heap_mib"] < report["resident_mib"]
            assert report["median_step_ms"] > 0
    assert json.loads(output.read_text())["results"] == results
    table = output.with_suffix(".md").read_text()
    assert table.count("| glibc |") == 2 and table.count("| keep_freed_memory |") == 2


def check_speed_up_report(report: dict, output, kinds: list[str], baseline: str, other: str = "hf_transformer"):
    """A benchmark timing ``baseline`` against ``other``: each kind's medians, its speed-up, the JSON and the
    Markdown table (one speed-up row per kind) written."""
    assert list(report["results"]) == kinds
    for result in report["results"].values():
        medians = result["median_ms"]
        assert medians[baseline] > 0 and medians[other] > 0
        assert result["speedup"] == pytest.approx(medians[baseline] / medians[other])
    assert json.loads(output.with_suffix(".json").read_text()) == report
    assert output.read_text().count("x |") == len(kinds)


def test_the_collation_benchmark_times_both_collators_on_the_same_draws(tmp_path):
    from benchmarks import collation

    output = tmp_path / "collation.md"
    report = collation.main(["--rounds", "2", "--batches", "2", "--output", str(output)])
    check_speed_up_report(report, output, ["masked tokens", "classification"], baseline="transformers")

    # Each collator draws under the same seed, so two that sample alike agree; two that differ are refused.
    def sampling(rows):
        return {"draw": torch.rand(3)}

    collation.time_collators({"one": sampling, "two": sampling}, [[{}], [{}]], rounds=2)
    with pytest.raises(AssertionError, match="different batches"):
        collation.time_collators({"one": sampling, "two": lambda rows: {"draw": torch.ones(3)}}, [[{}]], rounds=1)


def test_the_float32_products_benchmark_times_both_ways_and_checks_they_agree(tmp_path, monkeypatch):
    from benchmarks import float32_products

    monkeypatch.setattr(float32_products, "SHAPES", {"small": (8, 4, 6), "output layer": (3, 4, 50)})
    output = tmp_path / "products.md"
    report = float32_products.main(["--rounds", "2", "--repeats", "1", "--threads", "1", "--output", str(output)])
    check_speed_up_report(report, output, ["small", "output layer"], baseline="mkl", other="onednn")
    assert [result["rows x in -> out"] for result in report["results"].values()] == ["8 x 4 -> 6", "3 x 4 -> 50"]

    # The oneDNN products are the same products: a wrong one (here the backward's dy.T @ x as x.T @ dy's
    # transpose of the wrong operand) is refused.
    x, weight, grad = torch.randn(8, 4), torch.randn(6, 4), torch.randn(8, 6)
    for plain, onednn in zip(*(float32_products.step_products(x, weight, grad, way) for way in (False, True))):
        torch.testing.assert_close(plain, onednn, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(float32_products, "onednn_product", lambda a, b: a @ b.flip(0).t())
    with pytest.raises(AssertionError, match="disagree"):
        float32_products.time_products((8, 4, 6), rounds=1, repeats=1)


def test_the_batch_order_benchmark_times_the_same_batches_in_both_orders(tmp_path):
    from benchmarks import batch_order

    output = tmp_path / "order.md"
    arguments = ["--rounds", "2", "--steps", "3", "--batch_size", "4", "--threads", "1", "--output", str(output)]
    report = batch_order.main(arguments + ["--precisions", "float32"])
    check_speed_up_report(report, output, ["float32"], baseline="transformers")

    # Each round trains its own batches once in each order: the sweep as given, then the same batches reordered.
    trained = []
    batches = [[i] for i in range(6)]
    batch_order.time_orders(trained.append, batches, rounds=2, steps=3)
    assert sorted(trained[:3]) == sorted(trained[3:6]) == [[0], [1], [2]]
    assert sorted(trained[6:9]) == sorted(trained[9:]) == [[3], [4], [5]]
    # The sweep: every row once, each mega-batch's batches from the longest rows down (4 mega-batch starts, and
    # the longest row moved to the front, break the descent).
    lengths = [1 + i % 7 for i in range(280)]
    sweep = batch_order.sweep_batches(lengths, 4)
    assert sorted(i for batch in sweep for i in batch) == list(range(280))
    longest = [max(lengths[i] for i in batch) for batch in sweep]
    assert sum(b <= a for a, b in zip(longest, longest[1:])) >= len(longest) - 1 - 6


def test_the_ngram_left_out_benchmark_trains_both_copies_to_the_same_weights(tmp_path):
    from benchmarks import ngram_left_out

    output = tmp_path / "left_out.md"
    arguments = ["--rounds", "2", "--steps", "2", "--batch_size", "4", "--threads", "1", "--buckets", "4096"]
    report = ngram_left_out.main(arguments + ["--output", str(output), "--precisions", "float32", "bfloat16"])
    check_speed_up_report(report, output, ["float32", "bfloat16"], baseline="computed", other="left out")
    assert [result["same_weights"] for result in report["results"].values()] == [True, True]
    assert "bit for bit: float32 yes, bfloat16 yes" in output.read_text()

    # Each round trains its batches once with each way, the first way first in even rounds.
    trained = []
    ways = {"a": lambda rows: trained.append(("a", rows)), "b": lambda rows: trained.append(("b", rows))}
    seconds = ngram_left_out.time_both(ways, [[0], [1], [2], [3]], rounds=2, steps_a_round=2)
    assert trained == [("a", [0]), ("a", [1]), ("b", [0]), ("b", [1]), ("b", [2]), ("b", [3]), ("a", [2]), ("a", [3])]
    assert [len(values) for values in seconds.values()] == [2, 2]


@pytest.mark.slow
def test_the_kernel_cache_benchmark_runs_each_setting_in_a_process_of_its_own(tmp_path):
    from benchmarks import batch_order, kernel_cache

    output = tmp_path / "cache.md"
    arguments = ["--rounds", "1", "--steps", "3", "--batch_size", "4", "--threads", "1", "--output", str(output)]
    report = kernel_cache.main(arguments + ["--precision", "float32"])
    check_speed_up_report(report, output, ["float32"], baseline="oneDNN default", other="keep_compiled_kernels")
    # Each child held its own setting, whatever the parent's environment: oneDNN's default in one, the package's
    # capacity in the other.
    assert report["capacities"] == {"oneDNN default": [None], "keep_compiled_kernels": ["16384"]}
    assert [len(values) for values in report["seconds_per_step"].values()] == [1, 1]
    # The batches: length-grouped (each from one stretch of lengths), every row once, the same order for one seed.
    lengths = [1 + i % 7 for i in range(280)]
    batches = kernel_cache.shuffled_batches([[0] * length for length in lengths], 4)
    assert sorted(i for batch in batches for i in batch) == list(range(280))
    assert batches == kernel_cache.shuffled_batches([[0] * length for length in lengths], 4)
    assert batches != batch_order.sweep_batches(lengths, 4)  # shuffled, not in transformers' order


def test_the_ngram_characters_benchmark_times_both_packings_on_the_same_rows(tmp_path):
    from benchmarks import ngram_characters
    from hf_transformer import modeling_transformer

    installed = modeling_transformer.pack_token_characters
    output = tmp_path / "ngram.md"
    report = ngram_characters.main(["--rounds", "2", "--rows", "200", "--output", str(output)])
    assert modeling_transformer.pack_token_characters is installed  # the model's packing put back
    check_speed_up_report(report, output, ["score", "fit pass"], baseline="plain")

    # Each packing is installed in turn while the work runs, and answers that differ are refused.
    def which_packing():
        return [torch.tensor([float(modeling_transformer.pack_token_characters is installed)])]

    seconds, answers = ngram_characters.time_packings(which_packing, {"plain": None, "package": installed}, rounds=2)
    assert [len(values) for values in seconds.values()] == [2, 2] and answers == [
        [torch.tensor([0.0])],
        [torch.tensor([1.0])],
    ]
    with pytest.raises(AssertionError, match="different scores"):
        ngram_characters.check_same(answers, "scores")
    ngram_characters.check_same([[torch.tensor([1.0])], [torch.tensor([1.0 + 1e-7])]], "scores")  # rounding passes
