"""Publishing safely: no credential leaves in a file or the card, the token never goes to another origin, a
misbehaving Hub (inline weights, ignored files, gzip bombs, echoed tokens and escape sequences) ends in a
clear error before anything is committed, and what the Hub sends is printed without control characters."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from guiapp.errors import HubError, HubResponseError, UploadRefusedError
from guiapp.hub.upload import check_upload, upload_folder
from tests.support.hub_server import TEST_TOKEN, TEST_USER, HubServer, make_hostile

REPO = f"{TEST_USER}/tiny-merge"
# Shaped like real credentials, assembled here so that no scanner mistakes this file for a leak.
HUB_TOKEN = "hf_" + "Q" * 34
FAKE_CREDENTIALS = {
    "hub token": ("notes.txt", f"my token is {HUB_TOKEN}\n"),
    "AWS key": ("deploy/aws.ini", "aws_access_key_id = AKIA" + "IOSFODNN7EXAMPLE" + "\n"),
    "OpenAI key": ("eval.py", 'client = OpenAI(api_key="sk-' + "proj-" + "a1B2" * 10 + '")\n'),
    "GitHub token": ("ci.sh", "export GH_TOKEN=ghp_" + "x9" * 18 + "\n"),
    "private key": ("id_ed25519", "-----BEGIN OPENSSH PRIVATE" + " KEY-----\nb3BlbnNzaA==\n-----END\n"),
}


@pytest.fixture
def folder(samples, tmp_path) -> Path:
    """A copy of a sharded model the test may add files to."""
    return Path(shutil.copytree(samples.sharded, tmp_path / "model"))


def _commits(server: HubServer) -> list:
    return [r for r in server.requests if "/commit/" in r.path]


def test_the_token_in_a_dotenv_file_is_refused_naming_the_file(uploads, signed_in, folder):
    (folder / ".env").write_text(f"HF_TOKEN={TEST_TOKEN}\n")
    with pytest.raises(UploadRefusedError, match=r"\.env") as caught:
        check_upload(folder, REPO)
    assert TEST_TOKEN not in str(caught.value) and uploads.created == []


@pytest.mark.parametrize("kind", sorted(FAKE_CREDENTIALS))
def test_credentials_in_the_folder_are_refused(uploads, signed_in, folder, kind):
    name, text = FAKE_CREDENTIALS[kind]
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    with pytest.raises(UploadRefusedError, match=name) as caught:
        check_upload(folder, REPO)
    assert text.strip()[-12:] not in str(caught.value)


def test_a_token_in_the_card_is_refused_before_anything_is_sent(uploads, signed_in, folder, hub_env):
    plan = check_upload(folder, REPO)
    hub_env.server.reset_counters()
    with pytest.raises(UploadRefusedError, match="README.md"):
        upload_folder(plan, card=f"# Tiny merge\n\nDownload with token {TEST_TOKEN}\n")
    assert hub_env.server.requests == [] and uploads.created == []


def test_the_cli_refuses_a_readme_holding_the_token(uploads, signed_in, folder, capfd):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    (folder / "README.md").write_text(f"# Mine\n\nuse `HF_TOKEN={TEST_TOKEN}`\n")
    assert main(["hub", "upload", str(folder), REPO]) != EXIT_OK
    captured = capfd.readouterr()
    assert "README.md" in captured.err and TEST_TOKEN not in captured.out + captured.err
    assert uploads.created == []


def test_the_token_never_goes_to_another_origin_for_the_lfs_verify(uploads, signed_in, folder, hub_env):
    with HubServer() as elsewhere:
        uploads.verify_origin = elsewhere.url
        with pytest.raises(HubResponseError, match="127.0.0.1"):
            upload_folder(check_upload(folder, REPO))
        assert not any(request.authorized for request in elsewhere.requests)
    assert _commits(hub_env.server) == []


def test_weights_the_hub_wants_inline_are_refused_before_the_commit(uploads, signed_in, tmp_path, hub_env):
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    save_file({"weight": torch.zeros(3 * 1024 * 1024)}, folder / "model.safetensors")  # 12 MiB
    uploads.upload_mode = "regular"
    with pytest.raises(HubResponseError, match="model.safetensors"):
        upload_folder(check_upload(folder, REPO))
    assert _commits(hub_env.server) == []


def test_a_gzip_bomb_as_the_lfs_batch_answer_is_stopped(uploads, signed_in, folder, hub_env):
    uploads.batch_gzip_bomb_bytes = 256 * 1024 * 1024
    with pytest.raises(HubResponseError, match="larger than"):
        upload_folder(check_upload(folder, REPO))
    assert _commits(hub_env.server) == []


def test_files_the_hub_ignores_are_an_error_naming_them(uploads, signed_in, folder, hub_env):
    uploads.ignored = {"model-00002-of-00003.safetensors"}
    with pytest.raises(HubError, match="model-00002-of-00003.safetensors"):
        upload_folder(check_upload(folder, REPO))
    assert _commits(hub_env.server) == []


def test_a_repo_named_like_the_token_is_refused(uploads, signed_in, folder):
    with pytest.raises(UploadRefusedError) as caught:
        check_upload(folder, f"{TEST_USER}/{TEST_TOKEN}")
    assert TEST_TOKEN not in str(caught.value) + str(caught.value.hint) and uploads.created == []


def test_a_bare_name_goes_under_the_signed_in_user(uploads, signed_in, folder):
    plan = check_upload(folder, "merged")
    assert plan.repo_id == f"{TEST_USER}/merged"
    upload_folder(plan)
    assert uploads.created == [f"{TEST_USER}/merged"]


def test_a_folder_that_is_not_a_model_is_refused_naming_what_is_missing(uploads, signed_in, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host example\n  User me\n")
    (home / "notes.txt").write_text("shopping list\n")
    with pytest.raises(UploadRefusedError, match="config.json") as caught:
        check_upload(home, REPO)
    assert ".gguf" in str(caught.value) + str(caught.value.hint)
    assert check_upload(home, REPO, any_folder=True).files  # asked for anyway: allowed
    assert uploads.created == []


def test_models_adapters_and_gguf_files_are_publishable(uploads, signed_in, samples, tmp_path):
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "tiny.Q4_K_M.gguf").write_bytes(b"GGUF" + bytes(64))
    for folder in (samples.base, samples.adapter, gguf):
        check_upload(folder, REPO)


def test_the_cli_refuses_a_non_model_folder_unless_forced(uploads, signed_in, tmp_path, capfd):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("shopping list\n")
    assert main(["hub", "upload", str(home), REPO]) != EXIT_OK
    err = capfd.readouterr().err
    assert "config.json" in err and "--force" in err and uploads.created == []
    assert main(["hub", "upload", str(home), REPO, "--force"]) == EXIT_OK
    assert uploads.created == [REPO]


def test_a_fine_grained_token_without_write_access_is_refused_naming_the_permission(uploads, signed_in, folder):
    uploads.fine_grained[TEST_TOKEN] = [{"entity": {"type": "user", "name": TEST_USER},
                                         "permissions": ["repo.content.read"]}]
    with pytest.raises(UploadRefusedError, match="repo.write") as caught:
        check_upload(folder, REPO)
    assert TEST_USER in str(caught.value) and uploads.created == []
    uploads.fine_grained[TEST_TOKEN] = [{"entity": {"type": "user", "name": TEST_USER},
                                         "permissions": ["repo.content.read", "repo.write"]}]
    upload_folder(check_upload(folder, REPO))
    assert uploads.created == [REPO]


def test_an_upload_without_public_into_a_public_repo_is_refused(uploads, signed_in, folder, capfd):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    assert main(["hub", "upload", str(folder), REPO, "--public"]) == EXIT_OK
    capfd.readouterr()
    (folder / "extra.json").write_text("{}")
    assert main(["hub", "upload", str(folder), REPO]) != EXIT_OK
    captured = capfd.readouterr()
    assert "(private)" not in captured.out and "public" in captured.err and "--public" in captured.err
    assert not (uploads.store / REPO / "extra.json").exists()


def test_a_commit_url_echoing_the_token_and_escapes_is_printed_clean(uploads, signed_in, folder, capfd):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    uploads.commit_url_extra = "?token={token}\x1b]0;owned\x07\x1b[2J\x9b31m"
    assert main(["hub", "upload", str(folder), REPO]) == EXIT_OK
    out = capfd.readouterr().out
    assert f"Published {REPO} (private)" in out
    assert TEST_TOKEN not in out and not any(c in out for c in "\x1b\x07\x9b")


def test_hub_info_prints_no_control_characters_from_the_server(hub_env, samples, capfd):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    hub_env.server.add_model("org/base", samples.base)
    modes = make_hostile(hub_env.server)
    modes.info_fields = {"cardData": {"license": "mit\x1b]0;owned\x07", "base_model": "org/x\x1b[2J"},
                         "lastModified": "2024-01-01T00:00:00.000Z"}
    assert main(["hub", "info", "org/base"]) == EXIT_OK
    out = capfd.readouterr().out
    assert "Licence:" in out and not any(c in out for c in "\x1b\x07")


def test_a_server_error_on_the_commit_is_worded_as_an_upload_failure(uploads, signed_in, folder, hub_env, capfd):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    hub_env.server.fail_next(500, times=50, path_contains="/commit/")
    assert main(["hub", "upload", str(folder), REPO]) != EXIT_OK
    captured = capfd.readouterr()
    err = " ".join(captured.err.split())  # the explanation is wrapped to the terminal's width
    assert "The upload did not finish" in err and "saving the upload" in err and "not sent again" in err
    assert "Downloads" not in err and "could not be reached" not in err


def test_a_refusal_with_escape_sequences_is_printed_clean(uploads, signed_in, folder, capfd):
    from guiapp.__main__ import main
    from guiapp.cli.process import EXIT_OK

    uploads.commit_refusal = "Forbidden\x1b]0;owned\x07\x1b[2J\x9b31m by policy"
    assert main(["hub", "upload", str(folder), REPO]) != EXIT_OK
    err = capfd.readouterr().err
    assert "refused the upload" in " ".join(err.split()) and "by policy" in err
    assert not any(c in err for c in "\x1b\x07\x9b\r")


def test_huggingface_hubs_retry_warnings_stay_out_of_the_output(uploads, signed_in, folder, hub_env, caplog):
    """Its logger writes to the terminal directly ("HTTP Error 500 thrown while requesting PUT …"); our
    progress says what happens, in our words."""
    hub_env.server.fail_next(500, times=1, path_contains="/__lfs/")
    upload_folder(check_upload(folder, REPO))
    assert uploads.created == [REPO]
    assert [r.getMessage() for r in caplog.records if r.name.startswith("huggingface_hub")] == []


def test_a_token_in_a_weights_files_metadata_is_refused(uploads, signed_in, folder):
    import torch
    from safetensors.torch import save_file

    save_file({"extra": torch.zeros(4)}, folder / "extra.safetensors", metadata={"pushed_with": HUB_TOKEN})
    with pytest.raises(UploadRefusedError, match="extra.safetensors"):
        check_upload(folder, REPO)



def test_a_retried_publish_keeps_the_confirmation_for_a_non_model_folder(uploads, signed_in, tmp_path):
    from guiapp.jobs.publish import publish_job
    from guiapp.jobs.specs import job_from_spec
    from guiapp.progress import Progress

    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("shopping list\n")
    confirmed = publish_job(home, REPO, any_folder=True)
    assert job_from_spec("publish", confirmed.spec).work(Progress())["repo"] == REPO
    with pytest.raises(UploadRefusedError, match="does not look like a model"):
        job_from_spec("publish", publish_job(home, REPO).spec).work(Progress())


def test_a_refused_large_file_upload_is_worded_as_an_upload_failure(uploads, signed_in, folder, hub_env):
    from guiapp.errors import UploadFailedError

    hub_env.server.fail_next(403, times=1, path_contains="/__lfs/")
    with pytest.raises(UploadFailedError, match="refused the upload") as caught:
        upload_folder(check_upload(folder, REPO))
    assert "not sent again" in str(caught.value.hint) and _commits(hub_env.server) == []
