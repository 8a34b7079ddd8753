"""The lab's Ray engine against a Ray it starts on this machine (and stops), and a cluster address that does not
answer. Ray takes 4-20 s to start here, so the case that starts one is slow."""

from __future__ import annotations

import json
import threading
import time

import psutil
import pytest

from guiapp.errors import ClusterError
from guiapp.lab.search import LabSettings, run_lab


def _ray_processes() -> set[int]:
    found = set()
    for process in psutil.process_iter(["name", "cmdline"]):
        words = " ".join([process.info["name"] or "", *(process.info["cmdline"] or [])])
        if "raylet" in words or "gcs_server" in words or "msray-" in words or words.startswith("ray::"):
            found.add(process.pid)
    return found


@pytest.mark.slow
def test_trials_on_a_local_ray_match_the_local_engine_and_leave_nothing_running(planted, recipe, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # where Ray would write ~/.ray/auth_token
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    text = tmp_path / "long.txt"
    text.write_text(planted.mixed_text.read_text() * 12)  # trials long enough to be caught running
    killed: list[int] = []
    searching = threading.Event()

    def kill_a_running_trial() -> None:
        """Watch for a worker running a trial and kill the first one seen (a worker lost mid-trial: Ray runs the
        trial again). Watching all along, not after each recorded trial: on a busy machine a trial may start and end
        between two records."""
        while searching.is_set() and not killed:
            for process in psutil.process_iter(["name", "cmdline"]):
                title = " ".join(process.info["cmdline"] or [process.info["name"] or ""])
                if title.startswith("ray::mergesmith-lab-trial-") and not title.startswith("ray::mergesmith-lab-trial-0"):
                    process.kill()
                    killed.append(process.pid)
                    break
            time.sleep(0.05)  # trials here run for 0.2-2 s; a scan of every process costs ~6 ms of a core

    before = _ray_processes()
    searching.set()
    watcher = threading.Thread(target=kill_a_running_trial, daemon=True)
    watcher.start()
    try:
        on_ray = run_lab(LabSettings(recipe, text, trials=8, out=tmp_path / "ray", engine="ray"))
    finally:
        searching.clear()
        watcher.join()
    here = run_lab(LabSettings(recipe, text, trials=8, out=tmp_path / "local"))

    assert on_ray.engine == "ray" and killed
    assert sorted((r.index, r.values, r.perplexity) for r in on_ray.records) == \
        [(r.index, r.values, r.perplexity) for r in here.records]
    assert all(r.succeeded for r in on_ray.records)
    assert _ray_processes() <= before
    assert not (tmp_path / "home" / ".ray").exists()
    assert len((tmp_path / "ray" / "trials.jsonl").read_text().splitlines()) == 9


def test_an_address_where_nothing_answers_is_named_with_what_to_check(planted, recipe, tmp_path, warm_cli):
    with pytest.raises(ClusterError) as caught:
        run_lab(LabSettings(recipe, planted.mixed_text, trials=2, out=tmp_path / "lab", engine="ray",
                            ray_address="127.0.0.1:9"))
    message = str(caught.value)
    assert "127.0.0.1:9" in message and "ray status" in message and "\n" not in message
    done = warm_cli.run(["lab", str(recipe), "--text", str(planted.mixed_text), "--trials", "2", "--out",
                         str(tmp_path / "cli"), "--engine", "ray", "--ray-address", "127.0.0.1:9", "--json"],
                        timeout=120)
    assert done.returncode != 0 and "Nothing answers at the Ray address 127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr
    assert not json.dumps(done.stdout).count("best_perplexity")
