"""Every row of docs/spec/errors.md, raised for real where this machine can raise it, as pasted text otherwise."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy
import pytest
import torch
from safetensors.torch import load_file, save_file

from guiapp.errors import CheckpointError, GatedModelError, JobCancelled, MergesmithError, NonFiniteResultError, Remedy
from guiapp.system.explain import Explanation, explain


def raised(action: Callable[[], Any]) -> BaseException:
    try:
        action()
    except BaseException as error:  # noqa: BLE001 - the point is to catch whatever the library raises
        return error
    raise AssertionError("expected the call to fail")


def explained(action: Callable[[], Any], context: dict | None = None) -> Explanation:
    explanation = explain(raised(action), context)
    assert explanation.recognised, explanation.render_text()
    return explanation


# --- dtype rows -------------------------------------------------------------------------------------------------


def test_svd_and_qr_in_half_types():
    svd = explained(lambda: torch.linalg.svd(torch.randn(8, 8, dtype=torch.bfloat16)))
    assert svd.title == "SVD or QR cannot run in half precision"
    assert "linalg_svd_cpu" in svd.what and "bfloat16" in svd.what
    assert "tensor.float()" in svd.fix and "float32" in svd.fix
    qr = explained(lambda: torch.linalg.qr(torch.randn(8, 8, dtype=torch.float16)))
    assert qr.title == svd.title and "geqrf_cpu" in qr.what and "float16" in qr.what
    cuda = explain('RuntimeError: "svd_cuda_gesvdj" not implemented for \'BFloat16\'')
    assert cuda.title == svd.title and "svd_cuda_gesvdj" in cuda.what


def test_float16_matmul_on_an_old_cpu_torch():
    # torch >= 2.2 has this kernel, so the message can only be pasted (PEFT DoRA init, old torch on CPU).
    pasted = explain('  File "peft/tuners/lora/dora.py", line 74, in update_layer\n'
                     "    weight_norm = self.get_weight_norm(weight, lora_weight, scaling)\n"
                     'RuntimeError: "addmm_impl_cpu_" not implemented for \'Half\'')
    assert pasted.recognised and pasted.title == "float16 arithmetic is not available on the CPU"
    assert "float32" in pasted.fix and pasted.remedy.changes == {"dtype": "float32"}


def test_other_kernels_missing_in_half_or_float8():
    fp8 = explained(lambda: torch.sign(torch.ones(4).to(torch.float8_e4m3fn)))
    assert fp8.title == "This operation does not support the model's dtype"
    assert "sign_cpu" in fp8.what and "float8_e4m3fn" in fp8.what and "float32" in fp8.fix
    quantile = explained(lambda: torch.quantile(torch.ones(8, dtype=torch.bfloat16), 0.5))
    assert quantile.title == fp8.title and "torch.quantile" in quantile.what


def test_numpy_and_bfloat16():
    numpy_error = explained(lambda: torch.ones(2, dtype=torch.bfloat16).numpy())
    assert numpy_error.title == "NumPy cannot hold bfloat16 tensors"
    assert ".float().numpy()" in numpy_error.fix


def _bf16(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bfloat16)


# Each way torch combines a float32 tensor with a bfloat16 one in a product, as torch raises it on this machine.
MIXED_DTYPE_CALLS = {
    "matmul": lambda: torch.ones(2, 3) @ _bf16(3, 2),
    "matmul-reversed": lambda: _bf16(2, 3) @ torch.ones(3, 2),
    "matmul-float16": lambda: torch.ones(2, 3) @ torch.ones(3, 2, dtype=torch.float16),
    "matmul-float64": lambda: torch.ones(2, 3) @ torch.ones(3, 2, dtype=torch.float64),
    "matmul-batched": lambda: torch.ones(1, 2, 3) @ _bf16(1, 3, 2),
    "matmul-vectors": lambda: torch.ones(3) @ _bf16(3),
    "mm": lambda: torch.mm(torch.ones(2, 3), _bf16(3, 2)),
    "mv": lambda: torch.mv(torch.ones(2, 3), _bf16(3)),
    "dot": lambda: torch.dot(torch.ones(3), _bf16(3)),
    "addmm": lambda: torch.addmm(torch.ones(2, 2), torch.ones(2, 3), _bf16(3, 2)),
    "addmm-bias": lambda: torch.addmm(_bf16(2, 2), torch.ones(2, 3), torch.ones(3, 2)),
    "addmm-out": lambda: torch.addmm(torch.ones(2, 2), torch.ones(2, 3), torch.ones(3, 2), out=_bf16(2, 2)),
    "addmv": lambda: torch.addmv(torch.ones(2), torch.ones(2, 3), _bf16(3)),
    "bmm": lambda: torch.bmm(torch.ones(1, 2, 3), _bf16(1, 3, 2)),
    "baddbmm": lambda: torch.baddbmm(torch.ones(1, 2, 2), torch.ones(1, 2, 3), _bf16(1, 3, 2)),
    "baddbmm-input": lambda: torch.baddbmm(_bf16(1, 2, 2), torch.ones(1, 2, 3), torch.ones(1, 3, 2)),
    "addbmm": lambda: torch.addbmm(torch.ones(2, 2), torch.ones(1, 2, 3), _bf16(1, 3, 2)),
    "F.linear": lambda: torch.nn.functional.linear(torch.ones(2, 3), _bf16(2, 3)),
    "F.linear-bias": lambda: torch.nn.functional.linear(torch.ones(2, 3), torch.ones(2, 3), _bf16(2)),
    "F.linear-3d": lambda: torch.nn.functional.linear(torch.ones(1, 2, 3), _bf16(2, 3)),
    "nn.Linear": lambda: torch.nn.Linear(3, 2).to(torch.bfloat16)(torch.ones(2, 3)),
    "F.bilinear": lambda: torch.nn.functional.bilinear(torch.ones(1, 3), torch.ones(1, 3), _bf16(2, 3, 3)),
    "einsum": lambda: torch.einsum("ij,jk->ik", torch.ones(2, 3), _bf16(3, 2)),
    "tensordot": lambda: torch.tensordot(torch.ones(2, 3), _bf16(3, 2), dims=1),
    "conv1d": lambda: torch.nn.functional.conv1d(torch.ones(1, 1, 4), _bf16(1, 1, 2)),
    "attention": lambda: torch.nn.functional.scaled_dot_product_attention(
        torch.ones(1, 2, 3), _bf16(1, 2, 3), torch.ones(1, 2, 3)),
    "layer_norm": lambda: torch.nn.functional.layer_norm(torch.ones(2, 3), (3,), _bf16(3)),
    "lerp": lambda: torch.lerp(torch.randn(4), torch.randn(4, dtype=torch.bfloat16), 0.5),
}


@pytest.mark.parametrize("action", MIXED_DTYPE_CALLS.values(), ids=MIXED_DTYPE_CALLS.keys())
def test_mixed_dtypes(action):
    explanation = explained(action)
    assert explanation.title == "Two tensors in one operation have different dtypes"
    assert "inputs.to(model.dtype)" in explanation.fix and "autocast" in explanation.fix


@pytest.mark.parametrize(("pasted", "dtypes"), [
    ("RuntimeError: expected mat1 and mat2 to have the same dtype, but got: float != c10::BFloat16",
     "float32 and bfloat16"),
    ("RuntimeError: expected m1 and m2 to have the same dtype, but got: c10::Half != float", "float16 and float32"),
    ("RuntimeError: mat1 and mat2 must have the same dtype, but got Float and BFloat16", "float32 and bfloat16"),
])
def test_mixed_dtypes_pasted_name_both_dtypes(pasted, dtypes):
    # The first is what PEFT's QLoRA generate prints in bfloat16 (CUDA's wording, which this CPU cannot raise).
    explanation = explain(pasted)
    assert explanation.title == "Two tensors in one operation have different dtypes"
    assert f"combined {dtypes} tensors" in explanation.what


def test_quantile_on_a_large_tensor():
    explanation = explained(lambda: torch.quantile(torch.zeros(2**24 + 1), 0.9))
    assert explanation.title == "The tensor is too large for torch.quantile"
    assert "kthvalue" in explanation.fix


# --- memory and devices -----------------------------------------------------------------------------------------


def test_out_of_memory_on_the_cpu_for_real():
    torch_oom = explained(lambda: torch.empty(2**45, dtype=torch.uint8))
    assert torch_oom.title == "Out of memory" and "ran out of RAM" in torch_oom.what
    assert "35.2 TB" in torch_oom.what and torch_oom.remedy is None
    numpy_oom = explained(lambda: numpy.empty(2**52, dtype=numpy.uint8))
    assert numpy_oom.title == "Out of memory" and "4.00 PiB" in numpy_oom.what


def test_out_of_memory_on_a_gpu_offers_the_cpu():
    for text in ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                 "capacity of 23.65 GiB of which 1.05 GiB is free.",
                 "RuntimeError: MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.2 GB)"):
        explanation = explain(text)
        assert explanation.title == "Out of memory" and explanation.remedy.changes == {"device": "cpu"}
        assert "the GPU" in explanation.what and "CPU" in explanation.fix
    assert "2.00 GiB" in explain("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0").what


def test_no_gpu_in_this_torch_build_for_real():
    built = {"cuda": torch.backends.cuda.is_built(), "xpu": getattr(torch.xpu, "_is_compiled", lambda: True)()}
    absent = [device for device, yes in built.items() if not yes]
    if not absent:
        pytest.skip("this torch build supports CUDA and XPU: there is no missing GPU support to explain")
    for device in absent:
        explanation = explained(lambda device=device: torch.zeros(1, device=device))
        assert explanation.title == "This torch build cannot use that GPU"
        assert explanation.remedy.changes == {"device": "cpu"} and "pytorch.org" in explanation.fix


def test_tensors_on_different_devices_and_meta_tensors():
    mixed = explained(lambda: torch.randn(3) + torch.randn(3, device="meta"))
    assert mixed.title == "Tensors are on different devices"
    assert "model.to(device)" in mixed.fix
    meta = explained(lambda: torch.randn(3, device="meta").cpu())
    assert meta.title == mixed.title and "to_empty()" in meta.fix
    pasted = explain("RuntimeError: Expected all tensors to be on the same device, but found at least two "
                     "devices, cuda:0 and cpu!")
    assert pasted.title == mixed.title


# --- shapes and files -------------------------------------------------------------------------------------------


def test_different_vocabularies_offer_the_base_tokenizer():
    add = explained(lambda: torch.randn(32000, 2) + torch.randn(32002, 2), {"model": "org/chat-tune"})
    assert add.title == "The models' shapes do not match"
    assert "different vocabulary sizes (32000 vs 32002)" in add.what and "org/chat-tune" in add.what
    assert add.remedy.changes == {"tokenizer_source": "base"} and "tokenizer_source: base" in add.fix
    embedding = torch.nn.Embedding(32000, 4)
    loading = explained(lambda: embedding.load_state_dict({"weight": torch.zeros(32002, 4)}))
    assert loading.remedy.changes == {"tokenizer_source": "base"}


def _size_mismatch(checkpoint: list[int], current: list[int], name: str = "model.embed_tokens.weight") -> str:
    return (f"RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:\n\tsize mismatch for {name}: "
            f"copying a param with shape torch.Size({checkpoint}) from checkpoint, the shape in current model is "
            f"torch.Size({current}).")


def test_a_size_mismatch_names_the_dimension_that_differs():
    vocabulary = explain(_size_mismatch([32000, 4096], [32002, 4096]))
    assert "different vocabulary sizes (32000 vs 32002)" in vocabulary.what and "4096" not in vocabulary.what
    assert vocabulary.remedy.changes == {"tokenizer_source": "base"}
    for checkpoint, current in (([32000, 4096], [32000, 5120]), ([32000, 4096], [32002, 5120])):
        hidden = explain(_size_mismatch(checkpoint, current))
        assert "hidden sizes (4096 vs 5120)" in hidden.what and "vocabulary sizes" not in hidden.what, hidden.what
        assert hidden.remedy is None and "tokenizer_source" not in hidden.fix
        assert "same architecture and size" in hidden.fix
    embedding = torch.nn.Embedding(32000, 8)  # the live error names the parameter "weight" alone
    live = explained(lambda: embedding.load_state_dict({"weight": torch.zeros(32000, 16)}))
    assert "hidden sizes (16 vs 8)" in live.what and live.remedy is None
    projection = explain(_size_mismatch([4096, 4096], [5120, 4096], "model.layers.0.self_attn.q_proj.weight"))
    assert "vocabulary" not in projection.what and "4096 vs 5120" in projection.what
    assert "[4096, 4096]" in projection.what and "[5120, 4096]" in projection.what


def test_different_architectures_name_the_model():
    layer = torch.nn.Linear(4096, 4096)
    explanation = explained(lambda: layer.load_state_dict({"weight": torch.zeros(5120, 5120), "bias": layer.bias}),
                            {"model": "org/other-size"})
    assert explanation.title == "The models' shapes do not match" and explanation.remedy is None
    assert "org/other-size" in explanation.what and "same architecture" in explanation.fix


@pytest.mark.parametrize(
    ("content", "why_words"),
    [
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"a" * 64 + b"\nsize 4976698672\n",
         "Git LFS pointer"),
        (b"<!DOCTYPE html><html><body>" + b"x" * 200 + b"</body></html>", "HTML"),
        (None, "cut off"),
        (b"\x05\x00\x00", "nearly empty"),
    ],
    ids=["lfs-pointer", "html-page", "truncated", "tiny"],
)
def test_files_that_are_not_safetensors(tmp_path, content, why_words):
    path = tmp_path / "model.safetensors"
    if content is None:  # a real file cut short
        save_file({"weight": torch.randn(64, 64)}, path)
        content = path.read_bytes()[:1000]
    path.write_bytes(content)
    explanation = explained(lambda: load_file(path), {"file": str(path)})
    assert explanation.title == "A model file is damaged or not a safetensors file"
    assert str(path) in explanation.what and why_words in explanation.why
    assert "again" in explanation.fix and explanation.remedy.changes == {"force_download": True}


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo this should never run",))


def test_pickle_checkpoint_with_code_is_refused_and_explained(tmp_path):
    path = tmp_path / "pytorch_model.bin"
    torch.save({"weight": torch.zeros(2), "surprise": _RunsCode()}, path)
    explanation = explained(lambda: torch.load(path, weights_only=True))
    assert explanation.title == "A model file contains code"
    assert "safetensors" in explanation.fix


def test_disk_full_for_real():
    def write_to_full_disk():
        with open("/dev/full", "wb") as full:
            full.write(b"weights")
            full.flush()

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    explanation = explained(write_to_full_disk, {"destination": "/models/out", "needed_bytes": 5 * 10**9})
    assert explanation.title == "The disk is full"
    assert "/models/out" in explanation.what and "Free at least 5.0 GB" in explanation.fix
    assert explain(OSError(28, "No space left on device")).title == "The disk is full"


def test_permission_denied_and_missing_files_for_real(tmp_path):
    # Even root may not write kernel notes; elsewhere the error is built as the OS would raise it.
    if os.path.exists("/sys/kernel/notes"):
        denied = explained(lambda: open("/sys/kernel/notes", "w"))
    else:
        denied = explain(PermissionError(13, "Permission denied", "/readonly/out"))
    assert denied.title == "Mergesmith cannot write there"
    missing = explained(lambda: open(tmp_path / "absent" / "config.json"))
    assert missing.title == "A file or folder is missing"
    assert missing.what == f"{tmp_path / 'absent' / 'config.json'} does not exist."


# --- the Hub ----------------------------------------------------------------------------------------------------


def _hub_error(status: int, url: str, **headers: str) -> BaseException:
    """The exception huggingface_hub itself raises for this HTTP answer."""
    import httpx2
    from huggingface_hub.utils import hf_raise_for_status

    response = httpx2.Response(status, headers=headers, request=httpx2.Request("GET", url))
    return raised(lambda: hf_raise_for_status(response))


API = "https://huggingface.co/api/models"


@pytest.mark.parametrize(
    ("status", "url", "headers", "title", "fix_words"),
    [
        (401, f"{API}/meta-llama/Llama-3.1-8B/revision/main", {"X-Error-Code": "GatedRepo"},
         "This model needs your permission first", "https://huggingface.co/meta-llama/Llama-3.1-8B"),
        (404, f"{API}/nobody/nothing", {"X-Error-Code": "RepoNotFound"}, "The model was not found", "token"),
        (404, f"{API}/org/model/revision/nope", {"X-Error-Code": "RevisionNotFound"},
         "The model version was not found", "revision"),
        (404, "https://huggingface.co/org/model/resolve/main/model.safetensors", {"X-Error-Code": "EntryNotFound"},
         "A file is missing from the model", "safetensors"),
        (401, f"{API}/org/model", {"X-Error-Message": "Invalid credentials in Authorization header"},
         "The access token was not accepted", "settings/tokens"),
        (403, f"{API}/org/model", {}, "The Hub refused access", "token"),
        (429, f"{API}/org/model", {}, "The Hub asked us to slow down", "Wait"),
        (500, f"{API}/org/model", {}, "The Hub is having trouble", "status.huggingface.co"),
        (503, f"{API}/org/model", {}, "The Hub is having trouble", "status.huggingface.co"),
    ],
    ids=["gated", "not-found", "revision", "entry", "token", "403", "429", "500", "503"],
)
def test_hub_http_errors(status, url, headers, title, fix_words):
    explanation = explain(_hub_error(status, url, **headers))
    assert explanation.recognised and explanation.title == title and explanation.kind
    assert fix_words in explanation.fix


def test_hub_errors_raised_without_a_server():
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    local = explain(LocalEntryNotFoundError("Cannot find the requested files in the disk cache and outgoing "
                                            "traffic has been disabled."))
    assert local.title == "The files are not in the local cache" and "download" in local.fix
    offline = explain(OfflineModeIsEnabled("Cannot reach https://huggingface.co: offline mode is enabled."))
    assert offline.title == "Offline" and "HF_HUB_OFFLINE" in offline.fix


def test_connection_refused_for_real():
    import socket

    import httpx2

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    explanation = explained(lambda: httpx2.get(f"http://127.0.0.1:{port}/api/models"))
    assert explanation.title == "The Hub could not be reached" and "internet connection" in explanation.fix


def test_gated_repo_as_transformers_reports_it():
    pasted = ("OSError: You are trying to access a gated repo.\nMake sure to have access to it at "
              "https://huggingface.co/mistralai/Mistral-7B-v0.3.\n401 Client Error.")
    explanation = explain(pasted)
    assert explanation.title == "This model needs your permission first"
    assert "https://huggingface.co/mistralai/Mistral-7B-v0.3" in explanation.fix


# --- results ----------------------------------------------------------------------------------------------------


def test_nan_results():
    sampling = explained(lambda: torch.multinomial(torch.tensor([float("nan"), 1.0]), 1))
    assert sampling.title == "The result contains NaN or infinity" and sampling.kind == "non_finite"
    assert "bfloat16" in sampling.fix and sampling.remedy.changes == {"dtype": "bfloat16"}
    own = explain(NonFiniteResultError("model.layers.3.mlp.up_proj.weight became NaN after the DARE sum",
                                       hint="Store in bfloat16.", remedy=Remedy("dtype", "bfloat16", "in bfloat16")))
    assert own.title == sampling.title and "model.layers.3.mlp.up_proj.weight" in own.what
    assert explain("ValueError: This file contains information about the model").recognised is False


def test_identical_models_and_adapters_that_do_nothing():
    identical = explain("ValueError: the fine-tune is identical to the base model: nothing to extract")
    assert identical.title == "There is nothing to extract" and "pair" in identical.fix


def test_peft_adapter_for_modules_the_model_does_not_have():
    from peft import LoraConfig, inject_adapter_in_model

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    explanation = explained(lambda: inject_adapter_in_model(LoraConfig(target_modules=["q_proj"]), model))
    assert explanation.title == "The adapter's modules are not in this model"
    assert "base_model_name_or_path" in explanation.fix


def test_remote_code_and_missing_packages():
    remote = explain("ValueError: The repository org/exotic contains custom code which must be executed to "
                     "correctly load the model.")
    assert remote.title == "The model needs its own code" and "never runs code" in remote.fix
    missing = explained(lambda: __import__("mergesmith_package_that_does_not_exist"))
    assert missing.title == "A Python package is missing"
    assert "pip install mergesmith_package_that_does_not_exist" in missing.fix


# --- Mergesmith's own errors, the unknown, and rendering ------------------------------------------------------------


def test_own_errors_map_directly_and_keep_their_cause():
    gated = explain(GatedModelError("meta-llama/Llama-3.1-8B needs its licence accepted.",
                                    hint="Accept it on the model page.", remedy=Remedy("token", "set", "signed in")))
    assert gated.title == GatedModelError.title and gated.fix == "Accept it on the model page."
    assert gated.kind == "GatedModelError"
    assert gated.remedy.changes == {"token": "set"} and gated.why.startswith("The model's licence must be accepted")

    cancelled = explain(JobCancelled())
    assert cancelled.title == "Cancelled" and cancelled.recognised


def test_own_error_borrows_why_and_fix_from_a_known_cause(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_text("version https://git-lfs.github.com/spec/v1\n")

    def read():
        try:
            load_file(path)
        except Exception as error:
            raise CheckpointError(f"{path.name} in {tmp_path} cannot be read.") from error

    explanation = explained(read)
    assert explanation.title == CheckpointError.title and path.name in explanation.what
    assert "Git LFS pointer" in explanation.why and "again" in explanation.fix
    assert explanation.remedy.changes == {"force_download": True}


def test_unknown_errors_are_admitted():
    unknown = explain(raised(lambda: int("twelve")), {"model": "org/model"})
    assert not unknown.recognised and unknown.kind == ""
    assert unknown.title == "Mergesmith does not recognise this error"
    assert "invalid literal for int()" in unknown.what and "org/model" in unknown.what
    assert explain("").recognised is False


def test_context_names_what_the_job_was_doing():
    explanation = explained(lambda: torch.linalg.svd(torch.randn(4, 4, dtype=torch.bfloat16)),
                            {"model": "org/tune", "tensor": "model.layers.0.self_attn.q_proj.weight",
                             "device": "cpu", "unknown_key": "ignored"})
    assert explanation.what.endswith(
        "(model org/tune, tensor model.layers.0.self_attn.q_proj.weight, device cpu).")
    assert "ignored" not in explanation.what


def test_rendered_text_puts_the_details_last():
    explanation = explained(lambda: torch.ones(2, dtype=torch.bfloat16).numpy())
    text = explanation.render_text()
    assert text.startswith("NumPy cannot hold bfloat16 tensors\n")
    order = [text.index(label) for label in ("What happened:", "Why:", "What to do:", "Details:")]
    assert order == sorted(order)
    details = text[text.index("Details:"):]
    assert "Traceback (most recent call last)" in details and "Got unsupported ScalarType BFloat16" in details
    assert all(len(line) <= 100 for line in text[:text.index("Details:")].splitlines())
    assert "Retry with: device=cpu" in explain("CUDA out of memory.").render_text()


def test_a_whole_pasted_traceback_from_another_tool():
    traceback_text = """Traceback (most recent call last):
  File "/usr/bin/mergekit-extract-lora", line 8, in <module>
    sys.exit(main())
  File "mergekit/scripts/extract_lora.py", line 212, in extract
    U, S, Vh = torch.linalg.svd(delta, full_matrices=False)
