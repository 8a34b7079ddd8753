"""Do Mergesmith's GGUF files load in real llama.cpp and behave like the source model? Measured in one run.

    cd benchmarks/llama_cpp_check && npm install  # once: node-llama-cpp 3.22.1 and its prebuilt CPU binaries
    python benchmarks/llama_cpp_check.py [--models llama,qwen2,...,merged] [--types f32,f16,...] [--json OUT]

`npm install` installs exactly the versions of package-lock.json (and leaves it unchanged); `npm ci` refuses it,
because node-llama-cpp 3.22.1 names optional binary packages for macOS, Windows and RISC-V that the registry does
not have at 3.22.1, so no lock file can list them. The folder's .npmrc leaves out the CUDA and Vulkan builds.

Builds the tiny models of tests/gguf/models.py (random weights, each with its own trained tokenizer) and a model
merged from two Llama models with `mergesmith merge` (a linear merge stored in bfloat16), exports each with
`mergesmith export-gguf` in every type asked for, and has llama.cpp itself (node-llama-cpp's prebuilt binaries,
through llama_cpp_check/check.mjs) load each file, tokenize sample texts and evaluate a text. Against the source
model run by transformers in float32 on the same tokens it prints, per model and type:

- tok: llama.cpp's tokens for the sample texts (BOS/EOS added as llama.cpp adds them to a prompt, special-token
  text parsed) identical to the Hugging Face tokenizer's, and detokenized back to the text;
- ppl Δ: the relative difference of llama.cpp's perplexity on a text from the source's;
- KL: the mean KL divergence (source ‖ llama.cpp) of the full next-token distributions over the text's positions
  (llama.cpp's raw logits over the whole vocabulary, as `llama-perplexity --kl-divergence` uses them), its
  99th percentile and the share of positions whose most likely token agrees;
- KL/f32: the same, against llama.cpp running the same model's f32 file: the quantization alone, without the
  difference between llama.cpp's and transformers' float32 arithmetic.

llama.cpp keeps keys and values in f32 here (`--kv-cache f32`, the file alone); `--kv-cache f16`, llama.cpp's
default, adds its own rounding (a KL of about 5e-7 on the Llama model's f32 file).

Two rows check the check: Llama's f32 file with llama.cpp's default rope theta instead of the model's, and with
q/k not permuted. And llama.cpp's own quantizer (`llama_model_quantize` of the same prebuilt libllama, through
ctypes, as `llama-quantize` runs it) quantizes Mergesmith's f32 file into each type, measured the same way:
"types" counts the tensors stored in the same type in both files (the `_M` mix), "exact" those of the types
Mergesmith makes exactly as llama.cpp does (F32, F16, BF16, Q8_0 and libgguf's Q4_0/Q5_0/Q5_1) with the same
bytes; Q4_K, Q5_K and Q6_K blocks are Mergesmith's own search (fewer steps than llama.cpp's, see guiapp/gguf/blocks.py),
so for them the comparison is "KL ours/theirs": the KL of Mergesmith's file over the KL of llama.cpp's, both
against llama.cpp running the f32 file.

The issue's bars beside them were measured with llama.cpp's own converter and quantizer on small *trained*
models. These models have random weights and perplexities above their vocabulary size (confident, wrong
predictions with large logits), so the same weight error moves their distributions much more than a trained
model's: their KL and perplexity changes from rounding are larger than the bars for llama.cpp's own quantizer
too. What the figures show is whether the file is read as intended (f32 against transformers: metadata, tensor
layout, tokenizer) and whether Mergesmith's quantization is llama.cpp's (the columns side by side).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = Path(__file__).resolve().parent / "llama_cpp_check"
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from guiapp.gguf.check import BUILT_IN_TEXT  # noqa: E402
from tests.gguf import models  # noqa: E402

TYPES = ["f32", "f16", "bf16", "q8_0", "q6_k", "q4_k_m"]
MODELS = ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "merged", "trained"]
# The bars (llama.cpp's converter and quantizer on small trained models): perplexity change in %, KL.
BARS = {"f32": (0.001, 1e-7), "f16": (0.001, 1e-7), "bf16": (0.015, 4e-5), "q8_0": (0.015, 4e-5),
        "q6_k": (0.1, 3e-4), "q5_k_m": (0.1, 3e-4), "q4_k_m": (0.25, 1e-3), "q4_0": (None, None)}
SAMPLES = [
    models.SAMPLE,
    BUILT_IN_TEXT,
    "  Two  spaces,\ttabs,\n\nnew lines; café, naïve, 日本語 and 🙂 — all bytes.",
    "It's 12345678 o'clock, isn't it? We'll see: they've said I'm here.",
]


@dataclass
class Row:
    model: str
    kind: str
    loaded: bool
    error: str = ""
    tokens_same: bool = False
    detokenized_same: bool = False
    tokenization_note: str = ""
    text_tokens: int = 0
    file_bytes: int = 0
    source_ppl: float = math.nan
    ppl_change_percent: float = math.nan  # Mergesmith's file in llama.cpp against the source
    kl_mean: float = math.nan
    kl_p99: float = math.nan
    top1_agreement: float = math.nan
    kl_vs_f32: float = math.nan  # against llama.cpp running Mergesmith's f32 file
    reference_ppl_change_percent: float = math.nan  # llama.cpp's own quantizer (from the f32 file), same model
    reference_kl_mean: float = math.nan
    reference_kl_vs_f32: float = math.nan
    same_types: str = ""  # tensors stored in the same type in both files
    identical_tensors: str = ""  # tensors of an exactly-made type with the same bytes in both files


def _python() -> list[str]:
    return [sys.executable, "-m", "guiapp"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def build_models(root: Path, names: list[str]) -> dict[str, Path]:
    """The tiny source models; "merged" is a linear merge of two Llama models made by `mergesmith merge`."""
    folders: dict[str, Path] = {}
    for name in names:
        if name == "merged":
            first = models.llama(root / "merge-a", seed=1)
            second = models.llama(root / "merge-b", seed=2)
            recipe = root / "merge.yml"
            recipe.write_text(textwrap.dedent(f"""\
                merge_method: linear
                models:
                  - model: {first}
                    parameters: {{weight: 0.6}}
                  - model: {second}
                    parameters: {{weight: 0.4}}
                dtype: bfloat16
                """))
            done = subprocess.run([*_python(), "merge", str(recipe), str(root / "merged")], env=_env(),
                                  capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"mergesmith merge failed:\n{done.stdout}\n{done.stderr}")
            folders[name] = root / "merged"
        elif name == "trained":
            folders[name] = trained_llama(root / name)
        elif name == "gemma3":  # six layers: five sliding-window, one global, each with its rope base
            folders[name] = models.gemma3(root / name, layers=6)
        else:
            folders[name] = models.BUILDERS[name](root / name)
    return folders


def trained_llama(folder: Path, steps: int = 300) -> Path:
    """The tiny Llama trained briefly (next-token loss, AdamW) on the docstrings of Python's standard library, so
    that its next-token distributions look more like a trained model's than random weights' do. The text the
    figures are measured on is not among them."""
    import ast
    import sysconfig

    import transformers

    models.llama(folder)
    text = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:120]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        text += [ast.get_docstring(node) or "" for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module))]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = torch.tensor(tokenizer("\n\n".join(t for t in text if t), add_special_tokens=False)["input_ids"])
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - 65, (16,), generator=generator)
        batch = torch.stack([ids[start:start + 64] for start in starts.tolist()])
        loss = model(batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"trained: loss {loss.item():.2f} after {steps} steps on {len(ids)} tokens", file=sys.stderr)
    model.save_pretrained(folder)
    return folder


def export(folder: Path, out: Path, kind: str) -> None:
    """`mergesmith export-gguf`, a process of its own as the user runs it."""
    subprocess.run([*_python(), "export-gguf", str(folder), str(out), "--type", kind], check=True, env=_env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run_llama_cpp(path: Path, texts: list[str], tokens: list[int], work: Path, options: argparse.Namespace) -> dict:
    """check.mjs on `path`: llama.cpp's tokenizations of `texts` and its logits after every token of `tokens`."""
    request = work / f"{path.stem}.request.json"
    request.write_text(json.dumps({"model": str(path), "texts": texts, "evaluate": tokens,
                                   "threads": options.threads, "kv_cache": options.kv_cache.upper()}))
    done = subprocess.run(["node", str(NODE_DIR / "check.mjs"), str(request)], capture_output=True, text=True,
                          cwd=NODE_DIR)
    if done.returncode not in (0, 2) or not done.stdout.strip():
        return {"error": (done.stderr or done.stdout).strip()[-2000:] or f"exit {done.returncode}"}
    return json.loads(done.stdout)


