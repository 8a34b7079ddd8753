"""The known failures of model merging and LoRA work, one `Entry` each (see docs/spec/errors.md).

An entry recognises an error by its exception class names (anywhere in its class hierarchy) or by a regular
expression on its message, so the same entry explains a live exception and a traceback pasted from PEFT,
transformers, mergekit or Unsloth. Order matters: the first entry that matches wins, so specific entries come
before general ones (a gated repo before "repository not found", SVD in bfloat16 before any bfloat16 kernel).
Messages can be long (a pasted log, a name of 80 KB): a pattern never follows a part that can start at many places
with an unbounded gap (`.*`, any run of spaces), which would rescan the rest of the text from each of them; gaps
are bounded (at most 200 characters of one line) so that every search stays linear in the message's length.
Nothing here imports torch or huggingface_hub.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from guiapp.errors import BASE_TOKENIZER, ON_CPU, Remedy
from guiapp.facts.dtypes import HALF_TORCH_WORDS, TORCH_WORD, torch_word_name
from guiapp.facts.hub import PUBLIC_HUB, hub_endpoint
from guiapp.facts.wording import say
from guiapp.system.units import format_bytes

# Optional refinement: given the regex match (None when a class name matched) and the job's context, returns
# replacements for "what", "why", "fix" and/or "remedy".
Refiner = Callable[["re.Match[str] | None", Mapping[str, Any]], dict[str, Any]]

@dataclass(frozen=True)
class Entry:
    """One known failure: how to recognise it (class names, message pattern) and how to explain it.

    `key` is a stable name ("gated_repo", "out_of_memory") that the window can attach actions to.
    """

    key: str
    title: str
    what: str
    why: str
    fix: str
    pattern: re.Pattern[str] | None = None
    types: frozenset[str] = field(default_factory=frozenset)
    remedy: Remedy | None = None
    refine: Refiner | None = None

    def matches(self, type_names: set[str], message: str) -> tuple[bool, re.Match[str] | None]:
        """(matched?, the regex match if the message matched) for one exception or one pasted text."""
        found = self.pattern.search(message) if self.pattern is not None else None
        if found is not None:
            return True, found
        return bool(self.types & type_names), None


def _dtype_words(torch_name: str | None) -> str:
    if not torch_name:
        return "a half-precision type"
    return torch_word_name(torch_name)


def _group(match: re.Match[str] | None, name: str) -> str | None:
    if match is None:
        return None
    try:
        return match.group(name)
    except IndexError:
        return None


def _refine_linear_algebra(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    kernel, dtype = _group(match, "kernel") or "a decomposition", _dtype_words(_group(match, "dtype"))
    return {"what": f"A matrix decomposition ({kernel}) was run on {dtype} numbers, which it does not support."}


def _refine_half_kernel(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    if _group(match, "dtype") is None:
        return {"what": "torch.quantile was run on half-precision numbers; it only accepts float32 and float64."}
    kernel, dtype = _group(match, "kernel"), _dtype_words(_group(match, "dtype"))
    return {"what": f"The operation {kernel} was run on {dtype} numbers, and this torch build has no {dtype} "
                    "version of it on this device."}


def _refine_mixed_dtypes(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    """Name the two dtypes when the message's line does ("got: float != c10::BFloat16")."""
    if match is None:
        return {}
    line_start = match.string.rfind("\n", 0, match.start()) + 1
    line_end = match.string.find("\n", match.end())
    line = match.string[line_start:line_end if line_end >= 0 else None]
    named = [_dtype_words(name) for name in TORCH_WORD.findall(line)]
    dtypes = list(dict.fromkeys(named))
    if len(dtypes) < 2:
        return {}
    return {"what": f"An operation combined {dtypes[0]} and {dtypes[1]} tensors, and it needs one dtype for all "
                    "of them."}


