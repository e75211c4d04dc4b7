"""Compile the package's Triton kernels for an NVIDIA GPU without one, and count their PTX.

Triton's interpreter (how CI runs the kernels on CPU) executes the kernels' Python
through numpy and checks neither types nor what the GPU compiler accepts.  This
compiles the kernels (the fused attention's forward, dk/dv, dq and r kernels for each
kind of alpha, at bf16 causal with padding and at float32 without, and at bf16 for
1.5-entmax within a sliding window and over packed sequences; the row-wise
normaliser's forward and backward) for a CUDA target with Triton's own compiler and
the ptxas it ships, which need no device, so a kernel that would not compile on a GPU
fails here.  For each variant it prints the
PTX instructions, the special-function ones among them (ex2, lg2, rcp, sqrt) and the
tensor-core products, and from ptxas the registers a thread uses and the bytes it
spills to local memory (stores; ptxas gives a thread at most 255 registers and spills
the rest): a static measure of a change's cost where no GPU is at hand (it says
nothing of memory traffic or time; time needs a GPU).  The attention kernels are
compiled with the tiles the package launches them with (``kernels.config.blocks``)
at head dim 64 and, at bf16 for the two normalisers the training benchmark times, 128
(``D128``: ``transformer_iwslt_de_en``'s 512 wide, 4 heads); ``--tiles`` compiles them
with other tiles instead, to compare shapes.

    python benchmarks/kernel_ptx.py                      # sm_90 (H100), bf16 and float32 inputs
    python benchmarks/kernel_ptx.py --arch 80 --only attention_forward "per head"
    python benchmarks/kernel_ptx.py --only D128 --tiles 64,32,8

Run it without TRITON_INTERPRET (it is removed here: the interpreter replaces the
kernels Triton would compile).
"""

import argparse
import collections
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)  # before the kernels are defined

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.compiler import get_ptxas  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.cache import get_cache_manager  # noqa: E402

from fairseq_sparse.entmax.kernels import backward_pass, config, forward_pass, rows  # noqa: E402
from fairseq_sparse.entmax.kernels.config import ENTMAX15, GENERIC, SPARSEMAX  # noqa: E402
from timing import tiles_setting  # noqa: E402

# Pointer arguments whose element type is not the inputs' dtype.
POINTERS_FP32 = {"ALPHA", "SLOPES", "STATS", "BLOCKS", "DIAGNOSTICS_OUT", "R", "DALPHA", "alpha_ptr", "dalpha_ptr"}
POINTERS_I32 = {"SEG", "BOUNDS"}
POINTERS_DATA = {"Q", "K", "V", "O", "OG", "DO", "DQ", "DK", "DV", "x_ptr", "y_ptr", "dy_ptr", "dx_ptr"}
FLOATS = {"scale", "tol", "p_drop"}
# The file of a kernel's ptxas report in Triton's cache (registers()).
REPORT = "ptxas_registers.json"


