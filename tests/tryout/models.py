"""Small models the Try tests run: Llama-shaped causal LMs and a BERT-shaped encoder, each with a real tokenizer
trained here with `tokenizers` on a few sentences and saved with transformers."""

from __future__ import annotations

from pathlib import Path

import torch

from guiapp.checkpoints.samples import BertShape, LlamaShape, write_bert, write_llama

SENTENCES = [
    "the cat sat on the mat and looked at the dog",
    "a model merges two models into one model",
    "the dog ran to the park and the cat stayed home",
    "adapters change a few weights of a large model",
    "we try the merged model and compare the text it writes",
]
CHAT_TEMPLATE = ("{% for m in messages %}<user> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<bot>{% endif %}")
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>", "<user>", "<bot>"]
SHAPE = LlamaShape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=64)
ENCODER_SHAPE = BertShape()


def write_tokenizer(folder: Path, chat_template: bool = True, encoder: bool = False) -> None:
    """A WordLevel tokenizer over SENTENCES (ids: specials first), saved next to the model."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(SENTENCES, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    if not encoder:
        tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>",
                                      eos_token="</s>", unk_token="<unk>")
    if chat_template:
        wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(folder)


def write_causal(folder: Path, dtype: torch.dtype = torch.float32, seed: int = 0, chat_template: bool = True) -> Path:
    """A Llama-shaped causal LM (vocabulary 64, enough for the trained tokenizer) with its tokenizer."""
    write_llama(folder, SHAPE, dtype=dtype, seed=seed)
    write_tokenizer(folder, chat_template)
    return folder


def write_encoder(folder: Path, seed: int = 0) -> Path:
    write_bert(folder, ENCODER_SHAPE, seed=seed)
    write_tokenizer(folder, chat_template=False, encoder=True)
    return folder


def write_lora_adapter(base: Path, folder: Path, seed: int = 0) -> Path:
    """A PEFT LoRA adapter for `base` with non-zero weights (so it changes the output), saved by PEFT."""
    import peft
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                             init_lora_weights=False, task_type="CAUSAL_LM")
    peft.get_peft_model(model, config).save_pretrained(folder)
    return folder
