"""Publishing with the real huggingface_hub client against the test Hub's upload API: a round trip, resume after
a dropped connection, cancel, and each refusal before anything is sent."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from guiapp.errors import ConnectionLostError, InvalidTokenError, JobCancelled, UploadRefusedError
from guiapp.hub.upload import check_upload, upload_folder
from guiapp.progress import CancelToken, Progress
from tests.support.hub_server import TEST_TOKEN, TEST_USER

REPO = f"{TEST_USER}/tiny-merge"


@pytest.fixture
def model_folder(samples) -> Path:
    return samples.sharded


def _digests(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and ".cache" not in p.parts}


def test_round_trip_gives_identical_files(uploads, signed_in, model_folder, tmp_path):
    from huggingface_hub import snapshot_download

    events = []
    plan = check_upload(model_folder, REPO)
    assert not plan.exists and plan.private
    url = upload_folder(plan, Progress(on_event=events.append))
    assert REPO in url and uploads.created == [REPO] and uploads.private[REPO] is True
    downloaded = Path(snapshot_download(REPO, local_dir=tmp_path / "download"))
    assert _digests(downloaded) == _digests(model_folder)
    assert events[-1].done == len(plan.files) and events[-1].bytes_done == plan.total_bytes
    within_files = [e for e in events if e.bytes_done and e.done < len(plan.files)]
    assert len({e.bytes_done for e in within_files}) > len(plan.files)  # bytes move while a file is sent
    weights = [name for name, _, _ in plan.files if name.endswith(".safetensors")]
    assert len(uploads.lfs_objects) == len(weights) == 3  # the weights went through LFS, the rest inline


def test_public_only_after_the_files_are_committed(uploads, signed_in, model_folder):
    upload_folder(check_upload(model_folder, REPO, private=False))
    assert uploads.private[REPO] is False


@pytest.fixture
def back_offs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits huggingface_hub's retry loop asks for, recorded instead of slept (1+2+4+8+8 s per cut-off file:
    the test waited them out), so that the retries themselves still happen."""
    from huggingface_hub.utils import _http

    asked: list[float] = []
    clock = {name: getattr(time, name) for name in dir(time) if not name.startswith("_")}
    monkeypatch.setattr(_http, "time", SimpleNamespace(**{**clock, "sleep": asked.append}))
    return asked


def test_resume_after_a_dropped_connection_sends_only_what_is_missing(uploads, signed_in, model_folder, tmp_path,
                                                                       back_offs):
    from huggingface_hub import snapshot_download

    plan = check_upload(model_folder, REPO)
    large = [(name, size) for name, _, size in plan.files if name.endswith(".safetensors")]
    assert len(large) >= 2
    first_oid = hashlib.sha256((model_folder / large[0][0]).read_bytes()).hexdigest()
    # The first shard goes through; then every attempt at the second is cut off (more than the client retries).
    first_done = [name for name, _, _ in plan.files].index(large[0][0]) + 1

    def cut_after_first(event):
        if event.done == first_done:  # the first shard is on the Hub
            uploads.drop_lfs_uploads = 100

    with pytest.raises(ConnectionLostError):
        upload_folder(plan, Progress(on_event=cut_after_first))
    assert len(back_offs) >= 5  # the client retried the cut-off file before giving up
    assert first_oid in uploads.lfs_objects and uploads.private[REPO] is True
    uploads.drop_lfs_uploads = 0
    received_before = dict(uploads.lfs_bytes_received)
    upload_folder(check_upload(model_folder, REPO))
    assert uploads.lfs_bytes_received[first_oid] == received_before[first_oid]  # not sent again
    downloaded = Path(snapshot_download(REPO, local_dir=tmp_path / "download"))
    assert _digests(downloaded) == _digests(model_folder)


def test_cancel_mid_file_stops_the_upload_and_commits_nothing(uploads, signed_in, model_folder):
    token = CancelToken()
    plan = check_upload(model_folder, REPO)

    shard = next(name for name, _, size in plan.files if name.endswith(".safetensors") and size > 200_000)
    seen = []

    def cancel_inside_the_shard(event):
        if event.item == shard and event.done == sum(name < shard for name, _, _ in plan.files):
            seen.append(event.bytes_done)
            token.cancel()  # the first chunk of the shard is on its way: the rest is not sent

    with pytest.raises(JobCancelled):
        upload_folder(plan, Progress(on_event=cancel_inside_the_shard, cancel=token))
    assert seen and not any((uploads.store / REPO).iterdir())  # no commit: the repo has no files
    shard_oid = hashlib.sha256((model_folder / shard).read_bytes()).hexdigest()
    assert shard_oid not in uploads.lfs_objects


