"""Export to GGUF, the file format of llama.cpp, LM Studio and Ollama: tensor names, metadata, tokenizer, quantization."""
