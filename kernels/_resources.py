"""What a compiled kernel takes from its GPU, read from the binary Triton built for it.

Registers and spills:
- CUDA: ``cuobjdump --dump-resource-usage`` (bundled with Triton) on the cubin prints REG, STACK and
  LOCAL per kernel. A Triton kernel calls no functions, so its stack frame and local memory hold
  registers that did not fit: spill bytes = STACK + LOCAL, per thread.
- HIP: the amdgcn assembly's kernel metadata. Registers = ``.vgpr_count`` (arch and accumulation
  VGPRs together: one file of 512 per lane on gfx942); spill bytes = ``.private_segment_fixed_size``,
  the scratch memory per lane (``.vgpr_spill_count`` says how many registers went there).

Shared memory per block: what Triton allocates for the launch (``metadata.shared``; its kernels
declare no static shared memory, and the 1 KB that cuobjdump lists as SHARED on sm_90 is the
hardware's per-block reservation, outside the opt-in limit), plus any static LDS on HIP
(``.group_segment_fixed_size``).

Blocks per SM (CU) the registers and shared memory allow, the smallest of:
- CUDA: registers: ⌊⌊65536 / (⌈regs·32 / 256⌉·256)⌋ / num_warps⌋ (registers go to a warp in units
  of 256); shared memory: ⌊shared per SM / (shared + 1 KB reserved)⌋; warps: ⌊64 / num_warps⌋;
  and 32 blocks.
- HIP (gfx942): waves per SIMD = min(8, ⌊512 / ⌈vgprs⌉₈⌋) (VGPRs go to a wave in units of 8); a
  CU's 4 SIMDs hold 4 × that many waves, so registers allow ⌊4 · waves per SIMD / num_warps⌋
  blocks (a warp is a wave of 64 here); LDS: ⌊64 KB / shared⌋; and 32 blocks.

int32 offsets: a tensor argument whose largest element offset (its storage offset plus
Σ (size − 1)·|stride|) passes 2³¹ − 1 overflows when the kernel forms its offsets in 32 bits.
The check reads the kernel's Triton IR: a pointer argument that no ``tt.addptr`` ever advances by
a 64-bit offset (directly, or through the pointers derived from it) has only 32-bit offsets.
It does not prove a 64-bit offset was computed without overflow first (``(pid * stride).to(int64)``
passes), so the kernels cast the program id before they multiply, as the notebooks teach.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ._target import Gpu, Launch

INT32_MAX = 2**31 - 1
SIMDS_PER_CU = 4  # AMD CDNA: a compute unit is four SIMDs, each with its own register file


@dataclass(frozen=True)
class Usage:
    registers: int  # per thread (CUDA) or per lane (HIP)
    spill_bytes: int  # per thread (lane)
    shared_bytes: int  # per block
    num_warps: int
    num_stages: int
    blocks_per_sm: int  # that registers, shared memory and warps allow on one SM (CU)


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _cuda_registers_and_spills(compiled) -> tuple[int, int]:
    from triton import knobs

    cubin = next((Path(p) for p in compiled.metadata_group.values() if p.endswith(".cubin")), None)
    if cubin is None:
        raise RuntimeError(f"no cubin among the files of {compiled.name}")
    out = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", str(cubin)],
                         capture_output=True, text=True, check=True).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", out)
    if found is None:
        raise RuntimeError(f"cuobjdump printed no resource usage for {compiled.name}:\n{out}")
    regs, stack, local = map(int, found.groups())
    return regs, stack + local


def _amd_field(asm: str, name: str) -> int:
    found = re.search(rf"^\s*\.{name}:\s+(\d+)", asm, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no .{name} in the amdgcn metadata")
    return int(found.group(1))


def blocks_per_sm(gpu: Gpu, registers: int, shared: int, num_warps: int) -> int:
    """Blocks of this kernel that fit on one SM (CU) at once, by the formula of the module docstring."""
    if gpu.target.backend == "cuda":
        per_warp = _round_up(max(registers, 1) * gpu.target.warp_size, 256)
        by_registers = (gpu.registers // per_warp) // num_warps
        by_warps = gpu.max_warps // num_warps
    else:
        waves_per_simd = min(gpu.max_warps, gpu.registers // _round_up(max(registers, 1), 8))
        by_registers = by_warps = SIMDS_PER_CU * waves_per_simd // num_warps
    needs = shared + gpu.shared_reserved_per_block
    by_shared = gpu.shared_per_multiprocessor // needs if needs else gpu.max_blocks
    return min(by_registers, by_warps, by_shared, gpu.max_blocks)


def usage(gpu: Gpu, compiled) -> Usage:
    """Registers, spills, shared memory, warps, stages and blocks per SM of one compiled kernel."""
    meta = compiled.metadata
    shared = meta.shared
    if gpu.target.backend == "cuda":
        registers, spills = _cuda_registers_and_spills(compiled)
    else:
        asm = compiled.asm["amdgcn"]
        registers = _amd_field(asm, "vgpr_count")
        spills = _amd_field(asm, "private_segment_fixed_size")
        shared += _amd_field(asm, "group_segment_fixed_size")
    return Usage(registers, spills, shared, meta.num_warps, meta.num_stages,
                 blocks_per_sm(gpu, registers, shared, meta.num_warps))


_DEF = re.compile(r"^\s*(%[\w.$-]+)(?::\d+)? = (\S+)(.*)$")
_VALUE = re.compile(r"%[\w.$-]+")


def pointers_with_64bit_offsets(ttir: str) -> set[str]:
    """The pointer parameters of a kernel that some ``tt.addptr`` advances by a 64-bit offset.

    Follows every pointer derived from a parameter (splats, broadcasts, loop-carried values) by
    reading the Triton IR line by line: each definition inherits the parameters its operands
    came from; a ``scf.for`` passes its initial values on to its iteration arguments.
    """
    header = next((line for line in ttir.splitlines() if "tt.func" in line), "")
    roots = {f"%{name}": {name} for name in re.findall(r"%([\w.$-]+): !tt\.ptr", header)}
    wide: set[str] = set()
    for line in ttir.splitlines():
        line = re.sub(r"\s*loc\(.*$", "", line)
        found = _DEF.match(line)
        if not found:
            continue
        result, op, rest = found.groups()
        for carried, initial in re.findall(r"(%[\w.$-]+) = (%[\w.$-]+)", rest):
            roots[carried] = set(roots.get(initial, ()))
        operands = _VALUE.findall(rest)
        if op == "tt.addptr":
            origin = roots.get(operands[0], set())
            roots[result] = set(origin)
            if re.search(r"\bi64\b|xi64>", rest.rsplit(",", 1)[-1]):
                wide |= origin
        else:
            origin = set().union(*(roots.get(v, set()) for v in operands))
            if origin:
                roots[result] = origin
    return wide


def int32_overflows(launch: Launch) -> list[str]:
    """The tensor arguments of this launch whose offsets pass 2³¹ − 1 while the kernel forms them in 32 bits."""
    large = {name: t.largest_offset for name, t in launch.tensors.items() if t.largest_offset > INT32_MAX}
    if not large or launch.compiled is None:
        return []
    wide = pointers_with_64bit_offsets(launch.compiled.asm["ttir"])
    return [f"{name} reaches offset {offset:,} in int32" for name, offset in large.items() if name not in wide]
