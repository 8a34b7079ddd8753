"""How much memory each merge method needs, in float32 copies of the tensor it merges.

    python benchmarks/method_memory.py [--elements 16777216]

Each method merges one random tensor with 3 and with 5 inputs (fewer where the method takes exactly two) in a
fresh process; the peak anonymous memory above the inputs gives copies = constant + per_input × n, the figures each
method declares as `working_copies=WorkingCopies(constant, per_input)` in its module under guiapp/merging/methods/
(the estimator in guiapp/jobs/estimates.py reads them from there). The lines printed last can be pasted there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import sys, threading, time, torch
    from guiapp.merging.methods import METHODS
    from guiapp.merging.methods.base import BaseRole, MergeContext

    def private():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024

    name, inputs, elements = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    method = METHODS[name]
    has_base = method.base_role is not BaseRole.INPUT
    tensors = [torch.randn(elements // 4096, 4096) * 0.02 for _ in range(inputs)]
    per_model = [{p.name: p.default for p in method.per_model_params} for _ in tensors]
    for params in per_model:
        params.update({k: v for k, v in {"weight": 0.5, "density": 0.5, "epsilon": 0.1}.items() if k in params})
    params = {p.name: p.default for p in method.global_params}
    params.update({k: 0.5 for k in ("t",) if k in params})
    before, peak, done = private(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], private())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    context = MergeContext(name, tensors, 0 if has_base else None, per_model, params,
                           [str(i) for i in range(inputs)], torch.Generator().manual_seed(0))
    method.merge(context)
    done.set()
    sampler.join()
    print((peak[0] - before) / (elements * 4))
""")
EXACTLY_TWO = {"slerp", "nearswap", "arcee_fusion", "karcher"}


def copies(method: str, inputs: int, elements: int) -> float:
    out = subprocess.run([sys.executable, "-c", _CHILD, method, str(inputs), str(elements)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=16 * 1024 * 1024)
    args = parser.parse_args()
    from guiapp.merging.methods import METHODS

    table = {}
    for name in sorted(METHODS):
        if name == "passthrough":
            continue
        if name in EXACTLY_TWO:
            n = 2
            table[name] = (0.0, round(copies(name, n, args.elements) / n, 2))
        elif name == "nuslerp":
            table[name] = (0.0, round(copies(name, 3, args.elements) / 3, 2))
        else:
            low, high = copies(name, 3, args.elements), copies(name, 5, args.elements)
            slope = max(0.0, (high - low) / 2)
            table[name] = (round(max(0.0, low - 3 * slope), 2), round(slope, 2))
        print(f"{name:18s} constant {table[name][0]:5.2f}  per input {table[name][1]:5.2f}", flush=True)
    print()
    for name, (constant, per_input) in table.items():
        print(f"{name}: working_copies=WorkingCopies({constant}, {per_input}),")


if __name__ == "__main__":
    main()
