"""The named studies, shipped in the package as reluexp.experiments."""