def hf_tokenizations(folder: Path) -> tuple[list[str], list[dict]]:
    """The sample texts, one more holding the model's EOS and BOS tokens' text, and the Hugging Face
    tokenizer's ids for each, with and without the special tokens it adds."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    texts = [*SAMPLES, f"Hello{tokenizer.eos_token} and{tokenizer.bos_token} again"]
    return texts, [{"with_specials": tokenizer(text, add_special_tokens=True)["input_ids"],
             "plain": tokenizer(text, add_special_tokens=False)["input_ids"]} for text in texts]


def source_logits(folder: Path, tokens: list[int]) -> torch.Tensor:
    """The source model's next-token logits after every token, transformers in float32."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float()


def compare_tokens(texts: list[str], reference: list[dict], answer: dict) -> tuple[bool, bool, str]:
    """Whether llama.cpp tokenized every text as the Hugging Face tokenizer did (special-token text parsed, BOS/EOS
    as llama.cpp adds them to a prompt), and detokenized its tokens back to the text (special tokens rendered)."""
    notes, same_tokens, same_text = [], True, True
    for index, (text, want, got) in enumerate(zip(texts, reference, answer["texts"], strict=True)):
        framed = ([answer["bos"]] if answer["add_bos"] else []) + got["parsed"] + (
            [answer["eos"]] if answer["add_eos"] else [])
        if framed != want["with_specials"] or got["parsed"] != want["plain"]:
            same_tokens = False
            notes.append(f"text {index}: llama.cpp {framed[:12]}… vs HF {want['with_specials'][:12]}…")
        if got["detokenized_parsed"] != text:
            same_text = False
            notes.append(f"text {index} detokenized: {got['detokenized_parsed']!r}")
    return same_tokens, same_text, "; ".join(notes)