def signature(kernel, dtype, constexprs):
    sig = {}
    for name in inspect.signature(kernel.fn).parameters:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name == "KPM":
            sig[name] = "*i8"
        elif name in POINTERS_FP32:
            sig[name] = "*fp32"
        elif name in POINTERS_I32:
            sig[name] = "*i32"
        elif name in POINTERS_DATA:
            sig[name] = "*" + dtype
        elif name in FLOATS:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def variants(tiles=None):
    """(label, kernel, input dtype, constexprs, num_warps) as the package launches them
    (forward_pass.forward, backward_pass.backward, rows.forward/backward) on a GPU; ``tiles``
    (BLOCK_M, BLOCK_N, warps) replaces the attention kernels' own."""
    for dtype, head_dim in (("bf16", 64), ("fp32", 64), ("bf16", 128)):
        precision = "ieee" if dtype == "fp32" else "tf32"
        block_m, block_n, block_d, launch = config.blocks(head_dim, "cuda")
        warps = launch["num_warps"]
        if tiles is not None:
            block_m, block_n, warps = tiles
        suffix = "" if head_dim == 64 else f" D{head_dim}"
        fixed_alphas = ((GENERIC, "alpha per head"), (ENTMAX15, "1.5-entmax"), (SPARSEMAX, "sparsemax"))
        for fixed, name in fixed_alphas if head_dim == 64 else fixed_alphas[:2]:
            tile = dict(PRECISION=precision, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d)
            # Causal with padding at bf16 (a decoder's self-attention in training), neither at float32.
            masks = dict(HAS_KPM=dtype == "bf16", CAUSAL=dtype == "bf16", PACKED=False)
            # Attention dropout at bf16 (BERT-family fine-tuning), none at float32.
            common = dict(FIXED=fixed, **masks, **tile, DROPOUT=dtype == "bf16")
            backward = dict(common, USE_BLOCKS=True)
            forward = dict(common, ALPHA_STATS=fixed == GENERIC, WRITE_OG=True, ONE_TILE=False, DIAGNOSTICS=False)
            forward_kernel = forward_pass._forward_kernel
            yield (f"attention_forward {name} {dtype}{suffix}", forward_kernel, dtype, forward, warps)
            if dtype == "bf16" and tiles is None:
                # Keys that fit one tile, as wide as the package makes it for them (ONE_TILE_KEYS).
                one = config.ONE_TILE_KEYS
                yield (f"attention_forward {name} {dtype}{suffix} one tile of {one}", forward_kernel,
                       dtype, dict(forward, BLOCK_N=one, ONE_TILE=True), warps)
                if fixed == GENERIC and not suffix:  # the benchmarks' counts of passes and tiles
                    yield (f"attention_forward {name} {dtype} diagnostics", forward_kernel, dtype,
                           dict(forward, DIAGNOSTICS=True), warps)
            yield (f"attention_dkdv {name} {dtype}{suffix}", backward_pass._dkdv_kernel, dtype, backward, warps)
            yield (f"attention_dq {name} {dtype}{suffix}", backward_pass._dq_kernel, dtype,
                   dict(backward, ALPHA_GRAD=fixed == GENERIC), warps)
            # A sliding window (Mistral's layers), and packed sequences (cu_seqlens).
            for mask, given in (("window", dict(CAUSAL=config.WINDOWED)), ("packed", dict(PACKED=True))):
                if dtype == "bf16" and fixed == ENTMAX15 and not suffix:
                    yield (f"attention_forward {name} {dtype} {mask}", forward_kernel, dtype,
                           dict(forward, **given), warps)
                    yield (f"attention_dkdv {name} {dtype} {mask}", backward_pass._dkdv_kernel, dtype,
                           dict(backward, **given), warps)
                    yield (f"attention_dq {name} {dtype} {mask}", backward_pass._dq_kernel, dtype,
                           dict(backward, ALPHA_GRAD=False, **given), warps)
        if not suffix:
            yield (f"attention_r {dtype}", backward_pass._r_kernel, dtype, dict(BLOCK_R=64, BLOCK_D=64), 4)
    for fixed, name in ((GENERIC, "alpha per row"), (ENTMAX15, "1.5-entmax"), (SPARSEMAX, "sparsemax")):
        yield (f"rowwise_forward {name} fp32", rows._forward_kernel, "fp32",
               dict(FIXED=fixed, BLOCK=1024), 4)
        yield (f"rowwise_backward {name} fp32", rows._backward_kernel, "fp32",
               dict(FIXED=fixed, ALPHA_GRAD=fixed == GENERIC, BLOCK=1024), 4)


SPECIAL = ("ex2", "lg2", "rcp", "sqrt", "rsqrt")


