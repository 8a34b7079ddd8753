"""What each job kind may use on this machine, read from the probe's matrix.

Storage dtype and compute dtype are separate: a job reads tensors in their storage dtype, computes in float32
(float64 where float32 is missing), and casts back. So a storage dtype S is usable on device D when D can cast
S to and from the compute dtype and S survives a safetensors round trip on the host; the job's own operations
only ever need to work in the compute dtype. The window's device and dtype dropdowns show these `Option`s:
impossible ones disabled with their reason, the others with "computed in float32" where that applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from guiapp.errors import DeviceError, Remedy
from guiapp.facts.dtypes import BY_NAME, COMPUTE, PROBED, RECOMMENDED_STORAGE
from guiapp.system.probe import Check, ProbeResult
from guiapp.system.units import format_bytes

# The operations each job kind runs in its compute dtype (as the merge, LoRA and inference packages use them: merge methods select by
# sorting and random masks, slerp needs acos/sin; extraction's randomized SVD is randn, matmul, qr, svd).
JOB_OPERATIONS: dict[str, tuple[str, ...]] = {
    "merge": (
        "add", "mul", "sum", "abs", "sign", "clamp", "norm", "lerp", "acos", "sin", "sort", "argsort", "rand",
        "compare", "where", "count_nonzero", "softmax", "matmul",
    ),
    "extract": ("matmul", "svd", "qr", "randn", "norm", "sum", "mul", "add", "compare"),
    "apply": ("matmul", "addmm", "add", "mul"),
    # Running a model (Try, perplexity): its layers compute in the dtype the model is loaded in.
    "try": ("matmul", "addmm", "add", "mul", "sum", "softmax", "norm", "compare", "where"),
}
# Merge methods accumulate whole-tensor reductions (norms, dot products, sums) in float64 whatever the compute
# dtype, so a device without float64 (Apple MPS) cannot run them.
JOB_FLOAT64_OPERATIONS: dict[str, tuple[str, ...]] = {
    "merge": ("cast_from_float32", "sum", "mul", "matmul"),
    "extract": (),
    "apply": (),
    "try": (),
}
HOST_STORAGE_OPERATIONS = ("safetensors",)

OPERATION_WORDS = {
    "matmul": "matrix multiplication in {dtype}",
    "addmm": "matrix multiply-add in {dtype}",
    "svd": "SVD in {dtype}",
    "qr": "QR decomposition in {dtype}",
    "randn": "normal random numbers in {dtype}",
    "topk": "top-k selection in {dtype}",
    "kthvalue": "k-th value selection in {dtype}",
    "sort": "sorting in {dtype}",
    "argsort": "ranking in {dtype}",
    "rand": "random numbers in {dtype}",
    "softmax": "softmax in {dtype}",
    "bernoulli": "random masks in {dtype}",
    "norm": "norms in {dtype}",
    "safetensors": "saving {dtype} to safetensors",
    "to_host": "copying {dtype} tensors to and from the CPU",
    "abs": "absolute values in {dtype}",
    "acos": "arc cosines in {dtype}",
    "add": "addition in {dtype}",
    "mul": "multiplication in {dtype}",
    "sum": "sums in {dtype}",
    "sign": "signs in {dtype}",
    "sin": "sines in {dtype}",
    "clamp": "clamping in {dtype}",
    "lerp": "interpolation in {dtype}",
    "compare": "comparisons in {dtype}",
    "where": "choosing values by a mask in {dtype}",
    "count_nonzero": "counting non-zero values in {dtype}",
    "cumsum": "running sums in {dtype}",
    "quantile": "quantiles in {dtype}",
    "numpy": "converting {dtype} to NumPy",
}

# A compute device below this fraction of the CPU's float32 matmul speed (5× slower) is flagged slow.
SLOW_FRACTION_OF_CPU = 0.2


@dataclass(frozen=True)
class Option:
    """One entry of a dtype dropdown: job kind × device × storage dtype.

    `possible` False comes with `reason` (shown on the disabled item). `compute_dtype` is what the job computes
    in; `note` says so when it differs from the storage dtype; `slow` marks a combination that works but runs
    far slower than this machine's CPU in float32 (the note says by how much).
    """

    job: str
    device: str
    storage_dtype: str
    possible: bool
    compute_dtype: str | None
    reason: str | None = None
    slow: bool = False
    note: str = ""

    @property
    def label(self) -> str:
        if not self.possible:
            return f"{self.storage_dtype} (not available: {self.reason})"
        return f"{self.storage_dtype} ({self.note})" if self.note else self.storage_dtype


@dataclass(frozen=True)
class DeviceOption:
    """One entry of a device dropdown: usable when at least one storage dtype is possible there."""

    device: str
    label: str
    possible: bool
    reason: str | None = None


def option(
    result: ProbeResult, job: str, device: str, storage_dtype: str, compute_dtype: str | None = None
) -> Option:
    """Whether `job` ("merge", "extract", "apply") can store `storage_dtype` on `device`, and how.

    `compute_dtype` None picks float32 (float64 for float64 storage), or the other one where the first lacks an
    operation. Raises ValueError for an unknown job kind, dtype or compute dtype (a programming error).
    """
    if job not in JOB_OPERATIONS:
        raise ValueError(f"unknown job kind {job!r}; expected one of {sorted(JOB_OPERATIONS)}")
    if storage_dtype not in PROBED:
        raise ValueError(f"unknown dtype {storage_dtype!r}; expected one of {PROBED}")
    if compute_dtype is not None and compute_dtype not in COMPUTE:
        raise ValueError(f"compute dtype {compute_dtype!r}: jobs compute in one of {COMPUTE}")
    if result.device(device) is None:
        present = ", ".join(d["id"] for d in result.devices) or "none"
        return Option(job, device, storage_dtype, False, None, f"there is no {device} on this machine ({present})")
    if compute_dtype:
        candidates: tuple[str, ...] = (compute_dtype,)
    else:  # float64 models keep their precision; everything else computes in float32
        candidates = tuple(sorted(COMPUTE, key=lambda dtype: dtype != storage_dtype))
    refusals = []
    for candidate in candidates:
        failure = _first_failure(result, device, _needed(job, storage_dtype, candidate))
        if failure is None:
            return _possible(result, job, device, storage_dtype, candidate)
        refusals.append(failure)
    return Option(job, device, storage_dtype, False, None, refusals[0])


def dtype_options(result: ProbeResult, job: str, device: str) -> list[Option]:
    """One `Option` per storage dtype, in the order of `PROBED`, for the dtype dropdown (for "try": what
    a model stored in that dtype runs in, see `inference_option`)."""
    if job == "try":
        return [inference_option(result, device, dtype) for dtype in PROBED]
    return [option(result, job, device, dtype) for dtype in PROBED]


def device_options(result: ProbeResult, job: str) -> list[DeviceOption]:
    """One entry per probed device for the device dropdown, CPU first."""
    entries = []
    for device in result.devices:
        options = dtype_options(result, job, device["id"])
        usable = any(o.possible for o in options)
        reason = None if usable else options[0].reason
        entries.append(DeviceOption(device["id"], describe_device(device), usable, reason))
    return entries


def require_compute(result: ProbeResult, job: str, device: str, compute_dtype: str) -> None:
    """Raise DeviceError when the probe did not see every operation `job` computes with work in `compute_dtype`
    on `device` (a merge computing in the recipe's dtype, as mergekit does, instead of float32)."""
    failure = _first_failure(result, device, [(compute_dtype, operation, False) for operation in JOB_OPERATIONS[job]])
    if failure is not None:
        raise DeviceError(
            f"{_job_words(job).capitalize()} cannot compute in {compute_dtype} on {device}: {failure}.",
            why="Computing in the recipe's dtype runs every operation of the method in that dtype.",
            hint="Compute in float32 (the default, and the more accurate), or choose another device.",
            remedy=Remedy("compute_dtype", "float32", "in float32"),
        )


def inference_option(result: ProbeResult, device: str, storage_dtype: str) -> Option:
    """The dtype a model stored as `storage_dtype` runs in on `device` (job kind "try"), as one `Option`.

    Unlike a merge, a model runs in the dtype it is loaded in: the storage dtype itself when `device` computes
    every operation of a forward pass in it at full speed; otherwise float32 (a half dtype without kernels here,
    or emulated far slower than float32), with a note saying so. Model, adapter and inputs all use
    `compute_dtype`. An impossible combination comes back with `possible` False and the reason; raises ValueError
    for an unknown dtype.
    """
    if storage_dtype not in PROBED:
        raise ValueError(f"unknown dtype {storage_dtype!r}; expected one of {PROBED}")
    if result.device(device) is None:
        return option(result, "try", device, storage_dtype)
    native = [(storage_dtype, operation, False) for operation in JOB_OPERATIONS["try"]]
    native_failure = _first_failure(result, device, native)
    if native_failure is None:
        candidate = _possible(result, "try", device, storage_dtype, storage_dtype)
        if not candidate.slow:
            return candidate
        native_failure = f"{storage_dtype} is {candidate.note.removeprefix('slow: ')}"
    fallback = option(result, "try", device, storage_dtype)
    if not fallback.possible:
        return fallback
    return Option("try", device, storage_dtype, True, fallback.compute_dtype, None, fallback.slow,
                  f"computed in {fallback.compute_dtype}: {native_failure}")


def recommended_storage(result: ProbeResult, job: str, device: str) -> Option | None:
    """The storage dtype to recommend for `job` on `device`: the first of RECOMMENDED_STORAGE that works at full
    speed, else the first that works at all; None when none does."""
    options = [option(result, job, device, dtype) for dtype in RECOMMENDED_STORAGE]
    usable = [choice for choice in options if choice.possible]
    return next((choice for choice in usable if not choice.slow), usable[0] if usable else None)


def device_verdict(result: ProbeResult, device: dict) -> str:
    """The answer for one device, first: "On this CPU: store in bfloat16 — half the size of float32; the merge is
    computed in float32 either way." and the jobs whose answer differs, and the dtype a tried model runs in."""
    where = "this CPU" if device["kind"] == "cpu" else f"{device['id']} ({device['name']})"
    merge = recommended_storage(result, "merge", device["id"])
    if merge is None:
        reason = option(result, "merge", device["id"], "float32").reason
        return f"On {where}: no merge can run here ({reason}); use another device."
    size = BY_NAME[merge.storage_dtype].bytes / BY_NAME["float32"].bytes
    relative = "the size of float32" if size == 1 else "half the size of float32" if size == 0.5 else \
        f"{size:g}× the size of float32"
    sentences = [f"On {where}: store in {merge.storage_dtype} — {relative}; the merge is computed in "
                 f"{merge.compute_dtype} either way."]
    for job in ("extract", "apply"):
        chosen = recommended_storage(result, job, device["id"])
        if chosen is None:
            sentences.append(f"{_job_words(job).capitalize()} cannot run here.")
        elif chosen.storage_dtype != merge.storage_dtype:
            sentences.append(f"For {_job_words(job)}: store in {chosen.storage_dtype}.")
    tried = inference_option(result, device["id"], merge.storage_dtype)
    if tried.possible:
        sentences.append(f"A {merge.storage_dtype} model runs in {tried.compute_dtype} when you try it.")
    return " ".join(sentences)


def check_words(check: Check | None, device: str) -> str:
    """A probe check in plain words for a tooltip (no exception text): what was tested, whether it works, and
    what a failure means for the jobs."""
    if check is None:
        return "Not tested."
    words = _operation_words(check.operation, check.dtype)
    words = words[:1].upper() + words[1:]
    if check.ok:
        return f"{words} works on {device}."
    missing = "not implemented" in (check.error or "")
    said = f"{words} is not available on {device} in this PyTorch build." if missing else \
        f"{words} failed on {device} when tested."
    if check.operation.startswith(("cast_", "to_host", "safetensors")):
        return f"{said} Models cannot be stored in {check.dtype} here."
    if check.dtype not in COMPUTE:
        return f"{said} Jobs compute in float32, so this does not limit what they can store."
    return f"{said} Jobs that need it cannot run on {device}."


def describe_device(device: dict) -> str:
    """A readable one-line name: "CPU: AMD EPYC, 2 cores, 23.5 GB RAM", "cuda:0: NVIDIA RTX 4090, 24.0 GB"."""
    if device["kind"] == "cpu":
        cores = device.get("cores_physical") or device.get("cores_logical")
        return f"CPU: {device['name']}, {cores} cores, {format_bytes(device['memory_total'])} RAM"
    memory = f", {format_bytes(device['memory_total'])}" if device.get("memory_total") else ""
    return f"{device['id']}: {device['name']}{memory}"


def _needed(job: str, storage_dtype: str, compute_dtype: str) -> list[tuple[str, str, bool]]:
    """(dtype, operation, on host) triples the job needs: storage casts, host file I/O, compute, reductions."""
    needed = [(storage_dtype, f"cast_to_{compute_dtype}", False), (storage_dtype, f"cast_from_{compute_dtype}", False)]
    needed += [(storage_dtype, "to_host", False)]
    needed += [(storage_dtype, operation, True) for operation in HOST_STORAGE_OPERATIONS]
    needed += [(compute_dtype, operation, False) for operation in JOB_OPERATIONS[job]]
    needed += [("float64", operation, False) for operation in JOB_FLOAT64_OPERATIONS[job]]
    return needed


def _first_failure(result: ProbeResult, device: str, needed: list[tuple[str, str, bool]]) -> str | None:
    for dtype, operation, on_host in needed:
        where = "cpu" if on_host else device
        check = result.check(where, dtype, operation)
        words = _operation_words(operation, dtype)
        if check is None:
            untested = "the probe did not get that far" if result.problem else "it was not probed"
            return f"{words} on {where} was not tested ({untested})"
        if not check.ok:
            return f"{words} fails on {where} ({check.error})"
    return None


def _possible(result: ProbeResult, job: str, device: str, storage_dtype: str, compute_dtype: str) -> Option:
    notes = [] if storage_dtype == compute_dtype else [f"computed in {compute_dtype}"]
    slow = False
    cpu_speed = result.speed("cpu", "float32", "matmul")
    speed = result.speed(device, compute_dtype, "matmul")
    if cpu_speed and speed and speed.gflops and cpu_speed.gflops and (device, compute_dtype) != ("cpu", "float32"):
        ratio = cpu_speed.gflops / speed.gflops
        if speed.gflops < SLOW_FRACTION_OF_CPU * cpu_speed.gflops:
            slow = True
            notes.append(f"slow: {ratio:.0f}× slower than float32 on the CPU")
    return Option(job, device, storage_dtype, True, compute_dtype, None, slow, "; ".join(notes))


def _operation_words(operation: str, dtype: str) -> str:
    """The check in words, for a refusal reason: "SVD in float32", "converting float64 to float32"."""
    if operation.startswith("cast_to_"):
        return f"converting {dtype} to {operation.removeprefix('cast_to_')}"
    if operation.startswith("cast_from_"):
        return f"converting {operation.removeprefix('cast_from_')} to {dtype}"
    return OPERATION_WORDS.get(operation, f"{operation} in {{dtype}}").format(dtype=dtype)


def _job_words(job: str) -> str:
    return {"merge": "a merge", "extract": "a LoRA extraction", "apply": "applying a LoRA",
            "try": "trying a model"}[job]
