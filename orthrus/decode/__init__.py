"""Decoding: the trajectory record, the Orthrus loop, transformers' decoders, the decode stage, TPF, the frontier."""
