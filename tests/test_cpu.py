"""What the package reads of the CPU (hf_transformer.cpu): the flags that pick a precision, and the line that names
the CPU in run records and benchmark reports."""

import os

from hf_transformer.cpu import cpu_computes_bfloat16, cpu_description, cpu_fields, cpu_flags

ZEN3_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma bmi2\nbugs\t\t: sysret_ss_attrs\n" * 2
ZEN4_CPUINFO = ZEN3_CPUINFO.replace("bmi2", "bmi2 avx512f avx512bw avx512_bf16 avx512_vnni")
SAPPHIRE_RAPIDS_CPUINFO = ZEN3_CPUINFO.replace("bmi2", "bmi2 avx512f amx_bf16 amx_tile")
ZEN5_CPUINFO = (
    "processor\t: {n}\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
    "flags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n\n"
)
XEON_CPUINFO = (
    "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n"
    "model name\t: Intel(R) Xeon(R) Platinum 8581C CPU @ 2.10GHz\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_fp16\n"
)


def test_cpu_bfloat16_arithmetic_is_read_from_the_flags_line():
    assert cpu_computes_bfloat16(ZEN3_CPUINFO) is False
    assert cpu_computes_bfloat16(ZEN4_CPUINFO) is True
    assert cpu_computes_bfloat16(SAPPHIRE_RAPIDS_CPUINFO) is True
    assert cpu_computes_bfloat16("model name\t: avx512_bf16 in a name is not a flag\nflags\t: avx2\n") is False


def test_the_first_processors_fields_are_read_stripped():
    two_processors = ZEN5_CPUINFO.format(n=0) + ZEN5_CPUINFO.format(n=1).replace("model name\t: AMD EPYC", "x: y")
    fields = cpu_fields(two_processors)
    assert fields["processor"] == "0" and fields["model name"] == "AMD EPYC" and "x" not in fields
    assert fields["cpu family"] == "26" and fields["model"] == "2"
    assert cpu_flags(two_processors) == {"fpu", "avx2", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni"}


def test_a_cpu_is_described_by_name_generation_and_the_products_it_has():
    cpus = os.cpu_count()
    zen5 = cpu_description(ZEN5_CPUINFO.format(n=0))
    assert zen5 == f"AMD EPYC (family 26 model 2, {cpus} CPUs; avx512f, avx512_bf16)"
    assert cpu_description(XEON_CPUINFO) == (
        f"Intel(R) Xeon(R) Platinum 8581C CPU @ 2.10GHz (family 6 model 207, {cpus} CPUs; avx512f, avx512_bf16)"
    )
    # No name, numbers or AVX-512 listed: the platform's name, and what it lacks.
    described = cpu_description(ZEN3_CPUINFO)
    assert described.endswith(f"({cpus} CPUs; no AVX-512)") and "family" not in described
    assert described.split(" (")[0]  # some name, never an empty one


def test_this_machine_is_described():
    described = cpu_description()
    assert f"{os.cpu_count()} CPUs; " in described
    flags = cpu_flags()
    if flags is not None:  # Linux
        assert ("avx512f" in described) == ("avx512f" in flags)
        assert f"family {cpu_fields()['cpu family']} model {cpu_fields()['model']}" in described
