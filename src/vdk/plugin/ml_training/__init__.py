"""vdk-ml-training: train unmodified PyTorch / Hugging Face code with VDK."""