RuntimeError: "svd_cuda_gesvdj" not implemented for 'BFloat16'
"""
    explanation = explain(traceback_text)
    assert explanation.recognised and explanation.title == "SVD or QR cannot run in half precision"
    assert explanation.raw == traceback_text


def test_a_mergesmith_error_pasted_from_a_log():
    log = """Traceback (most recent call last):
  File "guiapp/checkpoints/reading.py", line 120, in read_safetensors_header
safetensors_rust.SafetensorError: Error while deserializing header: header too large

The above exception was the direct cause of the following exception:

guiapp.errors.CheckpointError: model-00001-of-00002.safetensors in /models/tune is a Git LFS pointer
"""
    explanation = explain(log)
    assert explanation.recognised and explanation.title == CheckpointError.title
    assert explanation.what == "model-00001-of-00002.safetensors in /models/tune is a Git LFS pointer"
    assert "Git LFS pointer" in explanation.why and explanation.remedy.changes == {"force_download": True}
    hub = explain("huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. Revision Not Found for url: x")
    assert hub.title == "The model version was not found" and "branch" in hub.what


@pytest.mark.parametrize(
    ("pasted", "title"),
    [
        ("RuntimeError: \"linalg_svd_cpu\" not implemented for 'Half'", "SVD or QR cannot run in half precision"),
        ("NotImplementedError: \"geqrf_cpu\" not implemented for 'Half'", "SVD or QR cannot run in half precision"),
        ("RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
         "float16 arithmetic is not available on the CPU"),
        ("TypeError: Got unsupported ScalarType BFloat16", "NumPy cannot hold bfloat16 tensors"),
        ("RuntimeError: expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16",
         "Two tensors in one operation have different dtypes"),
        ("RuntimeError: mat1 and mat2 must have the same dtype", "Two tensors in one operation have different dtypes"),
        ("RuntimeError: expected dtype float for `end` but got dtype c10::BFloat16",
         "Two tensors in one operation have different dtypes"),
        ("RuntimeError: quantile() input tensor is too large", "The tensor is too large for torch.quantile"),
        ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: can't allocate memory: you tried "
         "to allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)", "Out of memory"),
        ("AssertionError: Torch not compiled with XPU enabled", "This torch build cannot use that GPU"),
        ("RuntimeError: Tensor on device cpu is not on the expected device meta!", "Tensors are on different devices"),
        ("RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:\n\tsize mismatch for "
         "model.embed_tokens.weight: copying a param with shape torch.Size([32002, 4096]) from checkpoint, the shape "
         "in current model is torch.Size([32000, 4096]).", "The models' shapes do not match"),
        ("safetensors_rust.SafetensorError: Error while deserializing header: invalid header length",
         "A model file is damaged or not a safetensors file"),
        ("SafetensorError: Error while deserializing header: HeaderTooLarge",
         "A model file is damaged or not a safetensors file"),
        ("_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with `weights_only` set to "
         "`False` will likely succeed", "A model file contains code"),
        ("OSError: [Errno 28] No space left on device", "The disk is full"),
        ("huggingface_hub.errors.GatedRepoError: 403 Client Error.", "This model needs your permission first"),
        ("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error.", "The model was not found"),
        ("huggingface_hub.errors.RevisionNotFoundError: 404 Client Error.", "The model version was not found"),
        ("huggingface_hub.errors.EntryNotFoundError: 404 Client Error.", "A file is missing from the model"),
        ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened", "The files are not in the local cache"),
        ("huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co", "Offline"),
        ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
         "exceeded with url: /api/models (Caused by NameResolutionError: Temporary failure in name resolution)",
         "The Hub could not be reached"),
        ("HTTPError: 429 Client Error: Too Many Requests for url: https://huggingface.co/api/models",
         "The Hub asked us to slow down"),
        ("HTTPError: 502 Server Error: Bad Gateway for url: https://huggingface.co/api/models",
         "The Hub is having trouble"),
        ("ValueError: merged tensor model.layers.0.mlp.up_proj.weight contains NaN",
         "The result contains NaN or infinity"),
        ("The two models are identical: no tensor of org/tune differs from org/base",
         "There is nothing to extract"),
    ],
)
def test_every_row_of_the_catalogue_as_pasted_text(pasted, title):
    explanation = explain(pasted)
    assert explanation.recognised and explanation.title == title
    assert explanation.why and explanation.fix


def test_disk_full_names_the_file_being_written():
    explanation = explain("OSError: [Errno 28] No space left on device: '/out/model-00002-of-00004.safetensors'")
    assert explanation.what == "The disk filled up while writing to /out/model-00002-of-00004.safetensors."


# --- the Hub in use, and links -------------------------------------------------------------------------------


@pytest.fixture
def mirror(monkeypatch) -> str:
    """huggingface_hub pointed at another Hub, as HF_ENDPOINT does."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "https://hub.example.org")
    return "https://hub.example.org"


