"""Cairn's ANN harness: Cairn's index beside hnswlib, FAISS, ScaNN, NGT and RaBitQ on the same
data, thread count and rounds (see bench/README.md)."""
