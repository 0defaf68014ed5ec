#!/usr/bin/env python3
"""bench/kernel_trace/summary.py on a made-up trace whose answer is known: three steps of 1000 us, each a
200 us embedding kernel, a 30 us gap while the host synchronises, 600 us of GEMM on one stream overlapping
100 us of a copy on another, and 170 us idle at the end of the step."""
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def rows():
    yield "kind,start_ns,end_ns,stream,correlation,name"
    us = 1000
    for step in range(5):  # 2 skipped as warm-up, 3 measured (the last start only closes the third)
        t = step * 1000 * us
        c = step * 10
        yield f"runtime,{t - 5 * us},{t - 4 * us},0,{c + 1},cudaLaunchKernel"
        yield f'kernel,{t},{t + 200 * us},7,{c + 1},"_Z24embedding_forward_kernelPKiPK13__nv_bfloat16"'
        yield f"runtime,{t + 150 * us},{t + 229 * us},0,{c + 2},cudaStreamSynchronize"
        yield f'kernel,{t + 230 * us},{t + 830 * us},7,{c + 3},"nvjet_tst_128x256_gemm"'
        yield f'memcpy,{t + 700 * us},{t + 800 * us},9,{c + 4},"memcpy kind 1 bytes 4096"'
    yield f'kernel,{5000 * us},{5001 * us},7,99,"_Z24embedding_forward_kernelPKiPK13__nv_bfloat16"'


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "trace.csv"
        trace.write_text("\n".join(rows()) + "\n")
        result = subprocess.run([sys.executable, str(ROOT / "bench/kernel_trace/summary.py"), str(trace), "--skip", "2"],
                                capture_output=True, text=True)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.returncode
    out = result.stdout
    # 4 steps of starts after skipping 2 → steps 2→3, 3→4, 4→5: span 1 ms, busy 0.8 ms (200 + 600; the copy lies
    # inside the GEMM), idle 0.2 ms (the 30 us gap and the 170 us after the GEMM).
    assert "3 steps (after 2 skipped): span 1.000 ms a step, GPU busy 0.800 ms, idle 0.200 ms (20.0%)" in out, out
    assert "30.0 us after" in out and "cudaStreamSynchronize x1" in out, out
    assert "nvjet_tst_128x256_gemm" in out and "0.600" in out, out
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
