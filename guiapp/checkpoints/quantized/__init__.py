"""Dequantizers: quantized checkpoints (bitsandbytes, FP8, compressed-tensors, GPTQ, AWQ, MXFP4) read as full-precision weights."""