def distribution_figures(reference: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """Perplexities of both on `targets`, KL(reference ‖ logits) per position (mean, 99th percentile) and the
    share of positions whose most likely token agrees."""
    log_p = torch.log_softmax(reference.double(), dim=-1)
    log_q = torch.log_softmax(logits.double(), dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    nll_p = -log_p.gather(1, targets[:, None]).mean()
    nll_q = -log_q.gather(1, targets[:, None]).mean()
    return {"ppl_p": float(nll_p.exp()), "ppl_q": float(nll_q.exp()),
            "change": 100.0 * float((nll_q - nll_p).exp() - 1.0), "kl": float(kl.mean()),
            "kl_p99": float(torch.quantile(kl, 0.99)),
            "top1": float((log_p.argmax(-1) == log_q.argmax(-1)).double().mean())}


def llama_quantize(source: Path, out: Path, file_type: int) -> None:
    """llama.cpp's own quantizer (`llama_model_quantize`, the function `llama-quantize` runs, from the same
    prebuilt libllama) on `source`: a process of its own, through ctypes."""
    subprocess.run([sys.executable, __file__, "--llama-quantize", str(source), str(out), str(file_type)],
                   check=True, capture_output=True)


def _llama_quantize_here(source: str, out: str, file_type: int) -> None:
    import ctypes

    bins = NODE_DIR / "node_modules" / "@node-llama-cpp" / "linux-x64" / "bins" / "linux-x64"
    for name in ("libggml-base.so", "libggml.v0.5.0.so"):
        ctypes.CDLL(str(bins / name), mode=ctypes.RTLD_GLOBAL)
    library = ctypes.CDLL(str(bins / "libllama.v0.5.0.so"))

    class Parameters(ctypes.Structure):  # llama_model_quantize_params of this release's include/llama.h
        _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                    ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                    ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool),
                    ("pure", ctypes.c_bool), ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool),
                    ("imatrix", ctypes.c_void_p), ("kv_overrides", ctypes.c_void_p),
                    ("tt_overrides", ctypes.c_void_p), ("prune_layers", ctypes.c_void_p),
                    ("max_buf_size", ctypes.c_size_t)]

    library.llama_model_quantize_default_params.restype = Parameters
    library.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(Parameters)]
    library.llama_model_quantize.restype = ctypes.c_uint32
    library.llama_backend_init()
    parameters = library.llama_model_quantize_default_params()
    parameters.ftype, parameters.nthread = file_type, 2
    if library.llama_model_quantize(source.encode(), out.encode(), ctypes.byref(parameters)) != 0:
        sys.exit(f"llama_model_quantize failed on {source}")


