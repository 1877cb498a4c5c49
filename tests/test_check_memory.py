"""kernix.check's memory check: every kind of kernel runs outside XLA, on buffers of exactly their
size, under AddressSanitizer and UBSan in a child process; a finding names what the kernel did, at
the user's line, with the input; a kernel that crashes, aborts or hangs never takes the caller down."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import kernix
from kernix.checking import sanitized

from helpers import FIXTURES, unique_name

KINDS = FIXTURES / "checking" / "kinds.cpp"
SOURCE = KINDS.read_text().splitlines()


def line_of(tag: str) -> str:
    """``kinds.cpp:<line>`` of the line marked ``// <tag>``."""
    return f"kinds.cpp:{next(i + 1 for i, text in enumerate(SOURCE) if text.rstrip().endswith(tag))}"


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    return kernix.load_cpp_file(KINDS, name=unique_name("kinds"), build_directory=tmp_path_factory.mktemp("k"))


X = np.arange(1, 5, dtype=np.float32)


def copy(x, **_):
    return x


def test_a_stateful_kernel_is_run_on_exact_buffers_and_passes(kinds):
    report = kernix.check(kinds.state_copy, copy, X, examples=2)
    assert report.ok and report["buffers"].passed and "AddressSanitizer" in report["buffers"].detail


@pytest.mark.parametrize("name, attrs, tag, words", [
    ("state_past", {}, "y[i] = i < x.numel()", r"wrote 4 bytes past the end of output 'y' \(float32\[4\], 16 bytes\): "
                                              r"at byte 16, element 4 of 4"),
    ("string_read_past", {"mode": "fast"}, "BUG-READ", r"read 4 bytes past the end of input 'x' \(float32\[4\], 16 bytes\)"),
    ("array_read_past", {"ks": (1, 2)}, "BUG-ARRAY", r"read 4 bytes past the end of attr 'ks' \(.*8 bytes\)"),
    ("scratch_past", {}, "BUG-SCRATCH", r"wrote 4 bytes past the end of scratch 'tmp'"),
    ("pool_past", {}, "BUG-POOL", r"wrote 4 bytes past the end of output 'y'"),
    ("inplace_past", {}, "BUG-INPLACE", r"read 4 bytes past the end of in-place tensor 'x'"),
    # Was: past the heap block's redzone, the write landed unseen in another block or was told as another
    # block's, and a drawn input with such an index then ran under XLA in this process and corrupted its heap.
    ("far_past", {"offset": 100}, "BUG-FAR", r"wrote .* past the end of output 'y' \(float32\[4\], 16 bytes\): "
                                             r"at byte 416,"),
    ("far_past", {"offset": 3000}, "BUG-FAR", r"wrote .* past the end of output 'y' .*: at byte 12016,"),
    ("far_past", {"offset": 1 << 20}, "BUG-FAR", r"wrote .* past the end of output 'y' .*: at byte 4194320,"),
    ("far_past", {"offset": -3004}, "BUG-FAR", r"wrote .* before the start of output 'y' .*: 12000 byte\(s\) before"),
    # Was: told as a write past the attribute 'offset', whose heap block lies near the kernel's own
    ("own_block_past", {"offset": 0}, "BUG-OWN", r"wrote 4 bytes outside a 8-byte block the kernel did not get"),
])
def test_a_memory_error_in_every_kind_of_kernel_is_reported_at_its_line(kinds, name, attrs, tag, words):
    ref = (lambda x: 2 * x) if name == "inplace_past" else copy
    report = kernix.check(getattr(kinds, name), ref, X, **attrs, examples=2, strict=False)
    buffers = report["buffers"]
    assert buffers.failed, report
    assert re.search(words, buffers.detail), buffers.detail
    if name != "state_past":
        assert line_of(tag) in buffers.detail, buffers.detail
    assert "on the example: x: float32[4]" in buffers.detail
    # the other checks do not run the kernel in this process
    assert all(r.status == "n/a" for r in report if r.name != "buffers")


def test_a_backward_kernel_is_run_on_exact_buffers(kinds):
    report = kernix.check(kinds.triple, lambda x: 3 * x, X, strict=False, examples=2)
    assert report["buffers"].failed
    assert "its backward kernel triple_bwd() wrote 4 bytes past the end of output 'dx'" in report["buffers"].detail
    assert line_of("BUG-BWD") in report["buffers"].detail


def test_an_integer_division_by_zero_is_a_failed_check_not_a_dead_process(kinds):
    report = kernix.check(kinds.per_count, lambda x: x, np.zeros(0, np.float32), strict=False, examples=2)
    assert report["buffers"].failed and "division by zero" in report["buffers"].detail
    assert line_of("BUG-FPE").split(":")[0] in report["buffers"].detail
    assert "x: float32[0]" in report["buffers"].detail


def test_an_abort_is_a_failed_check(kinds):
    report = kernix.check(kinds.picky, copy, -X, strict=False, examples=0)
    assert report["buffers"].failed and "aborted (SIGABRT)" in report["buffers"].detail
    assert line_of("BUG-ABORT") in report["buffers"].detail