@pytest.mark.parametrize("error", [
    ConnectionRefusedError(111, "Connection refused"),
    "httpx.ConnectError: [Errno -2] Name or service not known",
    "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo for url "
    "https://hub.example.org/api/models/meta-llama/Llama-2-7b-hf.",
    "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. Repository Not Found for url: x",
    "Invalid credentials in Authorization header",
    "403 Client Error: Forbidden for url",
    "503 Server Error: Service Unavailable for url",
], ids=["refused", "dns", "gated", "not-found", "token", "forbidden", "server"])
def test_explanations_name_the_hub_in_use(mirror, error):
    text = explain(error).render_text(details=False)
    assert "huggingface.co" not in text
    assert mirror in text or "Retry" in text or "server error" in text


def test_the_gated_link_ends_where_the_model_name_ends():
    pasted = ("huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for url "
              "https://huggingface.co/api/models/meta-llama/Llama-2-7b-hf. Access to model meta-llama/Llama-2-7b-hf "
              "is restricted and you are not in the authorized list. Visit https://huggingface.co/meta-llama/"
              "Llama-2-7b-hf.")
    explanation = explain(pasted)
    assert "https://huggingface.co/meta-llama/Llama-2-7b-hf " in explanation.fix
    assert "meta-llama/Llama-2-7b-hf is gated" in explanation.what
    # Rendered for a narrow terminal, a link stays whole on its line: never broken at a hyphen.
    rendered = explanation.render_text(width=60, details=False)
    assert "https://huggingface.co/meta-llama/Llama-2-7b-hf\n" in rendered or \
        "https://huggingface.co/meta-llama/Llama-2-7b-hf " in rendered


