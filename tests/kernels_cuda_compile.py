"""Compile every Triton kernel of sdscore.kernels for an sm_90 GPU, without a GPU.

Run by the kernel tests in a subprocess without TRITON_INTERPRET, so the GPU code path (not
only the interpreter) is checked on CPU-only machines: ptxas ships inside the triton wheel.
Usage: python kernels_cuda_compile.py pooling|similarity|decoder. Exit 0: all compiled; 77: this triton
has no ahead-of-time API to drive.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

INPUTS = {"x_ptr", "w_ptr", "out_ptr", "emb_ptr", "ref_ptr", "cand_ptr", "gu_ptr", "cos_ptr", "sin_ptr"}


def signature(fn, dtype: str) -> dict[str, str]:
    """Argument types of kernel `fn`, inputs in `dtype`, work buffers float32, sizes int32."""
    types = {}
    for name in fn.arg_names:
        if name.isupper():
            types[name] = "constexpr"
        elif name in ("offsets_ptr", "group_ptr"):
            types[name] = "*i64"
        elif name == "mask_ptr":
            types[name] = "*u8"
        elif name.endswith("_ptr"):
            types[name] = f"*{dtype}" if name in INPUTS else "*fp32"
        elif name in ("eps", "bias"):
            types[name] = "fp32"
        else:
            types[name] = "i64" if name.startswith("stride") else "i32"
    return types


def configs(module: str):
    """(kernel, constexprs, num_warps, input dtype) to compile for `module`, covering each branch."""
    if module == "pooling":
        from sdscore.kernels import pooling_triton as pt

        for packed, dtype in ((False, "bf16"), (True, "fp32")):
            yield pt._masked_mean_kernel, {"PACKED": packed, "BLOCK_L": pt.BLOCK_L, "BLOCK_H": 256}, 4, dtype
            yield pt._last_token_kernel, {"PACKED": packed, "BLOCK_L": pt.BLOCK_L, "BLOCK_H": 256}, 4, dtype
            for width in (7, 3584):
                block_l, block_h = pt.attention_blocks(width)
                consts = {"PACKED": packed, "BLOCK_L": block_l, "BLOCK_H": block_h}
                yield pt._attention_pool_kernel, consts, pt._num_warps(block_l, block_h), dtype
        yield pt._softmax_combine_kernel, {"BLOCK_S": 8, "BLOCK_H": 256}, 4, "fp16"
    elif module == "decoder":
        from sdscore.kernels import decoder_triton as dt

        # the 7B thinker's widths: hidden 3584 (RMSNorm block 4096, 16 warps), head dim 128
        for dtype in ("bf16", "fp16", "fp32"):
            yield dt._rms_norm_kernel, {"BLOCK_H": 4096}, 16, dtype
            yield dt._silu_mul_kernel, {"BLOCK": dt.MAX_BLOCK}, 4, dtype
            yield dt._rotary_kernel, {"BLOCK": 64}, 4, dtype
    else:
        from sdscore.kernels import similarity_triton as st

        for dim, has_ref, dtype in ((7, False, "fp32"), (769, True, "bf16")):
            block_n, block_d = st.similarity_blocks(dim)
            warps = st._num_warps(block_n, block_d)
            consts = {"HAS_REF": has_ref, "BLOCK_N": block_n, "BLOCK_D": block_d}
            yield st._group_cosine_kernel, consts, warps, dtype
            yield st._candidate_kernel, consts, warps, dtype
            yield st._group_stats_kernel, {"BLOCK_N": block_n, "BLOCK_D": block_d}, warps, dtype


def compile_in_subprocess(module: str) -> subprocess.CompletedProcess:
    """Run this script for `module` without TRITON_INTERPRET (the GPU code path); for the tests."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, str(Path(__file__)), module], env=env, capture_output=True, text=True)


def main() -> int:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        print(f"no ahead-of-time compile API: {exc}")
        return 77
    target = GPUTarget("cuda", 90, 32)
    for fn, consts, warps, dtype in configs(sys.argv[1]):
        source = ASTSource(fn=fn, signature=signature(fn, dtype), constexprs=consts)
        compiled = triton.compile(source, target=target, options={"num_warps": warps})
        if "cubin" not in compiled.asm:
            print(f"{fn.__name__} {consts} {dtype}: no cubin")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