def _logits_of(answer: dict) -> torch.Tensor:
    return torch.tensor(answer["logits"], dtype=torch.float64)[:-1]


def check_model(name: str, folder: Path, kinds: list[str], work: Path, options: argparse.Namespace) -> list[Row]:
    """One row per type: Mergesmith's file of `folder` in llama.cpp against the source in transformers, and
    llama.cpp's own quantizer on the same model beside it."""
    texts, reference_tokens = hf_tokenizations(folder)
    config = json.loads((folder / "config.json").read_text())
    sequence = reference_tokens[1]["with_specials"][: int(config["max_position_embeddings"])]
    reference = source_logits(folder, sequence)[:-1]
    rows, f32_logits, f32_path = [], None, work / f"{name}-f32.gguf"
    for kind in kinds:
        path = work / f"{name}-{kind}.gguf"
        try:
            export(folder, path, kind)
        except subprocess.CalledProcessError as error:
            rows.append(Row(name, kind, False, f"export failed: {error.stderr.decode()[-500:]}"))
            continue
        answer = run_llama_cpp(path, texts, sequence, work, options)
        row = Row(name, kind, "error" not in answer, answer.get("error", ""), file_bytes=path.stat().st_size,
                  text_tokens=len(sequence))
        rows.append(row)
        try:
            if row.loaded:
                _compare(row, answer, sequence, reference, f32_logits, (texts, reference_tokens), path, work,
                         options)
        finally:
            if kind != "f32":
                path.unlink()
        if kind == "f32" and row.loaded and not row.error:
            f32_logits = _logits_of(answer)
            if name == "llama":
                rows += controls(path, sequence, reference, work, options)
    f32_path.unlink(missing_ok=True)
    return rows


