#!/usr/bin/env python3
"""Single-threaded encode speed of HF tokenizers, the same work as moetune_tokenizer_bench does in C++: the whole
text in one `encode` call, then line by line (no encode_batch; RAYON_NUM_THREADS=1).

Run:  python tests/reference/tokenizer_speed.py [TOKENIZER_DIR [TEXT_FILE]]
Without arguments: the qwen_style fixture, and the test strings of cases.json joined by newlines and repeated to 5 MB.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from tokenizers import Tokenizer  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "tokenizers"
DEFAULT_BYTES = 5 << 20


def default_text():
    block = "".join(text + "\n" for text in json.loads((FIXTURES / "cases.json").read_text("utf-8"))["texts"])
    text = ""
    while len(text.encode("utf-8")) < DEFAULT_BYTES:
        text += block
    return text


def best_of(repeats, work):
    """Best wall and CPU (the process's, all threads) seconds of `repeats` runs of `work`, and the tokens it counted.
    CPU time moves much less than wall time when the machine is shared."""
    wall, cpu, tokens = float("inf"), float("inf"), 0
    for _ in range(repeats):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        tokens = work()
        cpu = min(cpu, time.process_time() - cpu_start)
        wall = min(wall, time.perf_counter() - wall_start)
    return wall, cpu, tokens


def report(what, megabytes, timing):
    wall, cpu, tokens = timing
    print(f"{what:<42} {megabytes / cpu:8.2f} MB/s CPU time, {megabytes / wall:8.2f} MB/s wall  ({tokens} tokens)")


def main():
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURES / "qwen_style"
    text = Path(sys.argv[2]).read_bytes().decode("utf-8") if len(sys.argv) > 2 else default_text()
    megabytes = len(text.encode("utf-8")) / 1e6

    start = time.perf_counter()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    print(f"tokenizer {folder}: loaded in {time.perf_counter() - start:.3f} s")
    print(f"text: {megabytes:.2f} MB")

    def whole():
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    report("whole text, first call (cold word cache):", megabytes, best_of(1, whole))
    report("whole text, best of 3:", megabytes, best_of(3, whole))

    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # as the C++ side: a final newline ends the last line, it does not start another

    def by_line():
        return sum(len(tokenizer.encode(line, add_special_tokens=False).ids) for line in lines)

    report(f"line by line ({len(lines)} lines), best of 3:", megabytes, best_of(3, by_line))

if __name__ == "__main__":
    main()
