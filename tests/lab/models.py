"""The lab's planted optimum: one tiny base and two fine-tunes of it, each trained a few steps on its own kind of
text (animals, computers), and a text that mixes both kinds, on which neither fine-tune alone is best."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from guiapp.checkpoints.samples import LlamaShape, write_llama

ANIMALS = ["the cat sat on the mat and looked at the dog", "the dog ran to the park and the cat stayed home",
           "a bird sang in the tree while the cow ate grass", "the horse and the sheep slept in the barn"]
COMPUTERS = ["a model merges two models into one model", "adapters change a few weights of a large model",
             "the computer reads a file and writes the result", "we run the program and print the numbers"]
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
SHAPE = LlamaShape(hidden=32, intermediate=64, layers=2, heads=4, kv_heads=2, vocab=80)


@dataclass(frozen=True)
class Planted:
    base: Path
    animals: Path
    computers: Path
    mixed_text: Path


def text_of(sentences: list[str], count: int, seed: int) -> str:
    """`count` sentences drawn (seeded) from `sentences`, one a line."""
    chooser = random.Random(seed)
    return "\n".join(chooser.choice(sentences) for _ in range(count)) + "\n"


def write_planted(folder: Path) -> Planted:
    """Write the base, the two fine-tunes (60 Adam steps each) and the mixed evaluation text under `folder`."""
    base = write_llama(folder / "base", SHAPE, dtype=torch.float32, seed=0)
    _write_tokenizer(base)
    animals = _fine_tune(base, folder / "animals", text_of(ANIMALS, 40, seed=1))
    computers = _fine_tune(base, folder / "computers", text_of(COMPUTERS, 40, seed=2))
    mixed = folder / "mixed.txt"
    mixed.write_text("\n".join(text_of(ANIMALS, 12, seed=3).splitlines() + text_of(COMPUTERS, 12, seed=4).splitlines()))
    return Planted(base, animals, computers, mixed)


def _write_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(ANIMALS + COMPUTERS, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder)


def _fine_tune(base: Path, folder: Path, text: str, steps: int = 60) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