def _compare(row: Row, answer: dict, sequence: list[int], reference: torch.Tensor, f32_logits: torch.Tensor | None,
             tokenized: tuple[list[str], list[dict]], path: Path, work: Path, options: argparse.Namespace) -> None:
    """Fills `row`'s figures from llama.cpp's `answer` on `path`, then quantizes the model's f32 file with
    llama.cpp's own quantizer into the same type and measures that too."""
    from guiapp.gguf.quantize import FILE_KINDS

    targets = torch.tensor(sequence[1:])
    row.tokens_same, row.detokenized_same, row.tokenization_note = compare_tokens(*tokenized, answer)
    logits = _logits_of(answer)
    if logits.shape != reference.shape:
        row.error = f"llama.cpp gave logits of shape {tuple(logits.shape)}, the source {tuple(reference.shape)}"
        return
    figures = distribution_figures(reference, logits, targets)
    row.source_ppl, row.ppl_change_percent = figures["ppl_p"], figures["change"]
    row.kl_mean, row.kl_p99, row.top1_agreement = figures["kl"], figures["kl_p99"], figures["top1"]
    if row.kind == "f32" or f32_logits is None:
        return
    row.kl_vs_f32 = distribution_figures(f32_logits, logits, targets)["kl"]
    theirs = work / f"{row.model}-{row.kind}-llama-quantize.gguf"
    llama_quantize(work / f"{row.model}-f32.gguf", theirs, int(FILE_KINDS[row.kind].file_type))
    try:
        row.same_types, row.identical_tensors = identical_tensors(path, theirs)
        answer = run_llama_cpp(theirs, [], sequence, work, options)
    finally:
        theirs.unlink()
    if "error" not in answer:
        their_logits = _logits_of(answer)
        figures = distribution_figures(reference, their_logits, targets)
        row.reference_ppl_change_percent, row.reference_kl_mean = figures["change"], figures["kl"]
        row.reference_kl_vs_f32 = distribution_figures(f32_logits, their_logits, targets)["kl"]


def controls(f32: Path, sequence: list[int], reference: torch.Tensor, work: Path,
             options: argparse.Namespace) -> list[Row]:
    """Checks of the check: copies of Llama's f32 file with the mistakes the issue names, which llama.cpp must show
    as far off: llama.cpp's default rope theta (10000) instead of the model's 500000, and q/k rows left in
    Hugging Face's layout instead of permuted."""
    import shutil

    import gguf

    from guiapp.gguf.architectures import unpermute_rows

    rows = []
    for label in ("f32 θ=1e4", "f32 q/k HF"):
        broken = work / "control.gguf"
        shutil.copyfile(f32, broken)
        reader = gguf.GGUFReader(broken, "r+")
        if label.endswith("1e4"):
            field = reader.fields["llama.rope.freq_base"]
            field.parts[field.data[0]][0] = 10000.0
        else:
            head_dim = int(reader.fields["llama.rope.dimension_count"].contents())
            for tensor in reader.tensors:
                if tensor.name.endswith(("attn_q.weight", "attn_k.weight")):
                    tensor.data[...] = unpermute_rows(torch.from_numpy(tensor.data.copy()), head_dim).numpy()
        reader.data.flush()
        del reader
        answer = run_llama_cpp(broken, [], sequence, work, options)
        broken.unlink()
        row = Row("llama", label, "error" not in answer, answer.get("error", ""), text_tokens=len(sequence),
                  tokens_same=True, detokenized_same=True)
        if row.loaded:
            figures = distribution_figures(reference, _logits_of(answer), torch.tensor(sequence[1:]))
            row.source_ppl, row.ppl_change_percent = figures["ppl_p"], figures["change"]
            row.kl_mean, row.kl_p99, row.top1_agreement = figures["kl"], figures["kl_p99"], figures["top1"]
        rows.append(row)
    return rows


# Types whose blocks Mergesmith makes as llama.cpp does, byte for byte (the K-quants come from its own search).
EXACT_TYPES = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q5_1"}


def identical_tensors(ours: Path, theirs: Path) -> tuple[str, str]:
    """How many tensors of the two files are stored in the same type ("21/21"), and how many of those of an
    exactly-made type hold the same bytes ("9/9")."""
    import gguf

    mine = {tensor.name: tensor for tensor in gguf.GGUFReader(ours).tensors}
    other = {tensor.name: tensor for tensor in gguf.GGUFReader(theirs).tensors}
    typed = [name for name, tensor in mine.items() if name in other and tensor.tensor_type == other[name].tensor_type]
    exact = [name for name in typed if mine[name].tensor_type.name in EXACT_TYPES]
    same = sum(1 for name in exact if bytes(mine[name].data.tobytes()) == bytes(other[name].data.tobytes()))
    return f"{len(typed)}/{len(set(mine) | set(other))}", f"{same}/{len(exact)}"


