"""reluexp's Hydra launcher plugin: Hydra's submitit launchers, with every job followed to its end
(reluexp.sweeps.launcher), and its joblib launcher, whose wait a stop ends at once. Found by
Hydra in its `hydra_plugins` namespace."""
