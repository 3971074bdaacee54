"""Tandem: speculative decoding for local GGUF models, in the terminal."""

__version__ = "0.1.0"