def _bar(kind: str) -> str:
    if kind.startswith("f32 "):
        return "a mistake on purpose: must be far off"
    ppl, kl = BARS.get(kind, (None, None))
    return "—" if ppl is None else f"≤{ppl:g} % / {kl:.0e}"


def print_table(rows: list[Row], options: argparse.Namespace) -> None:
    tokens = max((row.text_tokens for row in rows), default=0)
    print(f"\nllama.cpp (node-llama-cpp 3.22.1 prebuilt CPU binaries, KV cache {options.kv_cache}) against the source "
          f"in transformers float32, {tokens} tokens of text.\nMergesmith's file; then llama.cpp's own quantizer "
          "(llama_model_quantize) on Mergesmith's f32 file of the same model.\n")
    header = (f"{'model':<7} {'type':<10} {'load':<4} {'tok':<4} {'ppl src':>7} | {'ppl Δ %':>8} {'KL':>8} "
              f"{'KL p99':>8} {'top1':>5} {'KL/f32':>8} | {'ppl Δ %':>8} {'KL':>8} {'KL/f32':>8} {'ours/th':>7} "
              f"{'types':>6} {'exact':>6} | issue bar")
    print(f"{'':<36}| {'Mergesmith':<42}| {'llama.cpp quantizer':<51}|")
    print(header)
    print("-" * len(header))
    for row in rows:
        if not row.loaded or row.error:
            print(f"{row.model:<7} {row.kind:<10} {'NO':<4} {row.error[:300]}")
            continue
        tokens_ok = "ok" if row.tokens_same and row.detokenized_same else "DIFF"
        print(f"{row.model:<7} {row.kind:<10} {'yes':<4} {tokens_ok:<4} {row.source_ppl:>7.1f} | "
              f"{row.ppl_change_percent:>+8.4f} {row.kl_mean:>8.1e} {row.kl_p99:>8.1e} {row.top1_agreement:>5.0%} "
              f"{_figure(row.kl_vs_f32)} | {_figure(row.reference_ppl_change_percent, '+8.4f')} "
              f"{_figure(row.reference_kl_mean)} {_figure(row.reference_kl_vs_f32)} "
              f"{_figure(row.kl_vs_f32 / row.reference_kl_vs_f32 if row.reference_kl_vs_f32 else math.nan, '7.2f')} "
              f"{row.same_types or '—':>6} {row.identical_tensors or '—':>6} | "
              f"{_bar(row.kind)}")
    for row in rows:
        if row.tokenization_note:
            print(f"  {row.model} {row.kind}: {row.tokenization_note}")


def _figure(value: float, style: str = "8.1e") -> str:
    return f"{'—':>8}" if math.isnan(value) else format(value, style)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--llama-quantize":
        _llama_quantize_here(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp's threads")
    parser.add_argument("--kv-cache", default="f32", choices=["f32", "f16"],
                        help="llama.cpp's key/value cache type (f32: the file alone; f16: llama.cpp's default)")
    parser.add_argument("--json", type=Path, help="Also write the rows to this file.")
    arguments = parser.parse_args()
    if not (NODE_DIR / "node_modules" / "node-llama-cpp").is_dir():
        sys.exit(f"node-llama-cpp is not installed: run `npm install` in {NODE_DIR} first.")
    kinds = arguments.types.split(",")
    if "f32" in kinds:  # the f32 file first: the others are compared with it, and llama.cpp quantizes it
        kinds.remove("f32")
        kinds.insert(0, "f32")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="llama-cpp-check-") as temporary:
        work = Path(temporary)
        folders = build_models(work / "models", arguments.models.split(","))
        for name, folder in folders.items():
            rows += check_model(name, folder, kinds, work, arguments)
            print(f"{name}: done", file=sys.stderr, flush=True)
    print_table(rows, arguments)
    if arguments.json:
        arguments.json.write_text(json.dumps([asdict(row) for row in rows], indent=1))


if __name__ == "__main__":
    main()
