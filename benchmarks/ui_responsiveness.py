"""Does the window stay responsive while a job runs? A QTimer heartbeat during a real merge and extraction.

    python benchmarks/ui_responsiveness.py [--hidden 1024] [--layers 4] [--busy]

Opens the window (offscreen unless a display is there), then runs a TIES merge of two generated fine-tunes
and a LoRA extraction through the window's own pages and job runner, with the Jobs page showing progress.
A 5 ms QTimer on the UI thread records when it fires; the stall of each beat is how late it came. Prints the
worst stall and the 99th percentile per job (target: worst < 50 ms). `--busy` runs both jobs again with a
competing CPU load (one busy process per half of the cores, as benchmarks/merge.py --busy does): a busy
workstation must not make the window stall either.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import CompetingLoad, load_average  # noqa: E402

BEAT_MS = 5
WRITE_MODELS = """
import sys
from pathlib import Path
from guiapp.checkpoints.samples import LlamaShape, write_llama, write_llama_finetune
folder, hidden, layers = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
shape = LlamaShape(hidden=hidden, intermediate=int(hidden * 2.75), layers=layers, heads=16, kv_heads=4, vocab=8192)
base = write_llama(folder / "base", shape, seed=0)
for i in (1, 2):
    write_llama_finetune(folder / f"tune-{i}", base, seed=i, delta_rank=16)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--busy", action="store_true", help="measure again with another process busy")
    args = parser.parse_args()
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="mergesmith-bench-") as folder:
        os.environ["MERGESMITH_CONFIG_DIR"] = str(Path(folder) / "config")
        return run(Path(folder), args.hidden, args.layers, args.busy)


def run(folder: Path, hidden: int, layers: int, busy: bool) -> int:
    from PySide6.QtCore import QSettings, QTimer

    from guiapp.ui.app import create_window

    print(f"Writing a base and two fine-tunes (hidden {hidden}, {layers} layers)…", flush=True)
    # In a child process, so that this one starts like the app does: no torch threads before the first job.
    subprocess.run([sys.executable, "-c", WRITE_MODELS, str(folder), str(hidden), str(layers)], check=True)
    base = folder / "base"
    tunes = [folder / "tune-1", folder / "tune-2"]
    size = sum(f.stat().st_size for f in base.glob("*.safetensors"))
    print(f"Each model: {size / 1e6:.0f} MB", flush=True)

    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(folder / "qsettings"))
    app, window = create_window([sys.argv[0]], keep_history=False)
    window.resize(1280, 860)
    window.show()
    window.state.start_loading(probe=False)
    wait(lambda: window.state.methods is not None, 120)

    beats: list[float] = []
    timer = QTimer(interval=BEAT_MS)
    timer.timeout.connect(lambda: beats.append(time.perf_counter()))

    def measure(label: str, start) -> bool:
        beats.clear()
        timer.start()
        key = start()
        record = window.state.jobs.record(key)
        wait(lambda: record.status not in ("queued", "running"), 600)
        timer.stop()
        late = [(max(0.0, (b - a) * 1000 - BEAT_MS), a - beats[0]) for a, b in zip(beats, beats[1:])]
        stalls = sorted(stall for stall, _ in late)
        worst, p99 = stalls[-1], stalls[int(0.99 * (len(stalls) - 1))]
        seconds = record.finished - record.started
        print(f"{label}: {record.status} in {seconds:.1f} s; {len(beats)} heartbeats; event-loop stall worst "
              f"{worst:.1f} ms, p99 {p99:.1f} ms (target worst < 50 ms)", flush=True)
        print("  longest stalls (ms at s after submit): " + ", ".join(
            f"{stall:.0f} at {when:.2f}" for stall, when in sorted(late, reverse=True)[:5]), flush=True)
        return record.status == "done" and worst < 50

    import yaml

    window.merge.yaml_edit.setPlainText(yaml.safe_dump({
        "merge_method": "ties", "base_model": str(base),
        "models": [{"model": str(t), "parameters": {"weight": 0.5, "density": 0.5}} for t in tunes],
    }))
    print(load_average(), flush=True)
    results = [measure_both(window, folder / "quiet", base, tunes, measure, "")]
    if busy:
        with CompetingLoad() as load:
            results.append(measure_both(window, folder / "busy", base, tunes, measure,
                                        f" with {load.count} busy process(es)"))
    window.state.jobs.shutdown()
    del app
    return 0 if all(results) else 1


def measure_both(window, out: Path, base: Path, tunes: list[Path], measure, label: str) -> bool:
    """The TIES merge and the extraction through the window's pages, writing under `out`."""
    window.show_page("merge")
    window.merge.output_edit.setText(str(out / "merged"))
    wait(lambda: window.merge.run_message.text() == "Ready.", 60)
    merge_ok = measure("TIES merge" + label, window.merge.run)

    window.show_page("lora")
    window.lora.x_base.set_text(str(base))
    window.lora.x_model.set_text(str(tunes[0]))
    window.lora.rank_value.setValue(16)
    window.lora.x_out.setText(str(out / "adapter"))
    extract_ok = measure("LoRA extraction" + label, window.lora.run_extract)
    return merge_ok and extract_ok


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
