"""Mixture-of-experts assembly: several fine-tunes of one base become the routed experts of one MoE model."""
