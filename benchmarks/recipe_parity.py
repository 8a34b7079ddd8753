"""Every recipe mergekit runs, Mergesmith runs: recipe features run through both, on small generated models.

    python benchmarks/recipe_parity.py [--venv /tmp/mk] [--keep DIR] [--dtype bfloat16 --compute-dtype recipe]

Installs mergekit 0.1.5 into its own venv (never a project dependency) unless `--venv` already has it. The venv
borrows this project's torch through a .pth file instead of downloading torch again (PyPI's torch wheels pull
several GB of CUDA libraries). Then each recipe below (numbers YAML reads as strings, unknown keys, union
vocabularies, token overrides and padding, tokenizer donors, padded vocabularies, chat templates, `modules:`,
architectures with tied embeddings, fused projections and GPT-2 names) runs through `mergekit-yaml` and through
Mergesmith, and the script prints, per recipe, whether each accepted and ran it and whether the results match:
the same tensors (names, shapes, values within float32 rounding: every recipe computes in float32; embedding
rows compared token by token, since mergekit numbers the tokens a union adds in hash order), the same
vocabulary, vocab_size and chat template. Totals at the end: accepted / ran / matching.

`--dtype D` adds `dtype: D` to every recipe (published recipes mostly say bfloat16) and `--compute-dtype recipe`
runs Mergesmith with its arithmetic in that dtype: tensors must then be equal bit for bit (`--exact` asks that
of the default float32 arithmetic too), and each difference line says how many entries differ.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from guiapp.checkpoints.tensor_roles import is_vocabulary_tensor  # noqa: E402
from guiapp.merging.merge import MergeSettings, run_merge  # noqa: E402
from guiapp.merging.recipe import parse_recipe  # noqa: E402
from tests.recipes.models import (  # noqa: E402
    SPECIALS,
    write_gemma2,
    write_gpt2,
    write_llava,
    write_mistral,
    write_model,
    write_phi3,
    write_tokenizer_files,
)

MERGEKIT = "mergekit==0.1.5"
TWO = "  - model: {a}\n    parameters: {{weight: 0.4}}\n  - model: {b}\n    parameters: {{weight: 0.6}}\n"
RECIPES = {
    "exponent numbers (karcher tol: 1e-5)": ("llama_same", "merge_method: karcher\nparameters: {{tol: 1e-5}}\nmodels:\n" + TWO),
    "exponent numbers (multislerp eps: 1e-8)": ("llama_same", "merge_method: multislerp\nparameters: {{eps: 1e-8}}\nmodels:\n" + TWO),
    "unknown key and parameter typo": ("llama_same", "merge_method: linear\nbase_modle: {a}\nparameters: {{nomalize: true}}\nmodels:\n" + TWO),
    "tokenizer_source: union": ("llama", "merge_method: linear\nbase_model: {a}\ntokenizer_source: union\nmodels:\n" + TWO),
    "tokenizer: {source: union} without base": ("llama", "merge_method: linear\ntokenizer: {{source: union}}\nmodels:\n" + TWO),
    "tokenizer.tokens + pad_to_multiple_of": ("llama", "merge_method: linear\nbase_model: {a}\ntokenizer:\n  source: union\n"
        "  pad_to_multiple_of: 16\n  tokens:\n    d: {{source: {{kind: zero}}}}\n    a: {{source: {b}, force: true}}\n"
        "    c: {{source: {{kind: model_token, model: {a}, token: b}}}}\nmodels:\n" + TWO),
    "tokenizer donor (not merged)": ("llama", "merge_method: linear\ntokenizer_source: {donor}\nmodels:\n" + TWO),
    "padded vocabulary, tokenizer_source: base (Qwen2)": ("qwen2", "merge_method: task_arithmetic\nbase_model: {a}\n"
        "tokenizer_source: base\nmodels:\n  - model: {b}\n    parameters: {{weight: 0.7}}\n"),
    "chat_template: chatml": ("llama_same", "merge_method: linear\nchat_template: chatml\nmodels:\n" + TWO),
    "chat_template: auto": ("llama_same", "merge_method: linear\nchat_template: auto\nmodels:\n" + TWO),
    "chat_template: literal Jinja": ("llama_same", "merge_method: linear\nchat_template: \"{{% for m in messages %}}{{{{ m['content'] }}}}{{% endfor %}}\"\nmodels:\n" + TWO),
    "modules: {default: {slices}} (Mistral)": ("mistral", "merge_method: linear\nmodules:\n  default:\n    parameters: {{weight: 0.5}}\n"
        "    slices:\n      - sources:\n          - model: {a}\n            layer_range: [0, 2]\n          - model: {b}\n"
        "            layer_range: [0, 2]\n"),
    "modules: text_decoder + vision_tower (LLaVA)": ("llava", "merge_method: linear\nbase_model: {a}\nparameters: {{weight: 1.0}}\n"
        "modules:\n  text_decoder:\n    models:\n      - model: {a}\n        parameters: {{weight: 0.3}}\n      - model: {b}\n"
        "        parameters: {{weight: 0.7}}\n  vision_tower:\n    models:\n      - model: {b}\n"),
    "union on Gemma-2 (tied)": ("gemma2", "merge_method: linear\ntokenizer_source: union\nmodels:\n" + TWO),
    "Phi-3 fused, padded, tokenizer_source: base": ("phi3", "merge_method: ties\nbase_model: {a}\ntokenizer_source: base\n"
        "models:\n  - model: {b}\n    parameters: {{weight: 1.0, density: 0.5}}\n"),
    "GPT-2 union + chat_template llama3": ("gpt2", "merge_method: linear\ntokenizer_source: union\nchat_template: llama3\nmodels:\n" + TWO),
}


def build_models(folder: Path) -> dict[str, tuple[Path, Path]]:
    """A pair of models per architecture (different vocabularies where the tokenizer matters)."""
    a_tokens, b_tokens = SPECIALS + ["a", "b", "c"], SPECIALS + ["a", "b", "d", "e"]
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    qwen_tokens = a_tokens + ["<|endoftext|>"]
    return {
        "llama": (write_model(folder / "llama_a", a_tokens, 1, chat_template=template),
                  write_model(folder / "llama_b", b_tokens, 2, chat_template=template)),
        "llama_same": (write_model(folder / "same_a", a_tokens, 1, chat_template=template),
                       write_model(folder / "same_b", a_tokens, 2, chat_template=template)),
        # Real Qwen2 tokenizers hold <|endoftext|> (transformers adds it to one that lacks it).
        "qwen2": (write_model(folder / "qwen_a", qwen_tokens, 3, rows=10, biases=True, model_type="qwen2"),
                  write_model(folder / "qwen_b", qwen_tokens, 4, rows=10, biases=True, model_type="qwen2")),
        "mistral": (write_mistral(folder / "mistral_a", 5), write_mistral(folder / "mistral_b", 6)),
        "llava": (write_llava(folder / "llava_a", 7), write_llava(folder / "llava_b", 8)),
        "gemma2": (write_gemma2(folder / "gemma_a", SPECIALS + ["x", "y"], 9),
                   write_gemma2(folder / "gemma_b", SPECIALS + ["y", "z"], 10)),
        "phi3": (write_phi3(folder / "phi_a", a_tokens, 11, rows=12), write_phi3(folder / "phi_b", a_tokens, 12, rows=12)),
        "gpt2": (write_gpt2(folder / "gpt_a", SPECIALS + ["hello"], 13), write_gpt2(folder / "gpt_b", SPECIALS + ["world", "hello"], 14)),
    }


def ensure_mergekit(venv: Path) -> Path:
    """`mergekit-yaml` of `venv`, creating the venv (sharing this project's torch) and installing mergekit first."""
    tool = venv / "bin" / "mergekit-yaml"
    if tool.exists():
        return tool
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "mergesmith_torch.pth").write_text(str(Path(torch.__file__).parent.parent) + "\n")
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", MERGEKIT], check=True)
    return tool