def test_a_broken_pipe_is_not_a_network_failure():
    import subprocess
    import sys

    reader = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    reader.wait(timeout=60)  # the reading end is gone: writing to it breaks the pipe, as `… | head` does
    explanation = explained(lambda: (reader.stdin.write(b"x" * 1_000_000), reader.stdin.flush()))
    reader.stdin = None  # already broken: nothing for Popen to close
    assert explanation.kind == "broken_pipe" and "Hub" not in explanation.title
    assert explanation.title == explain("BrokenPipeError: [Errno 32] Broken pipe").title


def _error_classes() -> list[type]:
    import inspect

    import guiapp.errors as errors

    return [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, errors.MergesmithError) and cls is not errors.MergesmithError]


@pytest.mark.parametrize("error_class", _error_classes(), ids=lambda cls: cls.__name__)
def test_the_why_an_error_class_gives_is_written_for_the_user(error_class):
    """With no `why` of its own, an error's "Why" is its class's first docstring paragraph: plain words, not notes
    for developers (`key` names where) or environment variables."""
    error = error_class.__new__(error_class)
    MergesmithError.__init__(error, "Something specific happened.")
    why = explain(error).why
    assert why and "`" not in why and "_" not in why and "key" not in why.split(), why


@pytest.mark.parametrize("kind", ["missing", "folder", "fifo"])
@pytest.mark.parametrize("error_class", ["RecipeError", "CheckpointError"])
def test_a_file_that_cannot_be_opened_is_explained_by_what_the_file_is(tmp_path, kind, error_class):
    """A recipe that is not there is not "an invalid recipe" (the class's general why said so under "the file
    does not exist"): the why is about the file."""
    import guiapp.errors as errors
    from guiapp.system.bounded import open_regular_file

    path = tmp_path / "recipe.yml"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    explanation = explain(raised(lambda: open_regular_file(path, getattr(errors, error_class), what="recipe")))
    assert explanation.kind == error_class and str(path) in explanation.what
    general = explain(getattr(errors, error_class)("Something specific happened.")).why
    assert explanation.why != general, explanation.render_text()
    said = {"missing": "no file", "folder": "folder", "fifo": "pipe"}[kind]
    assert said in explanation.why, explanation.why
