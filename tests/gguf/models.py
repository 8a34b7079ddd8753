"""Tiny models of each architecture GGUF export supports, made with transformers (random weights), each with a
small BPE tokenizer trained here with `tokenizers`: byte-level (Llama 3's and Qwen2's splitting rules, GPT-2's)
or SentencePiece-style with byte fallback (Gemma's)."""

from __future__ import annotations

from pathlib import Path

import torch

SENTENCES = [
    "the cat sat on the mat and looked at the dog",
    "a model merges two models into one model",
    "the dog ran to the park and the cat stayed home",
    "adapters change a few weights of a large model",
    "we try the merged model and compare the text it writes 12345",
    "Hello, world! It's 2024; numbers like 3.14 and 1000 appear.",
]
SAMPLE = "The cat looked at the merged model, and the dog ran home! 2024 numbers: 3.14"
CHAT_TEMPLATE = "{% for m in messages %}<|user|> {{ m['content'] }} {% endfor %}"
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_level_tokenizer(folder: Path, split: str | None, bos: bool, specials: list[str]) -> int:
    """A byte-level BPE (`split`: the regex of a Split pre-tokenizer, None: GPT-2's ByteLevel regex) saved in
    `folder`; BOS added by the post-processor when `bos`. Returns its size."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(ignore_merges=split == LLAMA3_SPLIT))
    if split is None:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(SENTENCES, trainer)
    if bos:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{specials[0]} $A", special_tokens=[(specials[0], tokenizer.token_to_id(specials[0]))])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=specials[0], eos_token=specials[1])
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(folder)
    return tokenizer.get_vocab_size()


def spm_tokenizer(folder: Path) -> int:
    """A SentencePiece-style BPE with byte fallback, spaces as "▁" (Gemma's layout), BOS added."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    byte_tokens = [f"<0x{value:02X}>" for value in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=specials + byte_tokens)
    tokenizer.train_from_iterator(SENTENCES, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tokenizer.token_to_id("<bos>"))])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>",
                                      pad_token="<pad>", unk_token="<unk>")
    wrapped.chat_template = CHAT_TEMPLATE
    wrapped.save_pretrained(folder)
    return tokenizer.get_vocab_size()


def _save(folder: Path, config, seed: int) -> Path:
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():  # random weights with some spread, so the logits differ clearly between tokens
        for name, parameter in model.named_parameters():
            if parameter.dim() == 1 and "norm" in name:
                parameter.normal_(0.0 if "gemma" in config.model_type else 1.0, 0.1)
            elif parameter.dim() == 1:
                parameter.normal_(0.0, 0.05)
            else:
                parameter.normal_(0.0, 0.08)
    model.save_pretrained(folder)
    return folder


def llama(folder: Path, seed: int = 0, hidden: int = 256, rope_theta: float = 500000.0) -> Path:
    """A Llama-3-style model (GQA, rope theta 500000, BOS from the post-processor); hidden 256 so that the
    K-quants apply without falling back."""
    import transformers

    size = byte_level_tokenizer(folder, LLAMA3_SPLIT, True, ["<|begin_of_text|>", "<|end_of_text|>"])
    config = transformers.LlamaConfig(vocab_size=size + 4, hidden_size=hidden, intermediate_size=2 * hidden,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=256, rope_theta=rope_theta, tie_word_embeddings=False)
    return _save(folder, config, seed)


def qwen2(folder: Path, seed: int = 0) -> Path:
    import transformers

    size = byte_level_tokenizer(folder, QWEN2_SPLIT, False, ["<|endoftext|>", "<|im_end|>"])
    config = transformers.Qwen2Config(vocab_size=size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                      rope_theta=1000000.0, tie_word_embeddings=False)
    return _save(folder, config, seed)


def qwen3(folder: Path, seed: int = 0) -> Path:
    import transformers

    size = byte_level_tokenizer(folder, QWEN2_SPLIT, False, ["<|endoftext|>", "<|im_end|>"])
    config = transformers.Qwen3Config(vocab_size=size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                      max_position_embeddings=256, rope_theta=1000000.0, tie_word_embeddings=True)
    return _save(folder, config, seed)


def gemma2(folder: Path, seed: int = 0) -> Path:
    import transformers

    size = spm_tokenizer(folder)
    config = transformers.Gemma2Config(vocab_size=size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                       query_pre_attn_scalar=16, max_position_embeddings=256, sliding_window=128,
                                       pad_token_id=0, eos_token_id=1, bos_token_id=2)
    return _save(folder, config, seed)


def gemma3(folder: Path, seed: int = 0, layers: int = 2) -> Path:
    """Gemma 3 (five sliding-window layers, then one global: with 2 layers, both slide)."""
    import transformers

    size = spm_tokenizer(folder)
    config = transformers.Gemma3TextConfig(vocab_size=size, hidden_size=64, intermediate_size=128,
                                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                           head_dim=16, query_pre_attn_scalar=16, max_position_embeddings=256,
                                           sliding_window=128, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    config.architectures = ["Gemma3ForCausalLM"]
    return _save(folder, config, seed)


def phi3(folder: Path, seed: int = 0) -> Path:
    import transformers

    size = byte_level_tokenizer(folder, None, False, ["<|endoftext|>", "<|end|>"])
    config = transformers.Phi3Config(vocab_size=size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                                     original_max_position_embeddings=256, pad_token_id=0, eos_token_id=1,
                                     bos_token_id=0, tie_word_embeddings=False)
    return _save(folder, config, seed)


BUILDERS = {"llama": llama, "qwen2": qwen2, "qwen3": qwen3, "gemma2": gemma2, "gemma3": gemma3, "phi3": phi3}
