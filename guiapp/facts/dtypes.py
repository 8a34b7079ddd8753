"""The one table of dtypes: their names and aliases, sizes, safetensors codes, the words torch's messages use for
them, and what Mergesmith does with each (stores models or adapters in it, probes it, computes in it).

Everything here is plain data: the engine turns names into torch dtypes (`checkpoint.torch_dtype`), the window
and the probe read the lists, and nothing imports torch to learn a dtype's size or name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Dtype:
    """One dtype. `name` is torch's (`str(torch.bfloat16)` is "torch." + name); `code` the safetensors header's.

    `readable`: Mergesmith reads tensors of it into torch (False for codes it cannot compute with: packed
    quantization scales, unsigned integers wider than a byte). `writable`: a job may store a model in it (a
    recipe's dtype/out_dtype, an applied adapter's output, a tried model). `adapter`: an extracted adapter may be
    stored in it. `recommended`: a storage recommendation may name it. `probed`: the probe checks each device in
    it. `computes`: jobs compute in it (every other dtype is converted to one of these first). `short`: the name in
    a narrow column (the probe report's), when `name` is too long for one.
    """

    name: str
    code: str
    bytes: int
    kind: str
    aliases: tuple[str, ...] = ()
    torch_words: tuple[str, ...] = ()
    readable: bool = True
    writable: bool = False
    adapter: bool = False
    recommended: bool = False
    probed: bool = False
    computes: bool = False
    short: str | None = None


# In the probe's order (its report and the Hardware page show the columns so): the dtypes jobs compute in, the
# half types, float8, then the rest. `torch_words` are the C++ scalar type names in torch's error messages.
TABLE: tuple[Dtype, ...] = (
    Dtype("float32", "F32", 4, "32-bit float", ("fp32", "float"), ("Float", "float"),
          writable=True, adapter=True, recommended=True, probed=True, computes=True),
    Dtype("float64", "F64", 8, "64-bit float", ("fp64", "double"), ("Double", "double"),
          writable=True, probed=True, computes=True),
    Dtype("bfloat16", "BF16", 2, "bfloat16", ("bf16",), ("BFloat16",),
          writable=True, adapter=True, recommended=True, probed=True),
    Dtype("float16", "F16", 2, "16-bit float", ("fp16", "half"), ("Half",),
          writable=True, adapter=True, recommended=True, probed=True),
    Dtype("float8_e4m3fn", "F8_E4M3", 1, "8-bit float", (), ("Float8_e4m3fn",), probed=True, short="f8_e4m3"),
    Dtype("float8_e5m2", "F8_E5M2", 1, "8-bit float", (), ("Float8_e5m2",), probed=True, short="f8_e5m2"),
    Dtype("float8_e8m0fnu", "F8_E8M0", 1, "8-bit scale factors", readable=False),
    Dtype("int64", "I64", 8, "64-bit integer"),
    Dtype("int32", "I32", 4, "32-bit integer"),
    Dtype("int16", "I16", 2, "16-bit integer"),
    Dtype("int8", "I8", 1, "8-bit integer"),
    Dtype("uint64", "U64", 8, "unsigned 64-bit integer", readable=False),
    Dtype("uint32", "U32", 4, "unsigned 32-bit integer", readable=False),
    Dtype("uint16", "U16", 2, "unsigned 16-bit integer", readable=False),
    Dtype("uint8", "U8", 1, "unsigned 8-bit integer"),
    Dtype("bool", "BOOL", 1, "boolean"),
)



@dataclass(frozen=True)
class Float8Fields:
    """How a float8 format's codes become bfloat16 bits by moving their fields: the sign stays the top bit, the
    exponent and mantissa bits move left by `shift`, and the bfloat16 read is the true value times 2**-`offset`
    (the difference of the exponent biases). Codes with every bit of `unmapped` set have no such bfloat16
    (e4m3fn's NaNs; e5m2's infinities and NaNs)."""

    shift: int
    offset: int
    unmapped: int


FLOAT8_FIELDS: dict[str, Float8Fields] = {
    "float8_e4m3fn": Float8Fields(shift=4, offset=127 - 7, unmapped=0x7F),
    "float8_e5m2": Float8Fields(shift=5, offset=127 - 15, unmapped=0x7C),
}

# What the compiled dequantizing loops (guiapp/checkpoints/quantized/compiled.py) write, and the LLVM type a value
# is stored as: bfloat16 as its 16 bits (the loops round to it with integer arithmetic), the IEEE formats as such.
DEQUANTIZED_STORAGE: dict[str, str] = {"bfloat16": "i16", "float16": "half", "float32": "float"}

BY_NAME: dict[str, Dtype] = {dtype.name: dtype for dtype in TABLE}
BY_CODE: dict[str, Dtype] = {dtype.code: dtype for dtype in TABLE}


def _smallest_first(names: list[str]) -> tuple[str, ...]:
    # bfloat16 before float16 at the same size: it keeps float32's range.
    return tuple(sorted(names, key=lambda name: (BY_NAME[name].bytes, name != "bfloat16")))


PROBED: tuple[str, ...] = tuple(dtype.name for dtype in TABLE if dtype.probed)
COMPUTE: tuple[str, ...] = tuple(dtype.name for dtype in TABLE if dtype.computes)
# What a model can be stored in (a recipe's out_dtype, apply, try), smallest first as the dropdowns list them.
WRITABLE: tuple[str, ...] = _smallest_first([dtype.name for dtype in TABLE if dtype.writable])
ADAPTER_WRITABLE: tuple[str, ...] = _smallest_first([dtype.name for dtype in TABLE if dtype.adapter])
# Best first: bfloat16 keeps float32's range in half the size, float16 is as small but overflows above 65504;
# float8 loses too much to store a model in, float64 doubles float32 for nothing.
RECOMMENDED_STORAGE: tuple[str, ...] = _smallest_first([dtype.name for dtype in TABLE if dtype.recommended])

# Every way of naming a writable dtype (recipes, configs, options): "bf16", "half", "double"… → torch's name.
_WRITABLE_NAMES: dict[str, str] = {
    alias: dtype.name for dtype in TABLE if dtype.writable for alias in (dtype.name, *dtype.aliases)
}
_TORCH_WORDS: dict[str, str] = {word: dtype.name for dtype in TABLE for word in dtype.torch_words}
# torch's scalar type names of the dtypes jobs use in a message ("got: float != c10::BFloat16"); float8 is left
# out, as it never meets a mixed-dtype operation here.
TORCH_WORD = re.compile(r"(?<![\w:])(?:c10::)?(" + "|".join(
    word for dtype in TABLE if dtype.writable for word in dtype.torch_words) + r")\b")
# torch's scalar type names of the half-precision types, the fnuz float8 variants included (a regex fragment).
HALF_TORCH_WORDS = r"BFloat16|Half|Float8_e4m3fn(?:uz)?|Float8_e5m2(?:fnuz)?"


def dtype_name(dtype: object) -> str:
    """torch's name of a torch dtype, or of its str ("torch.bfloat16" → "bfloat16"); never raises."""
    return str(dtype).removeprefix("torch.")


def short_name(name: str) -> str:
    """`name` as a narrow column shows it ("float8_e4m3fn" → "f8_e4m3"); a name it does not know, unchanged."""
    dtype = BY_NAME.get(name)
    return dtype.short or name if dtype else name


def writable_name(name: object) -> str:
    """The writable dtype `name` stands for ("bf16", "torch.float16", "Double"… → "bfloat16", "float16",
    "float64"). Raises ValueError, worded for a user, for a name that is none."""
    try:
        return _WRITABLE_NAMES[str(name).lower().removeprefix("torch.")]
    except KeyError:
        raise ValueError(f'"{name}" is not a dtype Mergesmith can write (use {_listed(WRITABLE)})') from None


def is_writable_name(name: object) -> bool:
    """True when `writable_name(name)` knows it."""
    return str(name).lower().removeprefix("torch.") in _WRITABLE_NAMES


def compute_for(storage: str) -> str:
    """The dtype a job computes in for tensors stored in `storage`: float64 keeps its precision, everything
    else (half types, float8, float32) computes in float32."""
    return storage if BY_NAME.get(storage, BY_NAME["float32"]).computes else "float32"


def torch_word_name(word: str) -> str:
    """The dtype torch's scalar type name `word` stands for ("BFloat16", "c10::Half", "double" → "bfloat16",
    "float16", "float64"); a word it does not know, lower-cased."""
    word = word.removeprefix("c10::")
    return _TORCH_WORDS.get(word, word.lower())


def _listed(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1]