def count(ptx):
    """(instructions, {special-function op: n}, tensor-core products) of a PTX listing."""
    instructions, special, products = 0, collections.Counter(), 0
    for line in ptx.splitlines():
        text = line.strip()
        if not text or text.startswith(("//", ".", "$", "{", "}")) or text.endswith(":"):
            continue  # comments, directives, labels, braces
        instructions += 1
        op = text.split()[1] if text.startswith("@") else text.split()[0]  # past a predicate
        base = op.split(".")[0]
        if base in SPECIAL:
            special[base] += 1
        if op.startswith(("wgmma.mma_async", "mma.sync")):
            products += 1
    return instructions, special, products


def registers(ptx, arch):
    """(registers per thread, bytes of spill stores per thread): ptxas's own report (-v) on
    the PTX, with the ptxas and target Triton compiles it with. The report is kept in Triton's
    cache, beside the compiled kernels that ``triton.compile`` reuses, under the PTX, the
    ptxas and the target, which decide it: a kernel that Triton finds compiled is not handed
    to ptxas again either."""
    ptxas = get_ptxas(arch)
    target = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
    key = hashlib.sha256("\0".join(("kernel_ptx registers", ptxas.path, ptxas.version, target, ptx)).encode())
    cache = get_cache_manager(key.hexdigest())
    kept = cache.get_file(REPORT)
    if kept is not None:
        with open(kept) as f:
            return tuple(json.load(f))
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "kernel.ptx")
        with open(source, "w") as f:
            f.write(ptx)
        proc = subprocess.run([ptxas.path, "-v", f"-arch={target}", source, "-o",
                               os.path.join(tmp, "kernel.cubin")], capture_output=True, text=True, check=True)
    report = proc.stdout + proc.stderr
    used = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    if not (used and spills):
        raise RuntimeError(f"no register report from ptxas: {report[-500:]}")
    counts = int(used.group(1)), int(spills.group(1))
    cache.put(json.dumps(counts), REPORT, binary=False)
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100, 80: A100)")
    parser.add_argument("--only", nargs="+", help="variants whose label contains one of these")
    parser.add_argument("--tiles", type=tiles_setting, metavar="M,N,WARPS",
                        help="compile the attention kernels with these tiles and warps instead of the package's")
    args = parser.parse_args()
    target = GPUTarget("cuda", args.arch, 32)
    print(f"Triton {triton.__version__}, target sm_{args.arch}"
          + (" (attention tiles {}x{}, {} warps)".format(*args.tiles) if args.tiles else ""))
    print(f"{'kernel':58s} {'PTX instructions':>16s} {'ex2':>5s} {'lg2':>5s} {'rcp':>5s} {'sqrt':>5s} {'products':>8s}"
          f" {'registers':>9s} {'spill B':>7s}")
    failed = []
    for label, kernel, dtype, constexprs, warps in variants(args.tiles):
        if args.only and not any(part in label for part in args.only):
            continue
        source = ASTSource(fn=kernel, signature=signature(kernel, dtype, constexprs), constexprs=constexprs)
        try:
            compiled = triton.compile(source, target=target, options={"num_warps": warps})
        except Exception as e:  # a kernel the GPU compiler refuses: name it, go on, fail at the end
            failed.append(label)
            cause = e.__cause__ or e
            print(f"{label:58s} FAILED: {type(cause).__name__}: {str(cause).strip().splitlines()[-1][:300]}",
                  flush=True)
            continue
        n, special, products = count(compiled.asm["ptx"])
        used, spilled = registers(compiled.asm["ptx"], args.arch)
        print(f"{label:58s} {n:16d} {special['ex2']:5d} {special['lg2']:5d} {special['rcp']:5d} "
              f"{special['sqrt'] + special['rsqrt']:5d} {products:8d} {used:9d} {spilled:7d}", flush=True)
    if failed:
        sys.exit(f"{len(failed)} kernel variant(s) did not compile for sm_{args.arch}: {', '.join(failed)}")


if __name__ == "__main__":
    main()
