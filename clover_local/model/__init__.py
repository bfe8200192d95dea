"""Clover in plain PyTorch: one file per part (norms, RoPE, attention, GDN, MoE), assembled in clover.py."""