def test_a_hang_is_a_failed_check(kinds, monkeypatch):
    monkeypatch.setattr(sanitized, "TIMEOUT", 1.0)
    x = np.array([42, 1], np.float32)
    report = kernix.check(kinds.stuck, copy, x, strict=False, examples=0)
    assert report["buffers"].failed and "did not return within 1 s" in report["buffers"].detail
    assert report["eager"].status == "n/a"


def test_drawn_inputs_reach_an_empty_dimension_and_its_crash_is_a_failed_check(kinds):
    report = kernix.check(kinds.per_count, copy, X, strict=False)
    assert report["eager"].passed and report["buffers"].passed  # the example (n=4) is fine
    drawn = report["drawn"]
    assert drawn.failed and "division by zero" in drawn.detail and "(n=0" in drawn.detail, drawn.detail


def test_drawing_options_in_one_value_or_as_keywords_but_not_both(kinds):
    with pytest.raises(kernix.CallError, match="examples given both"):
        kernix.check(kinds.state_copy, copy, X, examples=3, drawing=kernix.Drawing(examples=2))
    assert kernix.check(kinds.state_copy, copy, X, drawing=kernix.Drawing(examples=2, sizes={"n": [2, 3]})).ok


def segment_sum_ref(x, segment):
    import jax

    flat, seg = x.reshape(-1, x.shape[-1]), segment.reshape(-1)
    return jax.ops.segment_sum(flat, seg, num_segments=flat.shape[0]).reshape(x.shape)


def test_a_race_between_the_pools_threads_is_reported_at_its_line(kinds):
    x = np.random.default_rng(0).uniform(-1, 1, (8, 16)).astype(np.float32)
    segment = np.repeat(np.arange(4, dtype=np.int32), 2)
    report = kernix.check(kinds.segment_sum, segment_sum_ref, x, segment, strict=False, examples=0)
    buffers = report["buffers"]
    assert buffers.failed and "under ThreadSanitizer" in buffers.detail and "data race" in buffers.detail, buffers
    assert line_of("BUG-RACE") in buffers.detail


def test_a_correct_kernel_on_the_pool_passes_under_thread_sanitizer(kinds):
    report = kernix.check(kinds.pool_twice, lambda x: 2 * x, np.ones((3, 50), np.float32), examples=2)
    assert report.ok and "ThreadSanitizer" in report["buffers"].detail


def test_state_kept_from_an_earlier_call_is_caught_on_drawn_inputs(kinds):
    report = kernix.check(kinds.mean_scale, lambda x: x / x.shape[0], X, strict=False)
    assert report["eager"].passed and report["buffers"].passed
    drawn = report["drawn"]
    assert drawn.failed and "after earlier calls on other inputs" in drawn.detail and "keep state" in drawn.detail


def test_sources_changed_since_the_load_are_not_built_in_their_place(tmp_path):
    text = ('#include "kernix/common.h"\n// @BE same (n)->(n)\nvoid same(const BE::Tensor& x, BE::Tensor& y) {\n'
            '  for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i];\n}\n')
    source = tmp_path / "edited.cpp"
    source.write_text(text)
    module = kernix.load_cpp_file(source, name=unique_name("edited"), build_directory=tmp_path / "cache")
    source.write_text(text + "// edited after the load\n")
    report = kernix.check(module.same, copy, X, examples=0)
    assert report["buffers"].status == "n/a" and "changed or went since module" in report["buffers"].detail
    assert report["eager"].passed


def test_a_source_edited_while_it_loads_is_not_built_in_its_place(tmp_path, monkeypatch):
    # The load's stamps are taken before the build: an edit between the build and the end of the load
    # must count as a change, or the sanitizer build would check code the module does not run.
    from kernix import pipeline

    source = tmp_path / "edited.cpp"
    source.write_text('#include "kernix/common.h"\n// @BE same (n)->(n)\nvoid same(const BE::Tensor& x, '
                      "BE::Tensor& y) {}\n")
    load, edits = pipeline.registry.open_library, []

    def open_then_edit(path):  # (the load maps the library once, before it makes the module)
        library = load(path)
        if not edits:
            edits.append(source.write_text(source.read_text() + "// edited during the load\n"))
        return library

    monkeypatch.setattr(pipeline.registry, "open_library", open_then_edit)
    module = kernix.load_cpp_file(source, name=unique_name("edited_during"), build_directory=tmp_path / "cache")
    assert "changed or went since module" in pipeline.request_of(module)


def test_a_driver_that_cannot_start_is_no_finding_about_the_kernel(kinds, monkeypatch):
    monkeypatch.setattr(sanitized, "driver_for", lambda module, sanitizer="address": (Path("/bin/false"), ""))
    from kernix.checking import memory

    monkeypatch.setattr(memory, "driver_for", sanitized.driver_for)
    report = kernix.check(kinds.state_copy, copy, X, examples=2)
    assert report.ok and report["buffers"].status == "n/a"
    assert "the sanitizer driver ended before calling the kernel" in report["buffers"].detail


