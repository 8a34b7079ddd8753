"""The model library: the Hugging Face Hub and what is already on this machine. No Qt, no torch.

search (find models) · details (facts and header-only tensor lists) · compatibility (will these merge?) ·
downloads (into the HF cache, with progress, cancel, resume) · resolve (references → folders, metadata for
validation) · cache (list, delete) · local_folders · tokens · connection (endpoint, cache, offline) ·
failures (huggingface_hub errors → HubError subclasses) · headers (safetensors headers, plain Python) ·
references (`org/name@rev` or a folder) · merge_files (which repo files a merge needs).
"""