def _refine_missing_package(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    module = _group(match, "module")
    if not module:
        return {}
    package = module.split(".")[0]
    return {"what": f"The Python module {module} is not installed.",
            "fix": f"Install it into the same environment (pip install {package}; the package name can differ "
            "from the module name), then try again."}


def _refine_numpy(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    dtype = _dtype_words(_group(match, "dtype") or "BFloat16")
    return {"what": f"A {dtype} tensor was converted to a NumPy array, and NumPy has no {dtype} type."}


def _refine_out_of_memory(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    gpu = _group(match, "gpu") or _group(match, "gpu2")
    asked = _group(match, "gib") or _group(match, "array")
    if _group(match, "bytes"):
        asked = format_bytes(int(_group(match, "bytes") or 0))
    amount = f"; it asked for {asked} more" if asked else ""
    if gpu or str(context.get("device", "cpu")) != "cpu":
        where = f"the GPU ({gpu})" if gpu else f"the GPU ({context.get('device')})"
        return {
            "what": f"The job ran out of memory on {where}{amount}.",
            "fix": "Run it on the CPU (RAM is usually much larger than VRAM), close other programs that use the "
            "GPU, or merge fewer models at once. Mergesmith shows the memory a job needs before it starts.",
            "remedy": ON_CPU,
        }
    return {"what": f"The job ran out of RAM{amount}."}


VOCABULARY_ROWS = 30000  # vocabularies run to tens of thousands of rows; hidden sizes and layers stay below


def _refine_shapes(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    tensor = _group(match, "param") or str(context.get("tensor") or "")
    model = context.get("model")
    which = f" The model that differs is {model}." if model else ""
    checkpoint, current = _dimensions(_group(match, "shape_a")), _dimensions(_group(match, "shape_b"))
    if checkpoint and current:
        return _refine_two_shapes(tensor, checkpoint, current, which)
    sizes = [int(size) for size in re.findall(r"\d+", " ".join(filter(None, [_group(match, "a"), _group(match, "b")])))]
    return _refine_sizes(tensor, sizes, which)


def _dimensions(shape: str | None) -> list[int]:
    """[32000, 4096] from "torch.Size([32000, 4096])"; [] for None."""
    return [int(size) for size in re.findall(r"\d+", shape or "")]


def _refine_two_shapes(tensor: str, checkpoint: list[int], current: list[int], which: str) -> dict[str, Any]:
    """A checkpoint's tensor against the model's ("size mismatch for …"): say which dimension differs. An embedding
    or output head is [vocabulary, hidden]: other rows are other tokens (the base tokenizer helps), another width
    is another model size (nothing does)."""
    differ = [i for i, (a, b) in enumerate(zip(checkpoint, current)) if a != b]
    where = f" in {tensor}" if tensor else ""
    rows_of_tokens = _looks_like_vocabulary(tensor, []) or checkpoint[0] == current[0] >= VOCABULARY_ROWS
    if len(checkpoint) == len(current) == 2 and 1 in differ and rows_of_tokens:
        return {"what": f"The models have different hidden sizes ({checkpoint[1]} vs {current[1]}){where}: each "
                        f"token's row holds {checkpoint[1]} numbers in the checkpoint and {current[1]} in the model."
                        f"{which}",
                "why": "The hidden size is the width of every layer, so models with different hidden sizes are "
                "different model sizes or architectures; no tokenizer setting can line their tensors up."}
    if len(checkpoint) == len(current) and differ == [0] and _looks_like_vocabulary(tensor, [checkpoint[0], current[0]]):
        return _refine_sizes(tensor, [checkpoint[0], current[0]], which)
    dimensions = ", ".join(f"dimension {i + 1}: {checkpoint[i]} vs {current[i]}" for i in differ)
    if len(checkpoint) != len(current):
        dimensions = f"{len(checkpoint)} vs {len(current)} dimensions"
    return {"what": f"Tensors that should line up have different shapes{where}: {checkpoint} in the checkpoint, "
                    f"{current} in the model" + (f" ({dimensions})" if dimensions else "") + f".{which}"}


def _refine_sizes(tensor: str, sizes: list[int], which: str) -> dict[str, Any]:
    sizes_text = f" ({' vs '.join(str(size) for size in sizes)})" if sizes else ""
    if _looks_like_vocabulary(tensor, sizes):
        return {
            "what": f"The models have different vocabulary sizes{sizes_text}"
            + (f" in {tensor}" if tensor else "") + f".{which}",
            "why": "Fine-tunes often add tokens (chat markers, padding), so their embedding and output matrices "
            "have more rows than the base model's; the rows cannot be added up one to one.",
            "fix": "Merge with tokenizer_source: base, which keeps the base model's vocabulary and drops the "
            "added rows, or choose models that share one tokenizer.",
            "remedy": BASE_TOKENIZER,
        }
    return {"what": f"Tensors that should line up have different shapes{sizes_text}"
                    + (f" in {tensor}" if tensor else "") + f".{which}"}


def _looks_like_vocabulary(tensor: str, sizes: list[int]) -> bool:
    if re.search(r"embed|lm_head|wte|word_embeddings|output\.weight|vocab", tensor):
        return True
    # Fine-tunes add only a few tokens.
    large = [size for size in sizes if size >= VOCABULARY_ROWS]
    return len(large) >= 2 and max(large) - min(large) <= 0.02 * max(large)


def _refine_header(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    detail = (_group(match, "detail") or _group(match, "variant") or "").lower().replace(" ", "")
    file = context.get("file")
    which = f"The file {file}" if file else "A model file"
    if detail in ("headertoolarge",):
        why = ("Its first bytes are not a safetensors header. This is usually a Git LFS pointer (a small text file "
               "standing in for weights that were never downloaded, e.g. after `git clone` without git-lfs) or an "
               "HTML error or login page saved in place of the file.")
    elif detail in ("incompletemetadata", "incompletemetadata,filenotfullycovered", "metadataincompletebuffer"):
        why = ("The file's size does not match its header: the download or copy was cut off, or bytes that belong "
               "to no tensor were added after the last one.")
    elif detail.startswith("invalidoffset"):
        why = ("Its header does not give every tensor its own bytes, one after the other: two tensors share bytes "
               "or bytes belong to no tensor. The file is damaged, or was made to mislead the programs that read it.")
    elif detail.startswith("invalidjson") and match is not None and "expected a string" in match.string:
        why = ("Its header holds a value that the format allows only as text (the file's metadata is text only): "
               "the file was not written by a safetensors library, or was changed afterwards.")
    elif detail in ("headertoosmall",):
        why = "The file is nearly empty: the download failed or the file was truncated to a few bytes."
    else:
        why = ("The header at the start of the file is not valid safetensors: the file is damaged, or it is "
               "another format (a pickle .bin, an LFS pointer, a web page) with a .safetensors name.")
    return {"what": f"{which} could not be read as safetensors.", "why": why}


def _refine_disk_full(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    where = context.get("destination") or context.get("file") or _group(match, "path")
    needed = context.get("needed_bytes")
    what = "The disk filled up while writing" + (f" to {where}" if where else "") + "."
    fix = ("Free some space or choose an output folder on another drive, then run it again. Mergesmith checks "
           "the free space before it starts and removes the partial output of a failed job.")
    if needed:
        fix = f"Free at least {format_bytes(int(needed))} " + fix.removeprefix("Free some space ")
    return {"what": what, "fix": fix}


def _refine_path(match: re.Match[str] | None, context: Mapping[str, Any], problem: str) -> dict[str, Any]:
    path = _group(match, "path") or _group(match, "path2") or context.get("file")
    return {"what": f"{path} {problem}."} if path else {}


# The public Hub's address as the entries below write it; not status.huggingface.co, which is another site.
PUBLIC_HUB_ADDRESS = re.compile(r"(?:https://)?(?<![\w.])huggingface\.co\b(?!\.\w)")
# A repo id ends with a letter, digit, _ or -: never with the full stop of the sentence around a link.
REPO_IN_URL = r"/(?:api/)?(?:(?:models|datasets|spaces)/)?(?P<repo>[\w.-]+/[\w.-]*[\w-])"


def on_hub_in_use(text: str) -> str:
    """`text` with the public Hub's address replaced by the Hub in use, when HF_ENDPOINT names another."""
    endpoint = hub_endpoint()
    return text if endpoint == PUBLIC_HUB else PUBLIC_HUB_ADDRESS.sub(endpoint, text)


def _repo(match: re.Match[str] | None, context: Mapping[str, Any]) -> str | None:
    if context.get("model"):
        return str(context["model"])
    hosts = {"huggingface.co", hub_endpoint().split("://")[-1]}
    pattern = "(?:" + "|".join(re.escape(host) for host in hosts) + ")" + REPO_IN_URL
    found = re.search(pattern, match.string) if match is not None else None
    return found.group("repo") if found else None


def _refine_gated(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    repo = _repo(match, context)
    if not repo:
        return {}
    return {
        "what": f"The model {repo} is gated: its files can only be read after you accept its licence.",
        "fix": say("Open {page} while logged in, accept the licence (some need the authors' approval, which can "
                   "take a while), then give Mergesmith a Hugging Face access token {sign_in_at:Settings} and try "
                   "again.", page=f"{hub_endpoint()}/{repo}"),
    }


def _refine_repository(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    repo = _repo(match, context)
    return {"what": f"The Hub has no model called {repo} that you can see."} if repo else {}


def _refine_server_error(match: re.Match[str] | None, context: Mapping[str, Any]) -> dict[str, Any]:
    if hub_endpoint() == PUBLIC_HUB:
        return {}
    return {"fix": "Try again in a few minutes. Downloads resume where they stopped."}


def _patterns(*alternatives: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{alternative})" for alternative in alternatives), re.IGNORECASE)


def _types(*names: str) -> frozenset[str]:
    return frozenset(names)


LINEAR_ALGEBRA = (r"\w*(?:svd|gesvd|geqrf|orgqr|ormqr|linalg|qr|eig|syevd|lu_|getrf|cholesky|potrf|triangular"
                  r"|lstsq|inverse)\w*")

CATALOGUE: tuple[Entry, ...] = (
    Entry(
        key="linear_algebra_half",
        title="SVD or QR cannot run in half precision",
        what="A matrix decomposition was run on half-precision numbers, which it does not support.",
        why="torch's decompositions (SVD, QR, eigenvalues) exist only for float32 and float64, on the CPU and on "
        "GPUs alike; a bfloat16 or float16 model has to be upcast first.",
        fix="Upcast before the decomposition (tensor.float()) and cast the results back to the model's dtype for "
        "storage. Mergesmith's LoRA extraction always decomposes in float32 and still stores bfloat16 adapters.",
        pattern=re.compile(rf"\"(?P<kernel>{LINEAR_ALGEBRA})\" not implemented for '(?P<dtype>{HALF_TORCH_WORDS})'"),
        refine=_refine_linear_algebra,
    ),
    Entry(
        key="float16_on_cpu",
        title="float16 arithmetic is not available on the CPU",
        what="A float16 model was computed on the CPU, and this torch build has no float16 kernel for it.",
        why="float16 models are made for GPUs. torch before 2.2 has no float16 matrix multiplication on the CPU "
        "(PEFT's DoRA initialisation meets this too), and where it exists it is very slow.",
        fix=say("Compute in float32 on the CPU (Mergesmith always does) or run on a GPU; to run the model itself "
                "on the CPU, load it in float32 or bfloat16. {probe_command} shows what this machine supports."),
        pattern=re.compile(r"\"(?P<kernel>addmm_impl_cpu_|addmm_cpu\w*|mm_cpu\w*|bmm_cpu\w*|baddbmm\w*|\w*_cpu\w*"
                           r"|LayerNormKernelImpl)\" not implemented for 'Half'"),
        remedy=Remedy("dtype", "float32", "in float32"),
    ),
    Entry(
        key="half_kernel",
        title="This operation does not support the model's dtype",
        what="An operation was run on half-precision numbers, and this torch build has no version of it for them.",
        why="Many torch kernels exist only for float32/float64 (quantile, linear algebra) or skip float8 "
        "entirely; which ones depends on the device and the torch version.",
        fix="Compute in float32 (tensor.float()) and cast back only to store the result. Mergesmith computes "
        "everything in float32 and offers only storage dtypes the probe found working here.",
        pattern=_patterns(
            rf"\"(?P<kernel>\w+)\" not implemented for '(?P<dtype>{HALF_TORCH_WORDS})'",
            r"quantile\(\) input tensor must be either float or double dtype",
        ),
        refine=_refine_half_kernel,
    ),
    Entry(
        key="numpy_bfloat16",
        title="NumPy cannot hold bfloat16 tensors",
        what="A bfloat16 tensor was converted to a NumPy array, and NumPy has no bfloat16 type.",
        why="NumPy has no bfloat16 (nor float8) type, so tensor.numpy() refuses them.",
        fix="Convert to float32 first: tensor.float().numpy(). Mergesmith never hands half-precision tensors to "
        "NumPy.",
        pattern=re.compile(rf"Got unsupported ScalarType (?P<dtype>{HALF_TORCH_WORDS}|\w+)"),
        refine=_refine_numpy,
    ),
    Entry(
        key="mixed_dtypes",
        title="Two tensors in one operation have different dtypes",
        what="An operation combined tensors of two different dtypes (for example float32 inputs with bfloat16 "
        "weights).",
        why="torch does not convert between dtypes by itself inside matrix multiplications and in-place "
        "operations; a bfloat16 model fed float32 inputs (PEFT QLoRA generate, mixed-dtype merges) fails here.",
        fix="Cast both sides to one dtype first (inputs.to(model.dtype)), or run under torch.autocast; with "
        "QLoRA set bnb_4bit_compute_dtype to the model's dtype. Mergesmith casts every tensor to its compute "
        "dtype before using it.",
        # Every wording torch 2.x uses for products (mm, addmm, bmm, baddbmm, linear, dot, einsum, attention…)
        # on CPU and CUDA: "expected mat1 and mat2 to have the same dtype", "self and mat2 must have the same
        # dtype", "Input dtypes must be the same", "expected scalar type Float but found BFloat16"…
        pattern=_patterns(
            r"expected \w+ and \w+ to have the same dtype",
            r"\b(?:must|should) have (?:the )?same dtype",
            r"to have the same dtype, but got",
            r"dtypes must be the same",
            r"expected (?:scalar type|dtype) \w+ (?:for `\w+` )?but (?:found|got)",
            r"Expected out tensor to have dtype \w+, but got",
            r"mixed dtype \(\w+\): expect",
            r"Input type \([^()\n]{0,200}\) and (?:weight|bias) type \([^()\n]{0,200}\) should be the same",
            r"expected both vectors to have same dtype",
            r"result type \w+ can't be cast to the desired output type",
        ),
        refine=_refine_mixed_dtypes,
    ),
    Entry(
        key="quantile_too_large",
        title="The tensor is too large for torch.quantile",
        what="torch.quantile was called on a tensor with more than 16.7 million elements.",
        why="torch.quantile refuses inputs of more than 2^24 elements, and large weight matrices (embeddings, "
        "MLP projections) exceed that; kohya's LoRA extraction clamp meets this.",
        fix="Use torch.kthvalue on the flattened tensor, or estimate the quantile from a random sample of it. "
        "Mergesmith's extraction uses kthvalue.",
        pattern=re.compile(r"quantile\(\) input tensor is too large"),
    ),
    Entry(
        key="out_of_memory",
        title="Out of memory",
        what="The job ran out of memory.",
        why="The working set of the job (the tensors it holds at once plus buffers) is larger than the memory "
        "that was free.",
        fix="Close other programs, merge fewer or smaller models at once, or write smaller output shards. "
        "Mergesmith estimates the memory a job needs and warns before it starts.",
        pattern=_patterns(
            r"(?P<gpu>CUDA|HIP|XPU|MPS backend) out of memory(?:.*?Tried to allocate (?P<gib>[\d.]+ [KMGTPE]i?B))?",
            r"DefaultCPUAllocator: can't allocate memory(?:: you tried to allocate (?P<bytes>\d+) bytes)?",
            r"Unable to allocate (?P<array>[\d.]+ [KMGTPE]i?B) for an array",
            r"(?:(?P<gpu2>cuda|hip|xpu|mps)\s{0,8})?out of memory",
        ),
        types=_types("OutOfMemoryError", "MemoryError", "_ArrayMemoryError"),
        refine=_refine_out_of_memory,
    ),
    Entry(
        key="no_gpu_build",
        title="This torch build cannot use that GPU",
        what="A GPU was chosen, but the installed torch was built without support for it.",
        why="torch comes in separate builds for CPU, NVIDIA (CUDA), AMD (ROCm), Apple (MPS) and Intel (XPU); "
        "the CPU-only build cannot use any GPU, and a GPU build needs a matching driver.",
        fix=say("Run on the CPU, or install the torch build for your GPU (see https://pytorch.org/get-started"
                "{cli_only:, e.g. `pip install torch --index-url https://download.pytorch.org/whl/cu124`}) and restart "
                "Mergesmith; its device list only offers devices it found."),
        pattern=_patterns(
            r"Torch not compiled with (?P<backend>CUDA|XPU|ROCm|MPS) enabled",
            r"Found no NVIDIA driver on your system",
            r"No CUDA GPUs are available",
            r"MPS backend is not available|The MPS backend is supported on MacOS",
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"no kernel image is available for execution on the device",
        ),
        remedy=ON_CPU,
    ),
    Entry(
        key="mixed_devices",
        title="Tensors are on different devices",
        what="One operation got tensors on different devices, or a tensor that has no data yet (on the "
        "\"meta\" device).",
        why="torch runs each operation on one device; a model split between CPU and GPU, inputs left on the CPU, "
        "or a model initialised on the meta device and never loaded all end here.",
        fix="Move the model and its inputs to one device (model.to(device), inputs.to(model.device)); for meta "
        "tensors, load real weights (e.g. without low_cpu_mem_usage, or with to_empty() then load_state_dict). "
        "Mergesmith keeps every operation of a job on the device you chose.",
        pattern=_patterns(
            r"Expected all tensors to be on the same device",
            r"Tensor on device \S+ is not on the expected device \S+",
            r"Cannot copy out of meta tensor",
            r"cannot be called on meta tensors",
            r"indices should be either on cpu or on the same device",
        ),
    ),
    Entry(
        key="shape_mismatch",
        title="The models' shapes do not match",
        what="Tensors that should line up have different shapes.",
        why="The models differ in architecture or size (hidden size, number of heads, layers), so their tensors "
        "cannot be combined element by element.",
        fix="Merge only models with the same architecture and size, usually fine-tunes of one base model. "
        "Mergesmith compares every tensor's shape from the headers before any download.",
        pattern=_patterns(
            r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\)",
            r"size mismatch for (?P<param>[\w.]+): copying a param with shape (?P<shape_a>torch\.Size\(\[[\d, ]*\]\))"
            r" from checkpoint, the shape in current model is (?P<shape_b>torch\.Size\(\[[\d, ]*\]\))",
            r"mat1 and mat2 shapes cannot be multiplied",
            r"shape '\[[\d, -]*\]' is invalid for input of size",
        ),
        refine=_refine_shapes,
    ),
    Entry(
        key="safetensors_header",
        title="A model file is damaged or not a safetensors file",
        what="A model file could not be read as safetensors.",
        why="The file is not what its name says: a Git LFS pointer, an HTML page, a pickle, or a truncated "
        "download.",
        fix="Download the model again (Mergesmith re-downloads when you retry); for a git clone, install git-lfs "
        "and run `git lfs pull` in the folder.",
        pattern=_patterns(
            r"Error while deserializing header: (?P<detail>[A-Za-z ,]+)",
            r"(?P<variant>HeaderTooLarge|HeaderTooSmall|InvalidHeaderLength|MetadataIncompleteBuffer"
            r"|InvalidHeaderDeserialization|InvalidHeaderStart)",
        ),
        types=_types("SafetensorError"),
        remedy=Remedy("force_download", True, "downloading the files again"),
        refine=_refine_header,
    ),
    Entry(
        key="misleading_header",
        title="A model file is damaged or was made to mislead",
        what="A model file's header breaks the rules of the safetensors format.",
        why="Its header gives two tensors the same bytes, has metadata that is not text, nests its JSON thousands "
        "deep, numbers a layer far past any real model, or its index lists no tensors. Files written by "
        "safetensors never do that: the file is damaged, or was made to mislead the programs that read it.",
        fix="Delete the model and download it again from its original publisher. If the fresh copy fails the "
        "same way, the published file itself is broken: tell its authors and use another version of the model.",
        pattern=_patterns(
            r"the data of tensors .{1,200} overlap \(bytes",
            r"belong to no tensor",
            r'the "__metadata__" entry .{1,200} must be text',
            r"its JSON nests too deeply to be a safetensors header",
            r"as part of layer .{1,60} far past any real model",
            r'lists no tensors: its "weight_map" is empty',
        ),
    ),
    Entry(
        key="model_config_field",
        title="A model's configuration has a problem",
        what="A field of a model's config.json holds a value of the wrong kind.",
        why="config.json says what the model is (its sizes, layers, number type). A size written as text, a "
        "negative or absurdly large number, or a list where a name belongs means the file is damaged, or was "
        "edited or written by a tool that does not follow the transformers format.",
        fix="Restore the model's original config.json: download the model again, or copy the file from the "
        "model's page on the Hub. If you edited it yourself, write that field as transformers expects (whole "
        "numbers for sizes, true or false for switches, text for names).",
        pattern=_patterns(r'config\.json has a problem: "(?P<field>[\w.]{1,100})" must be'),
        types=_types("ModelConfigError"),
    ),
    Entry(
        key="quantized_parts_disagree",
        title="A quantized model's files do not fit together",
        what="A quantized model's packed weights, scales or zero points are missing or have shapes that do not fit "
        "the weight they belong to or its quantization settings.",
        why="A quantized weight is rebuilt from its packed numbers and their scales (block by block, group by group, "
        "as the settings in config.json say). A missing part or a wrong block or group size cannot be guessed "
        "around: the result would be a silently wrong model, so the model is refused when it is opened, before "
        "anything is written.",
        fix="Download the model again (a shard may be missing or cut short). If it stays like this, the quantized "
        "upload itself is broken: use another quantized copy, or the unquantized original its card names.",
        pattern=_patterns(r"is quantized, but tensor \"(?P<tensor>[^\"]{1,300})\""),
        types=_types("QuantizedCheckpointError"),
    ),
    Entry(
        key="unknown_quantization",
        title="This model's quantization cannot be read yet",
        what="The model is quantized with a method Mergesmith has no dequantizer for.",
        why="Each quantization method packs weights its own way. Mergesmith reads bitsandbytes (4- and 8-bit), FP8, "
        "compressed-tensors, GPTQ, AWQ and MXFP4 checkpoints as their full-precision weights; other methods "
        "(HQQ, EETQ, AQLM, GGUF inside safetensors…) it cannot rebuild.",
        fix="Use the model's unquantized original (its model card usually names it), or a copy quantized with one "
        "of the methods above.",
        pattern=_patterns(r'is quantized with "(?P<method>[^"]{1,100})", which Mergesmith cannot read yet'),
        types=_types("UnknownQuantizationError"),
    ),
    Entry(
        key="unsafe_pickle",
        title="A model file contains code",
        what="A PyTorch .bin checkpoint was refused: it holds Python objects beyond plain tensors.",
        why="Old-format checkpoints are pickles, and a pickle can run any code when loaded. torch.load with "
        "weights_only=True (the default since torch 2.6) refuses anything but tensors, and this file has more.",
        fix="Use a safetensors version of the model: most Hub models have one (model.safetensors), or look for a "
        "converted copy. Mergesmith never runs code from model files, so it will not load this one.",
        pattern=_patterns(r"Weights only load failed", r"Unsupported global: GLOBAL", r"Unsupported operand \d+"),
        types=_types("UnpicklingError"),
    ),
    Entry(
        key="disk_full",
        title="The disk is full",
        what="The disk filled up while writing.",
        why="The output (or the download) needs more space than the drive has left.",
        fix="Free some space or choose an output folder on another drive, then run it again. Mergesmith checks "
        "the free space before it starts and removes the partial output of a failed job.",
        pattern=_patterns(r"(?:\[Errno 28\] )?No space left on device(?:: '(?P<path>[^']+)')?", r"\[Errno 28\]",
                          r"Disk quota exceeded", r"ENOSPC", r"There is not enough space on the disk"),
        refine=_refine_disk_full,
    ),
    Entry(
        key="name_too_long",
        title="A file or folder name is too long",
        what="A file or folder name is longer than the disk allows.",
        why="Most file systems allow at most 255 bytes per file or folder name (fewer characters for accented or "
        "non-Latin letters), whatever the length of the whole path.",
        fix="Choose a shorter name for the output folder (or move the model to a folder with a shorter name), "
        "then run it again.",
        pattern=_patterns(r"\[Errno 36\] File name too long(?:: '(?P<path>[^']+)')?", r"ENAMETOOLONG",
                          r"The filename or extension is too long"),
    ),
    Entry(
        key="gated_repo",
        title="This model needs your permission first",
        what="The model is gated: its files can only be read after you accept its licence.",
        why="Its authors require each user to accept the licence (and sometimes to be approved) on the Hub, and "
        "the Hub only serves the files to an account that has, identified by an access token.",
        fix=say("Open the model's page on huggingface.co while logged in, accept the licence, then give Mergesmith "
                "a Hugging Face access token {sign_in_at:Settings} and try again."),
        pattern=_patterns(r"Cannot access gated repo", r"You are trying to access a gated repo",
                          r"awaiting a review from the repo authors"),
        types=_types("GatedRepoError"),
        refine=_refine_gated,
    ),
    Entry(
        key="invalid_token",
        title="The access token was not accepted",
        what="The Hub did not accept the access token (or none was given where one is needed).",
        why="The token is mistyped, expired or revoked, or it is a fine-grained token without read access to "
        "this repository.",
        fix=say("Create a token with read access at https://huggingface.co/settings/tokens and enter it in "
                "Mergesmith's settings{aside:or run {hf_login}}."),
        pattern=_patterns(r"Invalid credentials in Authorization header", r"Invalid user token",
                          r"Token is required \(`token=True`\), but no token found"),
        types=_types("LocalTokenNotFoundError"),
    ),
    Entry(
        key="repository_not_found",
        title="The model was not found",
        what="The Hub has no model by that name that you can see.",
        why="The name is mistyped (it is owner/name, with the exact spelling), the model was removed, or it is "
        "private and no token with access was given.",
        fix="Check the name on huggingface.co (search for it in Mergesmith's Models page); for a private model, "
        "add a token with access in the settings.",
        pattern=_patterns(r"Repository Not Found for url", r"is not a local folder and is not a valid model "
                          r"identifier", r"is not a local folder or a valid repository name"),
        types=_types("RepositoryNotFoundError"),
        refine=_refine_repository,
    ),
    Entry(
        key="revision_not_found",
        title="The model version was not found",
        what="The model exists, but the branch, tag or commit asked for does not.",
        why="The revision after @ (or in the revision field) is mistyped or was deleted.",
        fix="Leave the revision empty for the latest version, or copy an existing branch or commit from the "
        "model's Files page.",
        pattern=_patterns(r"Revision Not Found for url", r"Invalid rev id"),
        types=_types("RevisionNotFoundError"),
    ),
    Entry(
        key="local_entry_not_found",
        title="The files are not in the local cache",
        what="The model's files were needed from the local cache, and they are not there.",
        why="Mergesmith (or the tool) is offline or could not connect, and the files were never downloaded "
        "into the Hugging Face cache.",
        fix="Connect to the internet and download the model once (Models → Download); after that it works "
        "offline.",
        pattern=_patterns(r"Cannot find the requested files in the (?:local|disk) cache",
                          r"couldn't connect to '\S+' to load the files, and couldn't find them in the cached",
                          r"outgoing traffic has been disabled"),
        types=_types("LocalEntryNotFoundError"),
    ),
    Entry(
        key="entry_not_found",
        title="A file is missing from the model",
        what="A file the job needs is not in the model's repository.",
        why="The model stores its weights under other names (e.g. only .bin, only GGUF) or in a subfolder, or "
        "the file name is mistyped.",
        fix="Check the model's Files page; Mergesmith needs safetensors weights and config.json. Pick a version "
        "of the model that has them.",
        pattern=_patterns(r"Entry Not Found for url", r"does not appear to have a file named"),
        types=_types("EntryNotFoundError", "RemoteEntryNotFoundError"),
    ),
    Entry(
        key="offline_mode",
        title="Offline",
        what="Something needed the Hub while offline mode is on.",
        why=say("{offline_setting} forbids all network access."),
        fix=say("Use models that are already downloaded or in local folders, or turn offline mode off"
                "{aside:unset {offline_variable}} and try again."),
        pattern=_patterns(r"offline mode is enabled", r"HF_HUB_OFFLINE"),
        types=_types("OfflineModeIsEnabled"),
    ),
    Entry(
        key="rate_limited",
        title="The Hub asked us to slow down",
        what="The Hub refused more requests for now (HTTP 429).",
        why="Too many requests came from this address or account in a short time; anonymous requests have lower "
        "limits.",
        fix="Wait a few minutes and try again; logging in with an access token raises the limit.",
        pattern=_patterns(r"\b429\b[^\n]{0,200}?(?:Too Many Requests|Client Error)", r"Too Many Requests",
                          r"rate.?limit(?:ed)? (?:reached|exceeded)"),
    ),
    Entry(
        key="forbidden",
        title="The Hub refused access",
        what="The Hub refused the request (HTTP 403).",
        why="The token has no permission for this repository (a fine-grained token without access to gated or "
        "private repos), or the repository has been disabled.",
        fix="Give the token read access to public gated repositories (https://huggingface.co/settings/tokens) "
        "or use a classic read token.",
        pattern=_patterns(r"\b403\b[^\n]{0,200}?(?:Forbidden|Client Error)", r"Access to this resource is disabled"),
        types=_types("DisabledRepoError"),
    ),
    Entry(
        key="server_error",
        title="The Hub is having trouble",
        what="The Hub answered with a server error (HTTP 5xx).",
        why="The problem is on the Hub's side, usually brief.",
        fix="Try again in a few minutes; https://status.huggingface.co shows ongoing incidents. Downloads "
        "resume where they stopped.",
        pattern=_patterns(r"\b5\d\d Server Error", r"Server error '5\d\d", r"Bad Gateway", r"Service Unavailable",
                          r"Gateway Time-?out", r"Internal Server Error"),
        refine=_refine_server_error,
    ),
    Entry(
        key="broken_pipe",
        title="The other end stopped reading",
        what="Data was being written to a program or connection that had already closed its end (a broken pipe).",
        why="Most often the output went to another program that exited before reading all of it (`… | head` "
        "reads ten lines and stops); with a network connection, the server hung up.",
        fix="Nothing, if the output was piped into a program that has all it needed. Otherwise let the reader "
        "run to the end (or write to a file), or try again if a server closed the connection.",
        pattern=_patterns(r"\[Errno 32\] Broken pipe"),
        types=_types("BrokenPipeError"),
    ),
    Entry(
        key="connection",
        title="The Hub could not be reached",
        what="The connection to huggingface.co failed.",
        why="There is no network, a proxy or firewall blocks it, DNS does not resolve, or the connection timed "
        "out.",
        fix=say("Check the internet connection{aside:and HTTPS_PROXY if you need a proxy}, then try again. "
                "Downloaded models and local folders keep working offline."),
        pattern=_patterns(r"Name or service not known", r"Temporary failure in name resolution",
                          r"nodename nor servname provided", r"getaddrinfo failed",
                          r"Failed to establish a new connection", r"Max retries exceeded with url",
                          r"Network is unreachable", r"There was a specific connection error",
                          r"Connection (?:refused|reset|aborted)", r"(?:Read|Connect) timed out"),
        types=_types("ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "NetworkError",
                     "RemoteProtocolError", "ConnectionError", "RemoteDisconnected"),
    ),
    Entry(
        key="non_finite",
        title="The result contains NaN or infinity",
        what="A computed tensor contains NaN or infinite values.",
        why="float16 overflows past 65504: large sums (DARE/DELLA rescaling, big task-vector weights) or casting "
        "large values to float16 become infinity, and then NaN.",
        fix="Compute in float32 (Mergesmith always does) and store in bfloat16, which has float32's range, "
        "rather than float16; lower the weights or density if the task vectors add up to large values.",
        pattern=_patterns(
            r"probability tensor contains either `inf`, `nan` or element < 0",
            r"\b(?:NaN|inf)s? (?:values? )?(?:found|detected|encountered)",
            r"contains? (?:NaN|inf|non-finite)\b",
            r"non-finite values?",
            r"returned nan values",
        ),
        remedy=Remedy("dtype", "bfloat16", "in bfloat16"),
    ),
    Entry(
        key="nothing_to_extract",
        title="There is nothing to extract",
        what="The fine-tune and the base model are identical, so the adapter would change nothing.",
        why="LoRA extraction stores the difference between a fine-tune and its base; the wrong pair (the base "
        "twice, or a fine-tune of another base) gives an empty or meaningless difference.",
        fix="Check that the fine-tune really was trained from this base model (its card usually names it) and "
        "pick that pair.",
        pattern=_patterns(
            r"(?:models?|checkpoints?|weights|fine-?tune\w*) (?:are|is) identical",
            r"identical to the base", r"no difference between", r"nothing to extract",
            r"(?:delta|difference)s? (?:is|are) (?:all )?zeros?\b", r"adapter (?:has no effect|changes nothing)",
        ),
    ),
    Entry(
        key="target_modules_missing",
        title="The adapter's modules are not in this model",
        what="The LoRA adapter targets modules that this model does not have, so it would change nothing.",
        why="The adapter was trained for another architecture (module names like q_proj differ between "
        "families), or target_modules names layers the model lacks.",
        fix="Use the adapter with the base model it was trained on (see its adapter_config.json, "
        "base_model_name_or_path), or fix target_modules.",
        pattern=re.compile(r"Target modules [^\n]{0,1000}? not found in the base model"),
        types=_types("NoMatchingPeftModuleError"),
    ),
    Entry(
        key="generation_mode_on_the_hub",
        title="This way of generating moved out of transformers",
        what="The generation settings ask for a decoding method that transformers moved to code on the Hub.",
        why="transformers moved DoLa, contrastive search, group and constrained beam search out of the library "
        "into repositories of code on the Hub; using them means running that code.",
        fix="Remove the setting that asks for it (dola_layers, penalty_alpha, num_beam_groups, constraints) from "
        "generation_config.json; Mergesmith's Try sets them aside itself and generates without them.",
        # The mode's name is bounded: an unbounded one made every search of a long word quadratic.
        pattern=re.compile(r"(?P<mode>[\w ]{1,80}?) requires `trust_remote_code\s*=\s*True` in your `generate` call"),
        refine=lambda match, context: {"what": f"The generation settings ask for {(_group(match, 'mode') or '').strip()}, a "
                                       "decoding method transformers moved to code on the Hub."},
    ),
    Entry(
        key="native_panic",
        title="A library stopped on an internal error",
        what="A library's native code (Rust) stopped on an internal error (a panic) instead of reporting a problem.",
        why="The tokenizers library panics on some inputs it cannot handle, such as a splitting pattern in "
        "tokenizer.json that backtracks without end; the panic is not an ordinary Python error.",
        fix="Check the files the job read (tokenizer.json first); copying them again from the original model "
        "usually helps. If it keeps happening with good files, report it with the details.",
        types=_types("PanicException"),
    ),
    Entry(
        key="remote_code",
        title="The model needs its own code",
        what="The model's repository ships Python code that has to run to load it.",
        why="Some architectures are not in transformers yet and come as code in the repository; running it "
        "means trusting its authors with your machine.",
        fix="Mergesmith never runs code from repositories. Look for a version of the model that uses a standard "
        "architecture, or wait until transformers supports it.",
        pattern=_patterns(r"contains custom code which must be executed", r"trust_remote_code\s*=\s*True"),
    ),
    Entry(
        key="permission_denied",
        title="Mergesmith cannot write there",
        what="A file or folder could not be opened or written: permission denied or read-only.",
        why="The folder belongs to another user, is on a read-only drive, or is locked by another program.",
        fix="Choose an output folder you own (for example in your home folder), or close the program that holds "
        "the file.",
        pattern=_patterns(r"(?:\[Errno 13\] )?Permission denied(?:: '(?P<path>[^']+)')?",
                          r"(?:\[Errno 30\] )?Read-only file system(?:: '(?P<path2>[^']+)')?", r"Access is denied"),
        types=_types("PermissionError"),
        refine=lambda match, context: _refine_path(match, context, "could not be opened or written to"),
    ),
    Entry(
        key="file_not_found",
        title="A file or folder is missing",
        what="A file or folder the job needs does not exist.",
        why="It was moved, deleted, or its path is mistyped; a drive may be disconnected.",
        fix="Check the path, or pick the model again in Mergesmith (Models → Local folders).",
        pattern=_patterns(r"\[Errno 2\] No such file or directory(?:: '(?P<path>[^']+)')?"),
        types=_types("FileNotFoundError"),
        refine=lambda match, context: _refine_path(match, context, "does not exist"),
    ),
    Entry(
        key="missing_package",
        title="A Python package is missing",
        what="The code needs a Python package that is not installed.",
        why="The package is an optional dependency, or the environment is not the one it was installed in.",
        fix="Install it into the same environment (pip install <package>), then try again.",
        pattern=re.compile(r"No module named '(?P<module>[\w.]+)'"),
        types=_types("ModuleNotFoundError"),
        refine=_refine_missing_package,
    ),
)


def catalogue_entry(key: str) -> Entry:
    """The catalogue's entry `key`: its words are the one wording of that problem, wherever it is found (the
    Hub client's own diagnosis words its error from it). Raises KeyError for a key the catalogue does not have."""
    return {entry.key: entry for entry in CATALOGUE}[key]