def test_not_signed_in_is_refused_before_anything_is_sent(uploads, model_folder, hub_env):
    hub_env.server.reset_counters()
    with pytest.raises(UploadRefusedError, match="not signed in"):
        check_upload(model_folder, REPO)
    assert hub_env.server.requests == []


def test_read_only_token_is_refused(uploads, signed_in, model_folder):
    uploads.roles[TEST_TOKEN] = "read"
    with pytest.raises(UploadRefusedError, match="can only read"):
        check_upload(model_folder, REPO)
    assert uploads.created == []


def test_invalid_token_is_explained(uploads, model_folder, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_token")
    with pytest.raises(InvalidTokenError):
        check_upload(model_folder, REPO)


@pytest.mark.parametrize("name", ["tiny merge", "tester/", "tester/../x", "tester/a.git"])
def test_invalid_names_are_refused(uploads, signed_in, model_folder, name):
    with pytest.raises(UploadRefusedError, match="not a name the Hub accepts"):
        check_upload(model_folder, name)


def test_someone_elses_name_is_refused(uploads, signed_in, model_folder):
    with pytest.raises(UploadRefusedError, match="not your account"):
        check_upload(model_folder, "meta-llama/tiny-merge")


def test_existing_own_repo_gets_a_new_commit(uploads, signed_in, model_folder):
    upload_folder(check_upload(model_folder, REPO))
    again = check_upload(model_folder, REPO)
    assert again.exists
    upload_folder(again, card="---\nlicense: apache-2.0\n---\n# Tiny merge\n")
    assert (uploads.store / REPO / "README.md").read_text().startswith("---\nlicense: apache-2.0")


def test_rate_limit_is_explained(uploads, signed_in, model_folder, hub_env):
    from guiapp.errors import RateLimitedError

    plan = check_upload(model_folder, REPO)
    hub_env.server.fail_next(429, times=50, path_contains="/commit/")
    with pytest.raises(RateLimitedError):
        upload_folder(plan)


def _merge_folder(tmp_path: Path, source: Path) -> Path:
    """A folder as a merge writes it: weights, a card with front matter, and the recipe naming Hub models."""
    folder = tmp_path / "merged"
    folder.mkdir()
    for file in source.iterdir():
        if file.is_file():
            (folder / file.name).write_bytes(file.read_bytes())
    (folder / "README.md").write_text("---\nlibrary_name: transformers\ntags:\n- merge\n- mergesmith\n---\n\n"
                                      "# Merged model\n\nMade by merging.\n")
    (folder / "mergesmith_recipe.yml").write_text(
        "merge_method: linear\nmodels:\n  - model: org/base\n    parameters: {weight: 0.5}\n"
        "  - model: org/tune@v2+org/adapter\n    parameters: {weight: 0.5}\n")
    return folder


def test_card_has_licence_inputs_tags_and_usage(tmp_path, model_folder):
    from guiapp.hub.publish_card import publish_card

    card = publish_card(_merge_folder(tmp_path, model_folder), REPO, "apache-2.0")
    front = yaml_front(card)
    assert front["license"] == "apache-2.0" and front["base_model"] == ["org/base", "org/tune"]
    assert front["tags"] == ["merge", "mergesmith", "mergekit"] and front["library_name"] == "transformers"
    assert "Made by merging." in card and f'from_pretrained("{REPO}")' in card


def test_licence_preset_and_warnings():
    from guiapp.hub.publish_card import InputLicence, licence_warnings, preset_licence

    same = [InputLicence("org/a", "apache-2.0", False), InputLicence("org/b", "apache-2.0", False)]
    assert preset_licence(same) == "apache-2.0" and licence_warnings(same) == []
    mixed = [InputLicence("org/a", "apache-2.0", False), InputLicence("org/gated", "llama3.1", True),
             InputLicence("org/nd", "cc-by-nc-nd-4.0", False)]
    assert preset_licence(mixed) == "other"
    warnings = licence_warnings(mixed)
    assert len(warnings) == 2 and "org/gated is gated" in warnings[0] and "forbids sharing" in warnings[1]


def test_cli_publishes_with_card_and_licence(uploads, signed_in, model_folder, tmp_path, hub_env, samples, capsys):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    hub_env.server.add_model("org/base", samples.base, card_data={"license": "apache-2.0"})
    hub_env.server.add_model("org/tune", samples.finetune, gated=True, card_data={"license": "apache-2.0"})
    folder = _merge_folder(tmp_path, model_folder)
    assert main(["hub", "upload", str(folder), REPO, "--public"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "org/tune is gated" in captured.err and f"Published {REPO} (public)" in captured.out
    assert uploads.private[REPO] is False
    card = (uploads.store / REPO / "README.md").read_text()
    assert yaml_front(card)["license"] == "apache-2.0"


def yaml_front(card: str) -> dict:
    import yaml

    return yaml.safe_load(card.split("---\n")[1])


def test_mergesmith_state_files_are_never_published(uploads, signed_in, model_folder, tmp_path):
    """An output folder holds Mergesmith's marker (written by a real job's code), and may hold a leftover
    staging folder or lock of a killed run: none of them is part of the model, so none is sent."""
    import shutil

    from huggingface_hub import snapshot_download

    from guiapp.checkpoints.output_guard import MARKER, lock_path, staging_name, write_marker

    folder = shutil.copytree(model_folder, tmp_path / "merged")
    write_marker(folder, "merge")
    leftover = staging_name(folder / "model-00001-of-00003.safetensors", "partial")
    leftover.mkdir()
    (leftover / "model-00001-of-00003.safetensors").write_bytes(b"half a shard")
    lock_path(folder / "sub").write_text("")
    plan = check_upload(folder, REPO)
    assert {name for name, _, _ in plan.files} == set(_digests(model_folder))
    upload_folder(plan)
    downloaded = Path(snapshot_download(REPO, local_dir=tmp_path / "download"))
    assert _digests(downloaded) == _digests(model_folder)
    assert not (uploads.store / REPO / MARKER).exists()


def test_changing_the_licence_keeps_the_users_edits(tmp_path, model_folder):
    from guiapp.hub.publish_card import publish_card, with_licence

    card = publish_card(_merge_folder(tmp_path, model_folder), REPO, "apache-2.0")
    edited = card.replace("Made by merging.", "Made by merging, then tested by hand.") + "\nMy own notes.\n"
    edited = edited.replace("tags:\n", "pipeline_tag: text-generation\ntags:\n")
    changed = with_licence(edited, "mit")
    assert yaml_front(changed)["license"] == "mit"
    assert changed == edited.replace("license: apache-2.0", "license: mit")  # nothing else touched
    assert yaml_front(with_licence("# No front matter\n\nText.\n", "mit")) == {"license": "mit"}
    assert with_licence("# No front matter\n\nText.\n", "mit").endswith("# No front matter\n\nText.\n")


def test_the_card_names_local_models_by_folder_name_only(tmp_path, model_folder):
    """A merge of local folders writes their paths into its card and recipe; the published card keeps only
    the folders' names."""
    from guiapp.hub.publish_card import publish_card

    folder = _merge_folder(tmp_path, model_folder)
    local = tmp_path / "inputs" / "my-tune"
    (folder / "README.md").write_text(f"---\ntags:\n- merge\n---\n\n# Merged model\n\n## Models merged\n\n- {local}\n"
                                      f"- org/base (base)\n\nWindows copy: C:\\Users\\me\\models\\other-tune\n")
    (folder / "mergesmith_recipe.yml").write_text(f"merge_method: linear\nbase_model: org/base\nmodels:\n"
                                                  f"  - model: {local}\n  - model: org/base\n")
    card = publish_card(folder, REPO, "apache-2.0")
    assert str(tmp_path) not in card and "C:\\" not in card and "\\Users" not in card
    assert "- my-tune\n" in card and "other-tune" in card and "org/base (base)" in card
    assert yaml_front(card)["base_model"] == ["org/base"]
