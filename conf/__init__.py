"""Hydra's config tree, shipped in the package as reluexp.conf (Hydra's pkg:// needs this file)."""