#: compute-sanitizer 2025's report of a write one element past a 6,000-byte cudaMalloc buffer (an H200).
CUDA_REPORT = """\
========= Invalid __global__ write of size 4 bytes
=========     at copy_unguarded_kernel(const float *, float *, long)+0xc0 in /src/kernels_cuda.cu:41
=========     by thread (220,0,0) in block (5,0,0)
=========     Access to 0x7fa32a801770 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7fa32a800000 of size 6,000 bytes
"""


def test_a_compute_sanitizer_report_is_told_as_the_buffer_the_kernel_overran():
    class Output:  # the parameter: its name and role are all the report reads
        name, role = "y", "ret"

    crash = sanitized._describe_cuda("Invalid __global__ write of size 4 bytes", CUDA_REPORT,
                                     [(Output, 0x7fa32a800000, 6000)], {"y": ((5, 300), np.dtype(np.float32))},
                                     "/src/kernels_cuda.cu")
    assert crash.parameter == "y"
    assert "past the end of output 'y' (float32[5,300], 6000 bytes)" in crash.message
    assert "element 1500 of 1500" in crash.message and "/src/kernels_cuda.cu:41" in crash.message
    assert "thread (220,0,0) of block (5,0,0)" in crash.message


def test_a_cuda_access_between_two_buffers_names_both_where_they_are_about_as_near():
    class Input:
        name, role = "x", "arg"

    class Output:
        name, role = "y", "ret"

    base, layout = 0x7fa32a800000, {"x": ((4,), np.dtype(np.float32)), "y": ((4,), np.dtype(np.float32))}
    buffers = [(Input, base, 16), (Output, base + 512, 16)]  # (cudaMalloc's small buffers: 512 bytes apart)

    def told(address: int) -> sanitized.Problem:
        after = address - (base + 16) + 1  # (as compute-sanitizer counts: 1 for the first byte past the end)
        report = CUDA_REPORT.replace("0x7fa32a801770", hex(address)).replace("1 bytes after", f"{after} bytes after")
        return sanitized._describe_cuda("Invalid __global__ write of size 4 bytes",
                                        report.replace("6,000", "16"), buffers, layout, "/src/kernels_cuda.cu")

    one_past = told(base + 16)
    assert one_past.parameter == "x" and "past the end of input 'x'" in one_past.message
    assert "output 'y'" not in one_past.message  # (496 bytes from y: no doubt)
    between = told(base + 200)  # 185 bytes past x, 312 before y: y[-78] as likely as x[50]
    assert between.parameter == "x" and "past the end of input 'x'" in between.message
    assert "312 byte(s) before the start of output 'y' (float32[4], 16 bytes)" in between.message
    assert between.message.index("output 'y'") < between.message.index("/src/kernels_cuda.cu:41")


#: compute-sanitizer 2025's report of a read one element past a 148-byte input through __ldg (an H200, a
#: brainevent kernel with its bounds check made off by one): the innermost frame is the CUDA header's.
INLINED_REPORT = """\
========= Invalid __global__ read of size 4 bytes
=========     at __ldg(const float *)+0xf0 in sm_32_intrinsics.hpp:134
=========     by thread (160,0,0) in block (4,0,0)
=========     Access to 0x7f2c0a801e94 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f2c0a801e00 of size 148 bytes
=========         Device Frame: _transpose_kern_f32_float(const float *, const float *, float *, int, int)+0xf0 in binary_densemv.cu:110
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: binary_densemv_transpose_f32_float(BE::Tensor, BE::Tensor, BE::Tensor, long) in binary_densemv.cu:181 [0xcf90] in driver
"""


def test_a_read_inlined_from_a_cuda_header_is_told_at_the_kernels_line():
    class Spikes:
        name, role = "spikes", "arg"

    crash = sanitized._describe_cuda("Invalid __global__ read of size 4 bytes", INLINED_REPORT,
                                     [(Spikes, 0x7f2c0a801e00, 148)], {"spikes": ((37,), np.dtype(np.float32))},
                                     "/work/binary_densemv.cu")
    assert "read 4 bytes past the end of input 'spikes'" in crash.message
    assert "binary_densemv.cu:110 (in _transpose_kern_f32_float)" in crash.message, crash.message


#: compute-sanitizer racecheck's report of a block reversing through shared memory with no __syncthreads().
RACE_REPORT = """\
========= Error: Race reported between Write access at rev(const float *, float *, int)+0x100 in /src/race.cu:7
=========     and Read access at rev(const float *, float *, int)+0x160 in /src/race.cu:8 [6000 hazards]
"""


def test_a_racecheck_report_is_told_as_the_two_accesses_of_the_race():
    crash = sanitized._describe_cuda(RACE_REPORT.splitlines()[0].removeprefix("========= "), RACE_REPORT, [], {},
                                     "/src/race.cu")
    assert "shared memory" in crash.message and "a write at /src/race.cu:7 (in rev)" in crash.message
    assert "a read at line 8" in crash.message