def run_mergekit(tool: Path, recipe: Path, out: Path) -> str | None:
    """None when mergekit ran the recipe, else the last line of its error."""
    done = subprocess.run([str(tool), str(recipe), str(out)], capture_output=True, text=True, timeout=900)
    if done.returncode == 0:
        return None
    lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit {done.returncode}"


def run_ours(text: str, out: Path, compute_dtype: str = "float32") -> tuple[bool, str | None]:
    """(accepted, error): accepted when the recipe parses and plans; error None when the merge ran."""
    try:
        recipe = parse_recipe(text)
    except Exception as error:  # noqa: BLE001 - reported, not raised
        return False, f"{type(error).__name__}: {error}"
    try:
        run_merge(recipe, MergeSettings(out, compute_dtype=compute_dtype))
    except Exception as error:  # noqa: BLE001
        return True, f"{type(error).__name__}: {error}"
    return True, None


def compare(ours: Path, theirs: Path, exact: bool = False) -> list[str]:
    """What differs between two output folders (empty: they match); `exact`: tensors equal bit for bit."""
    problems = []
    mine = {k: v for f in ours.glob("*.safetensors") for k, v in load_file(f).items()}
    other = {k: v for f in theirs.glob("*.safetensors") for k, v in load_file(f).items()}
    if set(mine) != set(other):
        problems.append(f"tensor names differ: only ours {sorted(set(mine) - set(other))[:3]}, "
                        f"only mergekit's {sorted(set(other) - set(mine))[:3]}")
    va, vb = (_vocabulary(folder) for folder in (ours, theirs))
    if set(va) != set(vb):
        problems.append(f"vocabularies differ: only ours {sorted(set(va) - set(vb))[:4]}, "
                        f"only mergekit's {sorted(set(vb) - set(va))[:4]}")
    for name in sorted(set(mine) & set(other)):
        a, b = mine[name].float(), other[name].float()
        if is_vocabulary_tensor(name) and va and set(va) == set(vb) and a.shape == b.shape:
            # Token ids of tokens new to the base follow mergekit's hash order: compare rows token by token.
            order = torch.arange(b.shape[0])
            order[[va[t] for t in va]] = torch.tensor([vb[t] for t in va])
            b = b[order]
        if a.shape != b.shape:
            problems.append(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
        elif exact and (mine[name].dtype != other[name].dtype or not torch.equal(a, b)):
            problems.append(f"{name}: {int((a != b).sum())} of {a.numel()} entries differ (largest "
                            f"{float((a - b).abs().max()):.3g}), {mine[name].dtype} vs {other[name].dtype}")
        elif not exact and not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            problems.append(f"{name}: largest difference {float((a - b).abs().max()):.3g}")
    for key in ("vocab_size",):
        ca, cb = (json.loads((folder / "config.json").read_text()) for folder in (ours, theirs))
        if ca.get(key) != cb.get(key):
            problems.append(f"config {key}: {ca.get(key)} vs {cb.get(key)}")
    ta, tb = (_chat_template(folder) for folder in (ours, theirs))
    if (ta or "").strip() != (tb or "").strip():
        problems.append("chat templates differ")
    return problems


def _vocabulary(folder: Path) -> dict[str, int]:
    path = folder / "tokenizer.json"
    if not path.is_file():
        return {}
    from tokenizers import Tokenizer  # noqa: PLC0415

    return Tokenizer.from_file(str(path)).get_vocab(with_added_tokens=True)


def _chat_template(folder: Path) -> str | None:
    if (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text()
    path = folder / "tokenizer_config.json"
    return json.loads(path.read_text()).get("chat_template") if path.is_file() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "mergekit-parity-venv")
    parser.add_argument("--keep", type=Path, default=None, help="Keep models and outputs in this folder.")
    parser.add_argument("--dtype", default=None, help="Add `dtype: DTYPE` to every recipe.")
    parser.add_argument("--compute-dtype", default="float32", choices=("float32", "recipe"),
                        help="Mergesmith's arithmetic; `recipe` compares tensors bit for bit.")
    parser.add_argument("--exact", action="store_true", help="Compare tensors bit for bit.")
    args = parser.parse_args()
    tool = ensure_mergekit(args.venv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="recipe-parity-"))
    work.mkdir(parents=True, exist_ok=True)
    pairs = build_models(work / "models")
    donor = write_tokenizer_files(work / "models" / "donor", SPECIALS + ["e", "a", "zzz"])
    counts = {"mergekit ran": 0, "we accepted": 0, "we ran": 0, "matching": 0}
    for number, (title, (arch, template)) in enumerate(RECIPES.items()):
        a, b = pairs[arch]
        text = template.format(a=a, b=b, donor=donor) + (f"dtype: {args.dtype}\n" if args.dtype else "")
        recipe = work / f"recipe{number}.yml"
        recipe.write_text(text)
        theirs_error = run_mergekit(tool, recipe, work / f"mergekit{number}")
        accepted, ours_error = run_ours(text, work / f"ours{number}", args.compute_dtype)
        counts["mergekit ran"] += theirs_error is None
        counts["we accepted"] += accepted
        counts["we ran"] += ours_error is None
        verdict = "-"
        if theirs_error is None and ours_error is None:
            try:
                problems = compare(work / f"ours{number}", work / f"mergekit{number}",
                                   exact=args.exact or args.compute_dtype == "recipe")
            except Exception:  # noqa: BLE001
                problems = [traceback.format_exc().splitlines()[-1]]
            counts["matching"] += not problems
            verdict = "match" if not problems else "DIFFERS: " + "; ".join(problems[:3])
        print(f"{title}\n  mergekit: {'ran' if theirs_error is None else theirs_error}\n"
              f"  mergesmith: {'ran' if ours_error is None else ours_error}\n  result: {verdict}")
    print(f"\n{len(RECIPES)} recipes: " + ", ".join(f"{key} {value}" for key, value in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
