"""reluexp's Hydra launcher plugin: Hydra's submitit launchers, with every job followed to its end
(reluexp.sweeps.launcher). Found by Hydra in its `hydra_plugins` namespace."""
