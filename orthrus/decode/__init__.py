"""Decoding: the options object, the Orthrus loop, transformers' decoders, the decode stage, TPF, the frontier."""
