"""Does the window stay responsive while models generate on the Try page? And the Try page's screenshot.

    python benchmarks/try_responsiveness.py [--hidden 768] [--layers 6] [--tokens 64] [--sample] [--screenshot]

Writes three Llama-shaped models with a real tokenizer (as tests/tryout builds them), opens the window
(offscreen unless a display is there) and generates with all three from the Try page, through the window's own
job runner. A 5 ms QTimer on the UI thread records when it fires; the stall of each beat is how late it came
(the approach of benchmarks/ui_responsiveness.py). Prints the worst stall and the 99th percentile of a first run
(which loads the models) and of a second (models kept loaded); target: worst < 50 ms once loaded. With --screenshot, saves docs/screenshot-try.png once the three columns are full.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # for tests.tryout.models
BEAT_MS = 5
WRITE_MODELS = """
import dataclasses, sys
from pathlib import Path
import torch
from tests.tryout import models
folder, hidden, layers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
models.SHAPE = dataclasses.replace(models.SHAPE, hidden=hidden, intermediate=int(hidden * 2.75), layers=layers,
                                   heads=hidden // 64, kv_heads=max(1, hidden // 256))
for name, dtype, seed in (("tiny-base", torch.bfloat16, 0), ("tiny-chat", torch.float16, 1),
                          ("tiny-merged", torch.float32, 2)):
    models.write_causal(folder / name, dtype, seed=seed)
"""
PROMPT = "the cat sat on the mat and"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--screenshot", action="store_true", help="Save docs/screenshot-try.png.")
    parser.add_argument("--sample", action="store_true", help="Sample (seed 3) instead of greedy decoding.")
    args = parser.parse_args()
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="mergesmith-bench-") as folder:
        os.environ["MERGESMITH_CONFIG_DIR"] = str(Path(folder) / "config")
        return run(Path(folder), args)


def run(folder: Path, args: argparse.Namespace) -> int:
    from PySide6.QtCore import QSettings, QTimer

    from guiapp.ui.app import create_window

    print(f"Writing three models (hidden {args.hidden}, {args.layers} layers)…", flush=True)
    # In a child process, so that this one starts like the app does: no torch threads before the first job.
    subprocess.run([sys.executable, "-c", WRITE_MODELS, str(folder), str(args.hidden), str(args.layers)],
                   check=True, cwd=ROOT)
    references = [str(folder / name) for name in ("tiny-base", "tiny-chat", "tiny-merged")]

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder / "qsettings"))
    app, window = create_window([sys.argv[0]], keep_history=False)
    window.resize(1360, 860)
    window.show()
    window.state.start_loading()
    wait(lambda: window.state.methods is not None and window.state.probe is not None, 300)
    window.show_page("try")
    page = window.try_page
    page.set_models(references)
    page.prompt.setPlainText(PROMPT)
    page.max_new_tokens.setValue(args.tokens)
    page.decoding.setCurrentIndex(1 if args.sample else 0)
    page.seed.setValue(3)

    beats: list[float] = []
    timer = QTimer(interval=BEAT_MS)
    timer.timeout.connect(lambda: beats.append(time.perf_counter()))

    def measure(label: str) -> tuple[str, float]:
        beats.clear()
        timer.start()
        page.generate()
        record = window.state.jobs.record(page._key)
        wait(lambda: record.status not in ("queued", "running"), 900)
        timer.stop()
        late = [(max(0.0, (b - a) * 1000 - BEAT_MS), a - beats[0]) for a, b in zip(beats, beats[1:])]
        stalls = sorted(stall for stall, _ in late)
        worst, p99 = stalls[-1], stalls[int(0.99 * (len(stalls) - 1))]
        tokens = sum(len(g["tokens"]) for g in record.summary.get("generations", []))
        print(f"{label}: {record.status} in {record.finished - record.started:.1f} s ({tokens} tokens); "
              f"{len(beats)} heartbeats; event-loop stall worst {worst:.1f} ms, p99 {p99:.1f} ms "
              "(target worst < 50 ms)", flush=True)
        print("  longest stalls (ms at s after submit): " + ", ".join(
            f"{stall:.0f} at {when:.2f}" for stall, when in sorted(late, reverse=True)[:5]), flush=True)
        return record.status, worst

    # The first run loads the models (and transformers' modelling code); the second finds them loaded.
    first_status, _ = measure(f"Try, 3 models × {args.tokens} tokens, loading them")
    status, worst = measure("Try again, models loaded")
    if args.screenshot:
        settle = time.monotonic() + 0.5
        wait(lambda: time.monotonic() > settle, 5)
        window.grab().save(str(ROOT / "docs" / "screenshot-try.png"))
        print("docs/screenshot-try.png")
    window.state.jobs.shutdown()
    del app
    return 0 if first_status == status == "done" and worst < 50 else 1


def wait(done, timeout: float) -> None:
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        QApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 5)


if __name__ == "__main__":
    sys.exit(main())
